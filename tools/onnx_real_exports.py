"""Real models exported to ONNX by PyTorch's own exporters, with ONNX Runtime's outputs:
the committed test data of tests/onnx_real.rs (issue 41, "real exports").

Each model is a torchvision or Hugging Face transformers architecture at a tiny
configuration (hidden sizes 16 to 64, two layers) with random weights (seeded: no
download), exported by `torch.onnx.export` twice, with the classic TorchScript-based
exporter (dynamo=False, opset 17) and with the dynamo exporter (dynamo=True, opset 20,
torch.export then onnxscript's torchlib and its optimizer), each as a user would call
it. Shapes are fixed, except where a model is meant to take any batch or sequence
length: there they are dim_params (`dynamic_axes` for the classic exporter,
`dynamic_shapes` for dynamo).

For each export NAME it writes OUT_DIR/NAME/:
  model.onnx           the exported model (weights inline: each file is well under 2 GB)
  input_<name>.npy     the inputs, seeded random data (token ids in the vocabulary,
                       attention masks with padding)
  output_<name>.npy    ONNX Runtime's outputs on them (CPU, one thread, its default
                       graph optimizations)
and OUT_DIR/MANIFEST.json: per export, the model it comes from, the exporter, the
opset, the package versions, the inputs' and outputs' shapes (symbols by name) and the
model file's size. CI reads only these files: it needs neither torch nor this script.

Pinned versions, checked at start (another version writes other graphs, and the
committed files must be what this script writes):
  torch==2.15.0 torchvision==0.29.2 transformers==5.24.0 onnxscript==0.7.2
      the exporters and the models they export; PyPI's torch wheel (CUDA build: the
      export itself runs on the CPU)
  onnx==1.22.0 onnxruntime==1.32.0 numpy==2.4.6
      as ~/.cache/mithrilc/onnx-1.22.0, which .ci/run installs for the node tests
Set up once, for example:
  python3 -m venv ~/.cache/mithrilc/torch-export
  ~/.cache/mithrilc/torch-export/bin/pip install torch==2.15.0 torchvision==0.29.2 \\
      transformers==5.24.0 onnxscript==0.7.2 onnx==1.22.0 onnxruntime==1.32.0 numpy==2.4.6

Deterministic: the same versions write byte-identical files.

Usage: python tools/onnx_real_exports.py [OUT_DIR] [--models NAME,...]
       (OUT_DIR defaults to tests/onnx/real beside this script)
"""

import json
import os
import sys
import warnings

PINNED = {
    "torch": "2.15.0",
    "torchvision": "0.29.2",
    "transformers": "5.24.0",
    "onnxscript": "0.7.2",
    "onnx": "1.22.0",
    "onnxruntime": "1.32.0",
    "numpy": "2.4.6",
}
CLASSIC_OPSET = 17
DYNAMO_OPSET = 20
SEED = 20260041


def check_versions():
    import importlib.metadata as md

    wrong = []
    for pkg, want in PINNED.items():
        try:
            have = md.version(pkg)
        except md.PackageNotFoundError:
            have = "not installed"
        # PyPI's torch and torchvision carry a local "+cuXYZ" tag: the same code.
        if have.split("+")[0] != want:
            wrong.append(f"{pkg} {have} (pinned {want})")
    if wrong:
        raise SystemExit("onnx_real_exports: other versions than those pinned: " + ", ".join(wrong) + "\n(see this script's header)")


check_versions()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402
from torchvision.models.resnet import BasicBlock  # noqa: E402

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()


def seeded(build):
    """`build()` with torch's generator at SEED: the same random weights every run."""
    torch.manual_seed(SEED)
    return build().eval()


class TinyResNet(torch.nn.Module):
    """torchvision's ResNet at a width of 16 and 32 (its own fixes 64 to 512): its stem,
    two BasicBlocks (the second strided, with the 1x1 downsample) and its head."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        down = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1, 2, bias=False), torch.nn.BatchNorm2d(32))
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2, downsample=down)
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def trained_like(model):
    """Batch norms' running statistics and affine parameters away from their 0 and 1 (a
    trained network's are: an exporter that folds them into the convolutions must fold
    real values), and linear layers at PyTorch's default initialization rather than
    torchvision's normal(0, 0.01), which leaves a deep network's logits near 1e-3, where
    the tests' absolute tolerance (1e-4) would hide most errors."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
            elif isinstance(m, torch.nn.Linear):
                m.reset_parameters()
    return model


class Wrapper(torch.nn.Module):
    """A Hugging Face model called with keyword inputs, returning the named outputs as a
    tuple (what the exporters take)."""

    def __init__(self, model, inputs, outputs):
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, *args):
        out = self.model(**dict(zip(self.inputs, args)))
        return tuple(getattr(out, o) for o in self.outputs)


def hf(cls, config, inputs, outputs):
    def build():
        # With the configuration's default attention (torch's scaled_dot_product_attention),
        # as a user's export gets it.
        return Wrapper(cls(config), inputs, outputs)

    return build


