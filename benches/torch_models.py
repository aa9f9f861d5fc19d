"""The bench models of ../shared/bench as torch nn.Modules, from the same safetensors.

Shared by gpu_bench.py (the CUDA target against torch.compile on a GPU) and torch_peer.py
(the C target's optional peer, torch.compile on the CPU), so that both time the same
torch model. The structures are the bench README's; numpy and torch are imported only
by the functions that need them, so that gpu_bench.py's dry run needs neither.
"""

import json
import struct
import sys

MODELS = ("mlp", "lenet", "cnn", "gpt_block")

# Each model's layers as (Mithril parameter prefix, kind, arguments). The safetensors
# names are PREFIX_weight and PREFIX_bias; the torch module keeps the prefix as its
# attribute name, so the mapping is the README's `_` -> `.` at the last underscore
# only and no name has to be guessed back (ln_1 stays ln_1).
LAYERS = {
    "mlp": [("fc1", "linear", {}), ("fc2", "linear", {}), ("fc3", "linear", {})],
    "lenet": [("conv1", "conv", {"padding": 2}), ("conv2", "conv", {"padding": 0}),
              ("fc1", "linear", {}), ("fc2", "linear", {}), ("fc3", "linear", {})],
    "cnn": [("stem", "conv", {"padding": 1})]
           + [(f"block{b}_conv{c}", "conv", {"padding": 1}) for b in (1, 2) for c in (1, 2)]
           + [("fc", "linear", {})],
    "gpt_block": [("ln_1", "layernorm", {}), ("c_attn", "linear", {}), ("c_proj", "linear", {}),
                  ("ln_2", "layernorm", {}), ("c_fc", "linear", {}), ("mlp_proj", "linear", {})],
}
GPT_HEADS, GPT_SEQ = 12, 128


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors_header(path):
    """The safetensors header (name -> dtype, shape, data_offsets), read without the package."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def check_params(name, path, count):
    """Checks the safetensors file holds exactly the parameters LAYERS gives the torch
    model, in the shapes its layers take: a layer missed or misnamed here would otherwise
    only surface where torch runs, as a load_state_dict error."""
    header, _ = safetensors_header(path)
    want = set()
    for prefix, kind, _ in LAYERS[name]:
        w, b = header.get(f"{prefix}_weight"), header.get(f"{prefix}_bias")
        if w is None or b is None:
            sys.exit(f"torch_models: {path}: no {prefix}_weight or {prefix}_bias")
        ranks = {"linear": (2, 1), "conv": (4, 4), "layernorm": (1, 1)}[kind]
        out_dim = w["shape"][0]
        if (len(w["shape"]), len(b["shape"])) != ranks or prod(b["shape"]) != out_dim or w["dtype"] != "F32":
            sys.exit(f"torch_models: {path}: {prefix} ({kind}) has weight {w['shape']} {w['dtype']} and bias {b['shape']}")
        want |= {f"{prefix}_weight", f"{prefix}_bias"}
    if set(header) != want:
        sys.exit(f"torch_models: {path}: parameters {sorted(set(header) ^ want)} are in only one of the file and the torch model")
    total = sum(prod(t["shape"]) for t in header.values())
    if total != count:
        sys.exit(f"torch_models: {path}: {total} parameters, the manifest says {count}")


def load_params(path):
    """NAME -> f32 array of a safetensors file (numpy, without the safetensors package)."""
    import numpy as np
    header, start = safetensors_header(path)
    # A bytearray, so that the arrays are writable: torch warns on read-only ones.
    data = bytearray(open(path, "rb").read())
    return {k: np.frombuffer(data[start + v["data_offsets"][0]:start + v["data_offsets"][1]], dtype="<f4").reshape(v["shape"])
            for k, v in header.items()}


def torch_model(name, params):
    """The model as an nn.Module holding the safetensors weights, on the CPU, in eval mode
    and without gradients (gpu_bench.py moves it to the GPU)."""
    import torch
    from torch import nn
    F = nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            for prefix, kind, kw in LAYERS[name]:
                w = params[f"{prefix}_weight"]
                if kind == "linear":
                    layer = nn.Linear(w.shape[1], w.shape[0])
                elif kind == "conv":
                    layer = nn.Conv2d(w.shape[1], w.shape[0], w.shape[2:], **kw)
                else:
                    layer = nn.LayerNorm(w.shape[0], eps=1e-5)
                setattr(self, prefix, layer)

        def forward(self, x):
            return getattr(self, name)(x)

        def mlp(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

        def lenet(self, x):
            h = F.max_pool2d(F.relu(self.conv1(x)), 2)
            h = F.max_pool2d(F.relu(self.conv2(h)), 2).flatten(1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))

        def cnn(self, x):
            h = F.relu(self.stem(x))
            for block in ("block1", "block2"):
                y = getattr(self, f"{block}_conv2")(F.relu(getattr(self, f"{block}_conv1")(h)))
                h = F.relu(y + h)
            return self.fc(h.flatten(2).mean(-1))

        def gpt_block(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, GPT_HEADS, c // GPT_HEADS).transpose(1, 2)
                       for z in self.c_attn(self.ln_1(x)).split(c, dim=-1))
            # torch's own attention, as a torch user would write it: the default scale is
            # 1/sqrt(64) and is_causal masks above the diagonal, as the Mithril model does.
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    model = Net()
    state = {}
    for key, value in params.items():
        prefix, kind = key.rsplit("_", 1)
        state[f"{prefix}.{kind}"] = torch.from_numpy(value.reshape(-1) if value.ndim == 4 and kind == "bias" else value)
    model.load_state_dict(state, strict=True)
    return model.eval().requires_grad_(False)
