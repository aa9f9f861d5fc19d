"""ONNX Runtime, the peer of the C target's benchmark.

Builds each benchmark model of ../shared/bench as ONNX from the same safetensors
weights (the structures the bench README describes), checks that ONNX Runtime
reproduces the reference output within 1e-4, and prints the median latency of one
inference with 1 and 2 intra-op threads, one line per case:

    ort MODEL BATCH THREADS MEDIAN_US ERROR

With --quantized, also the same model quantized as ONNX Runtime's users quantize it,
`onnxruntime.quantization.quantize_dynamic` with its defaults (int8 weights, one scale
per tensor; activations u8, quantized as the model runs), its Linear layers written as
MatMul and Add (the ops it quantizes; it leaves Gemm in f32), one line per case:

    ortq MODEL BATCH THREADS MEDIAN_US ERROR

ERROR is the largest difference from the reference output as a fraction of the output's
largest magnitude (tests/quantize.rs's measure), the quantized model's accuracy.

Usage: python ort_peer.py BENCH_DIR [--repeat N] [--quantized] [--models NAME,...]
"""

import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

OPSET = 20


class Builder:
    """A small helper that names nodes and weight initializers."""

    def __init__(self, weights, matmul=False):
        self.weights = weights
        self.nodes = []
        self.inits = []
        self.count = 0
        # Linear as MatMul and Add (what quantize_dynamic quantizes) rather than Gemm
        self.matmul = matmul

    def w(self, name, array=None):
        value = self.weights[name] if array is None else array
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def const(self, value, dtype=np.float32):
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, kind, inputs, **attrs):
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(self, x, prefix):
        if self.matmul:
            return self.linear_nd(x, prefix)
        return self.op("Gemm", [x, self.w(f"{prefix}_weight"), self.w(f"{prefix}_bias")], transB=1)

    def linear_nd(self, x, prefix):
        # Linear on [B, T, C]: MatMul with the transposed weight, then the bias.
        wt = self.w(f"{prefix}_weight_t", self.weights[f"{prefix}_weight"].T)
        return self.op("Add", [self.op("MatMul", [x, wt]), self.w(f"{prefix}_bias")])

    def conv(self, x, prefix, pad):
        bias = self.weights[f"{prefix}_bias"].reshape(-1)
        return self.op("Conv", [x, self.w(f"{prefix}_weight"), self.w(f"{prefix}_bias_flat", bias)],
                       pads=[pad] * 4)

    def layernorm(self, x, prefix):
        return self.op("LayerNormalization", [x, self.w(f"{prefix}_weight"), self.w(f"{prefix}_bias")],
                       axis=-1, epsilon=1e-5)


def mlp(b, x):
    h = b.op("Relu", [b.linear(x, "fc1")])
    h = b.op("Relu", [b.linear(h, "fc2")])
    return b.linear(h, "fc3")


def lenet(b, x):
    h = b.op("MaxPool", [b.op("Relu", [b.conv(x, "conv1", 2)])], kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("MaxPool", [b.op("Relu", [b.conv(h, "conv2", 0)])], kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Flatten", [h], axis=1)
    h = b.op("Relu", [b.linear(h, "fc1")])
    h = b.op("Relu", [b.linear(h, "fc2")])
    return b.linear(h, "fc3")


def cnn(b, x):
    h = b.op("Relu", [b.conv(x, "stem", 1)])
    for block in ("block1", "block2"):
        y = b.op("Relu", [b.conv(h, f"{block}_conv1", 1)])
        y = b.conv(y, f"{block}_conv2", 1)
        h = b.op("Relu", [b.op("Add", [y, h])])
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    return b.linear(h, "fc")


def gpt_block(b, x, batch):
    t, c, heads = 128, 768, 12
    d = c // heads
    h = b.layernorm(x, "ln_1")
    qkv = b.linear_nd(h, "c_attn")
    split = b.const([c, c, c], np.int64)
    b.count += 1
    q, k, v = (f"t{b.count}_{i}" for i in range(3))
    b.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], axis=-1))
    shape = b.const([-1, t, heads, d], np.int64)
    q, k, v = (b.op("Transpose", [b.op("Reshape", [z, shape])], perm=[0, 2, 1, 3]) for z in (q, k, v))
    scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), b.const(1.0 / np.sqrt(d))])
    mask = np.where(np.tril(np.ones((t, t), dtype=bool)), 0.0, -np.inf).astype(np.float32)
    p = b.op("Softmax", [b.op("Add", [scores, b.const(mask)])], axis=-1)
    a = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3]), b.const([-1, t, c], np.int64)])
    res1 = b.op("Add", [x, b.linear_nd(a, "c_proj")])
    m = b.op("Gelu", [b.linear_nd(b.layernorm(res1, "ln_2"), "c_fc")], approximate="tanh")
    return b.op("Add", [res1, b.linear_nd(m, "mlp_proj")])


MODELS = {"mlp": mlp, "lenet": lenet, "cnn": cnn, "gpt_block": gpt_block}


def build(name, weights, input_shape, output_shape, matmul=False):
    b = Builder(weights, matmul)
    x = "input"
    out = MODELS[name](b, x, input_shape[0]) if name == "gpt_block" else MODELS[name](b, x)
    graph = helper.make_graph(
        b.nodes, name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, output_shape)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def quantize(model):
    """`model` quantized by quantize_dynamic with its defaults (it takes files)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f32.onnx"), os.path.join(tmp, "int8.onnx")
        with open(src, "wb") as f:
            f.write(model)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        with open(dst, "rb") as f:
            return f.read()


def main():
    bench = sys.argv[1]
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 100
    models = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else list(MODELS)
    manifest = json.load(open(f"{bench}/MANIFEST.json"))
    for name in models:
        weights = load_file(f"{bench}/{name}.safetensors")
        for batch, info in sorted(manifest[name]["batches"].items(), key=lambda kv: int(kv[0])):
            x = np.load(f"{bench}/{info['input']}")
            want = np.load(f"{bench}/{info['output']}")
            model = build(name, weights, list(x.shape), list(want.shape))
            kinds = [("ort", model)]
            if "--quantized" in sys.argv:
                kinds.append(("ortq", quantize(build(name, weights, list(x.shape), list(want.shape), matmul=True))))
            for (kind, model), threads in ((k, t) for k in kinds for t in (1, 2)):
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
                got = sess.run(None, {"input": x})[0]
                err = float(np.max(np.abs(got - want)))
                scale = float(np.max(np.abs(want)))
                if kind == "ort" and err > 1e-4 * max(1.0, scale):
                    sys.exit(f"ort_peer: {name} b{batch}: ONNX Runtime differs from the reference by {err}")
                runs = max(5, repeat if info["flops"] < 5e9 else repeat // 10)
                for _ in range(3):
                    sess.run(None, {"input": x})
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    sess.run(None, {"input": x})
                    times.append((time.perf_counter() - t0) * 1e6)
                print(f"{kind} {name} {batch} {threads} {statistics.median(times):.1f} {err / scale:.3e}", flush=True)


if __name__ == "__main__":
    main()