def image(shape):
    return lambda rng: {"input": rng.standard_normal(shape).astype(np.float32)}


def tokens(vocab, batch, seq, mask=False, types=False):
    """Token ids; with `mask`, an attention mask whose later rows pad their last
    positions (row b keeps seq - 2b tokens); with `types`, token type ids (two segments)."""

    def make(rng):
        out = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64)}
        if mask:
            m = np.ones((batch, seq), np.int64)
            for b in range(batch):
                m[b, max(1, seq - 2 * b):] = 0
            out["attention_mask"] = m
        if types:
            t = np.zeros((batch, seq), np.int64)
            t[:, seq // 2:] = 1
            out["token_type_ids"] = t
        return out

    return make


BERT = transformers.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=32, type_vocab_size=2)
GPT2 = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False)
VIT = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, num_labels=10)
WHISPER = transformers.WhisperConfig(num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64, max_source_positions=16,
                                     max_target_positions=16, vocab_size=96)
WAV2VEC2 = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                       conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2), feat_extract_norm="group",
                                       num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, vocab_size=32)
LLAMA = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=32, use_cache=False)
ROBERTA = transformers.RobertaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=40, pad_token_id=1)
SEGFORMER = transformers.SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                         patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                                         decoder_hidden_size=32, num_labels=4, initializer_range=0.2)
T5 = transformers.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
                           relative_attention_max_distance=16, feed_forward_proj="relu")

# MobileNets cut short (their first stages, both kinds of block): the emulated CUDA
# build of the whole torchvision network takes the tests half a minute.
MOBILENET_V2 = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2], [6, 64, 1, 2]]
MOBILENET_V3_SMALL = torchvision.models.mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.5)[0][:5]

# name: (what it is, how to build it, its inputs from a numpy generator, its outputs'
# names, the dimensions that stay symbolic: {input: {axis: symbol}}).
MODELS = {
    "resnet_tiny": ("torchvision ResNet (BasicBlock) at widths 16 and 32, with a symbolic batch",
                    lambda: trained_like(TinyResNet()), image((2, 3, 32, 32)), ["logits"], {"input": {0: "batch"}}),
    "mobilenet_v2": ("torchvision MobileNetV2(width_mult=0.5) with the first 4 of its 7 stages: depthwise convolutions, ReLU6",
                     lambda: trained_like(torchvision.models.MobileNetV2(num_classes=10, width_mult=0.5, inverted_residual_setting=MOBILENET_V2)),
                     image((1, 3, 32, 32)), ["logits"], {}),
    "mobilenet_v3_small": ("torchvision MobileNetV3 small (width_mult=0.5) with the first 5 of its 11 blocks: depthwise convolutions, "
                           "squeeze-excitation, hardswish",
                           lambda: trained_like(torchvision.models.MobileNetV3(MOBILENET_V3_SMALL, 128, num_classes=10)),
                           image((1, 3, 32, 32)), ["logits"], {}),
    "shufflenet_v2": ("torchvision ShuffleNetV2 at stages [2, 2, 2], channels [8, 16, 32, 64, 128]: channel shuffle, Split",
                      lambda: trained_like(torchvision.models.ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], num_classes=10)),
                      image((1, 3, 32, 32)), ["logits"], {}),
    "bert": ("transformers BertModel (hidden 32, 2 layers, 4 heads) with an attention mask that pads",
             hf(transformers.BertModel, BERT, ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state", "pooler_output"]),
             tokens(96, 2, 8, mask=True, types=True), ["last_hidden_state", "pooler_output"], {}),
    "bert_dynamic": ("bert with symbolic batch and sequence length",
                     hf(transformers.BertModel, BERT, ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state", "pooler_output"]),
                     tokens(96, 2, 8, mask=True, types=True), ["last_hidden_state", "pooler_output"],
                     {n: {0: "batch", 1: "sequence"} for n in ["input_ids", "attention_mask", "token_type_ids"]}),
    # With its attention mask (all ones at batch 1), as generation calls it: without one,
    # transformers looks for packed sequences with torch.diff, which the classic
    # exporter cannot export.
    "gpt2": ("transformers GPT2LMHeadModel (n_embd 32, 2 layers, 4 heads): causal decoder, tied head",
             hf(transformers.GPT2LMHeadModel, GPT2, ["input_ids", "attention_mask"], ["logits"]), tokens(96, 1, 8, mask=True),
             ["logits"], {}),
    "vit": ("transformers ViTForImageClassification (32x32 image, 8x8 patches, hidden 32, 2 layers), with a symbolic batch",
            hf(transformers.ViTForImageClassification, VIT, ["pixel_values"], ["logits"]),
            lambda rng: {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}, ["logits"],
            {"pixel_values": {0: "batch"}}),
    "whisper_encoder": ("transformers WhisperEncoder (16 mel bins, d_model 32, 2 layers): 1-D convolutions, GELU",
                        hf(transformers.models.whisper.modeling_whisper.WhisperEncoder, WHISPER, ["input_features"], ["last_hidden_state"]),
                        lambda rng: {"input_features": rng.standard_normal((1, 16, 32)).astype(np.float32)}, ["last_hidden_state"], {}),
    "wav2vec2": ("transformers Wav2Vec2Model (3 conv layers of 16 channels, group norm, hidden 32, 2 layers): 1-D convolutions on raw audio",
                 hf(transformers.Wav2Vec2Model, WAV2VEC2, ["input_values"], ["last_hidden_state"]),
                 lambda rng: {"input_values": rng.standard_normal((1, 400)).astype(np.float32)}, ["last_hidden_state"], {}),
    "t5_encoder": ("transformers T5EncoderModel (d_model 32, 2 layers, 4 heads): RMS norm, relative position buckets",
                   hf(transformers.T5EncoderModel, T5, ["input_ids", "attention_mask"], ["last_hidden_state"]),
                   tokens(96, 2, 8, mask=True), ["last_hidden_state"], {}),
    "llama": ("transformers LlamaForCausalLM (hidden 32, 2 layers, 4 heads over 2 key-value heads): rotary positions, RMS norm, SiLU gate",
              hf(transformers.LlamaForCausalLM, LLAMA, ["input_ids", "attention_mask"], ["logits"]), tokens(96, 1, 8, mask=True),
              ["logits"], {}),
    "roberta": ("transformers RobertaModel (hidden 32, 2 layers): position ids counted from the tokens that are not padding",
                hf(transformers.RobertaModel, ROBERTA, ["input_ids", "attention_mask"], ["last_hidden_state"]),
                tokens(96, 2, 8, mask=True), ["last_hidden_state"], {}),
    "segformer": ("transformers SegformerForSemanticSegmentation (2 blocks of 16 and 32): overlapping patches, reduced attention, "
                  "depthwise Mix-FFN, bilinear upsampling",
                  hf(transformers.SegformerForSemanticSegmentation, SEGFORMER, ["pixel_values"], ["logits"]),
                  lambda rng: {"pixel_values": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}, ["logits"], {}),
}
EXPORTERS = ("classic", "dynamo")


def export(name, exporter, out_dir):
    what, build, make_inputs, outputs, symbolic = MODELS[name]
    model = seeded(build)
    rng = np.random.default_rng(SEED)
    inputs = make_inputs(rng)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    path = os.path.join(out_dir, "model.onnx")
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        if exporter == "classic":
            torch.onnx.export(model, args, path, dynamo=False, opset_version=CLASSIC_OPSET, input_names=list(inputs),
                              output_names=outputs, dynamic_axes=symbolic or None)
        else:
            dims = None
            if symbolic:
                made = {}
                dim = lambda s: made.setdefault(s, torch.export.Dim(s, min=1, max=32))
                dims = tuple({a: dim(s) for a, s in symbolic.get(n, {}).items()} or None for n in inputs)
                # A Wrapper takes its inputs as *args: one argument, their tuple.
                dims = (dims,) if isinstance(model, Wrapper) else dims
            program = torch.onnx.export(model, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=list(inputs),
                                        output_names=outputs, dynamic_shapes=dims, external_data=False)
            program.save(path, external_data=False)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    results = session.run(None, inputs)
    for n, v in inputs.items():
        np.save(os.path.join(out_dir, f"input_{n}.npy"), v)
    for n, v in zip(outputs, results):
        np.save(os.path.join(out_dir, f"output_{n}.npy"), v)

    def shape(vi):
        return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in vi.type.tensor_type.shape.dim]

    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "model": what,
        "exporter": f"torch.onnx.export(dynamo={exporter == 'dynamo'})",
        "opset": opset,
        "ir_version": proto.ir_version,
        "versions": {p: PINNED[p] for p in ("torch", "torchvision", "transformers", "onnxscript", "onnxruntime")},
        "inputs": {vi.name: shape(vi) for vi in proto.graph.input},
        "outputs": {vi.name: shape(vi) for vi in proto.graph.output},
        "nodes": len(proto.graph.node),
        "operators": sorted({n.op_type for n in proto.graph.node}),
        "bytes": os.path.getsize(path),
    }


def main():
    argv = sys.argv[1:]
    models = list(MODELS)
    if "--models" in argv:
        i = argv.index("--models")
        models = argv[i + 1].split(",")
        del argv[i:i + 2]
    out = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx", "real")
    manifest_path = os.path.join(out, "MANIFEST.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
    for name in models:
        if name not in MODELS:
            raise SystemExit(f"onnx_real_exports: no model {name!r} (known: {', '.join(MODELS)})")
        for exporter in EXPORTERS:
            key = f"{name}_{exporter}"
            manifest[key] = export(name, exporter, os.path.join(out, key))
            m = manifest[key]
            print(f"{key}: opset {m['opset']}, {m['nodes']} nodes, {m['bytes']} bytes, {', '.join(m['operators'])}")
    with open(manifest_path, "w") as f:
        json.dump(dict(sorted(manifest.items())), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
