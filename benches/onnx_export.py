"""The benchmark models of ../shared/bench as ONNX, written the way PyTorch's exporter
(torch.onnx.export with dynamo=True at opset 23) writes the same layers.

Reads each model's structure from NAME.json (Mithril's model_to_dict: a flat Model whose
submodels are Mithril's named layers, wired by `connections`) and its weights from
NAME.safetensors, and writes OUT_DIR/NAME.onnx: the weights are initializers under the
safetensors names and layouts (so `mithrilc ... --params NAME.safetensors` replaces them),
the input `input` and the output `output` as in the JSON, the batch dimension symbolic
(dim_param "batch": one file serves every batch size; `--shape` fixes it when compiling).

Each Mithril layer becomes what torch.onnx writes for its PyTorch counterpart:
  Linear            Gemm(transB=1) on a matrix; on more axes Transpose of the weight,
                    MatMul and Add (torchlib's aten_linear)
  Convolution2D     Conv with pads, strides, dilations and group; its bias input is the
                    [1, C, 1, 1] weight (Mithril's layout) through a Reshape to [C], as
                    F.conv2d(x, w, b.view(-1)) exports
  MaxPool2D         MaxPool (kernel_shape, strides, pads, dilations, ceil_mode 0)
  Flatten           Flatten(axis=1) from axis 1 to the end; from a later axis a Reshape
                    to a constant shape with the batch as -1 (x.reshape(-1, C, H * W))
  Mean              ReduceMean with axes as an input (opset 18), keepdims as asked
  LayerNorm         LayerNormalization(axis=-1, epsilon)
  Split + Indexer   Split(num_outputs) and its outputs
  Reshape           Reshape to the JSON's constant shape
  SwapAxes          Transpose
  ScaledDotProduct  Attention (opset 23) of 4-D query, key and value, is_causal as given
  Gelu              Gelu, approximate "tanh" or "none"
  Relu, Add         Relu, Add
Anything else in a JSON is refused by name.

Weights are read with numpy alone (the safetensors header is JSON). Deterministic: the
same inputs give byte-identical files.

Usage: python onnx_export.py BENCH_DIR OUT_DIR [--models NAME,...]
"""

import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Attention is an operator of the default domain since opset 23, which IR version 11
# (onnx 1.18) brought; later onnx releases would write their own newer IR version.
OPSET = 23
IR_VERSION = 11
MODELS = ("mlp", "lenet", "cnn", "gpt_block")
SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """Every tensor of a .safetensors file by name, in the file's order."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"]).copy()
    return out


class Exporter:
    """One model's graph being written: nodes, initializers, and the ONNX value each
    Mithril connection stands for."""

    def __init__(self, name, spec, weights):
        self.name = name
        self.spec = spec
        self.weights = weights
        self.nodes = []
        self.inits = {}
        self.outputs = {}  # (submodel, port) -> ONNX value name
        self.count = 0

    def fresh(self, what):
        self.count += 1
        return f"{what}_{self.count}"

    def const(self, value, dtype):
        """A constant initializer (shapes, axes): integers, never a weight."""
        name = self.fresh("const")
        self.inits[name] = numpy_helper.from_array(np.asarray(value, dtype=dtype), name)
        return name

    def weight(self, name):
        if name not in self.inits:
            self.inits[name] = numpy_helper.from_array(np.ascontiguousarray(self.weights[name]), name)
        return name

    def op(self, kind, inputs, key, outputs=1, **attrs):
        outs = [self.fresh(f"{key}_{kind}") for _ in range(outputs)]
        self.nodes.append(helper.make_node(kind, inputs, outs, name=f"/{key}/{kind}_{self.count}", **attrs))
        return outs[0] if outputs == 1 else outs

    def value(self, key, port):
        """The ONNX value connected to `port` of submodel `key`: a graph input, a
        weight, another submodel's output, or None when the JSON gives none (a literal
        or an argument left at its default)."""
        conn = self.spec["connections"].get(key, {}).get(port)
        if not isinstance(conn, dict) or "key" not in conn:
            return None
        ref = conn["key"]
        if "connect" in ref:
            (src, src_port), = ref["connect"]
            if src_port == "output":
                return self.outputs[(src, "output")]
            return self.value(src, src_port)
        name = ref["name"]
        if name == "input":
            return "input"
        if name in self.weights:
            return self.weight(name)
        raise SystemExit(f"onnx_export: {self.name}: {key}.{port} names {name!r}, which is neither the input nor a weight")

    def literal(self, key, port):
        """A constant the connections give in place (Reshape's shape)."""
        conn = self.spec["connections"].get(key, {}).get(port)
        return None if isinstance(conn, dict) else conn

    def shape(self, value):
        """The shape of `value` as ONNX's shape inference gives it, the batch "batch"
        (the weights given as typed inputs, so their data is not copied)."""
        if value == "input":
            return self.input_shape
        inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, self.input_shape)]
        inputs += [helper.make_tensor_value_info(n, t.data_type, list(t.dims)) for n, t in self.inits.items() if n in self.weights]
        consts = [t for n, t in self.inits.items() if n not in self.weights]
        graph = helper.make_graph(self.nodes, "partial", inputs, [helper.make_value_info(value, onnx.TypeProto())], consts)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.name == value:
                return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in vi.type.tensor_type.shape.dim]
        raise SystemExit(f"onnx_export: {self.name}: no shape inferred for {value}")

    def layer(self, key, sub):
        cls, args = sub["name"], sub.get("args", {})
        if cls == "Indexer":
            # One of a Split's outputs.
            (src, _), = self.spec["connections"][key]["input"]["key"]["connect"]
            return self.outputs[(src, "parts")][args["index"]]
        x = self.value(key, "input")
        if cls == "Linear":
            w, b = self.value(key, "weight"), self.value(key, "bias")
            if len(self.shape(x)) == 2:
                return self.op("Gemm", [x, w] + ([b] if b else []), key, transB=1)
            y = self.op("MatMul", [x, self.op("Transpose", [w], key, perm=[1, 0])], key)
            return self.op("Add", [y, b], key) if b else y
        if cls == "Convolution2D":
            w, b = self.value(key, "weight"), self.value(key, "bias")
            k = list(self.weights[w].shape[2:])
            pad = args.get("padding", 0)
            pads = [pad, pad] if isinstance(pad, int) else list(pad)
            if len(pads) == 2 and all(isinstance(p, int) for p in pads):
                pads = [pads[0], pads[1], pads[0], pads[1]]
            else:  # ((top, bottom), (left, right))
                pads = [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]
            pair = lambda v: [v, v] if isinstance(v, int) else list(v)
            # Conv's bias is 1-D: the [1, C, 1, 1] weight viewed so (b.view(-1)).
            bias = [self.op("Reshape", [b, self.const([-1], np.int64)], key)] if b else []
            return self.op("Conv", [x, w] + bias, key, kernel_shape=k, pads=pads, strides=pair(args.get("stride", 1)),
                           dilations=pair(args.get("dilation", 1)), group=args.get("groups", 1))
        if cls == "MaxPool2D":
            k = args["kernel_size"]
            k = [k, k] if isinstance(k, int) else list(k)
            stride = args.get("stride") or k
            stride = [stride, stride] if isinstance(stride, int) else list(stride)
            pad = args.get("padding", [0, 0])
            pad = [pad, pad] if isinstance(pad, int) else list(pad)
            d = args.get("dilation", 1)
            return self.op("MaxPool", [x], key, kernel_shape=k, strides=stride, pads=pad + pad,
                           dilations=[d, d] if isinstance(d, int) else list(d), ceil_mode=0)
        if cls == "Flatten":
            start, end = args.get("start_dim", 0), args.get("end_dim", -1)
            shape = self.shape(x)
            if end not in (-1, len(shape) - 1):
                raise SystemExit(f"onnx_export: {self.name}: {key}: Flatten to end_dim {end}")
            if start == 1:
                return self.op("Flatten", [x], key, axis=1)
            kept = [-1 if isinstance(d, str) else d for d in shape[:start]]
            return self.op("Reshape", [x, self.const(kept + [int(np.prod(shape[start:]))], np.int64)], key)
        if cls == "Mean":
            axis = args.get("axis")
            axes = [axis] if isinstance(axis, int) else list(axis)
            return self.op("ReduceMean", [x, self.const(axes, np.int64)], key, keepdims=int(bool(args.get("keepdim", False))))
        if cls == "LayerNorm":
            if not (args.get("use_scale", True) and args.get("use_bias", True)):
                raise SystemExit(f"onnx_export: {self.name}: {key}: LayerNorm without scale or bias")
            return self.op("LayerNormalization", [x, self.value(key, "weight"), self.value(key, "bias")], key,
                           axis=-1, epsilon=float(args.get("eps", 1e-5)))
        if cls == "Split":
            return self.op("Split", [x], key, outputs=args["split_size"], axis=args["axis"], num_outputs=args["split_size"])
        if cls == "Reshape":
            return self.op("Reshape", [x, self.const(self.literal(key, "shape"), np.int64)], key)
        if cls == "SwapAxes":
            rank = len(self.shape(x))
            perm = list(range(rank))
            a, b = args["axis1"] % rank, args["axis2"] % rank
            perm[a], perm[b] = perm[b], perm[a]
            return self.op("Transpose", [x], key, perm=perm)
        if cls == "ScaledDotProduct":
            q, k, v = (self.value(key, p) for p in ("query", "key", "value"))
            return self.op("Attention", [q, k, v], key, is_causal=int(bool(args.get("is_causal", True))))
        if cls == "Gelu":
            return self.op("Gelu", [x], key, approximate="tanh" if args.get("approximate") else "none")
        if cls == "Relu":
            return self.op("Relu", [x], key)
        if cls == "Add":
            return self.op("Add", [self.value(key, "left"), self.value(key, "right")], key)
        raise SystemExit(f"onnx_export: {self.name}: {key} is a {cls}, which this script does not write")

    def export(self, input_shape):
        self.input_shape = ["batch"] + list(input_shape[1:])
        for key, sub in self.spec["submodels"].items():
            y = self.layer(key, sub)
            if isinstance(y, list):
                self.outputs[(key, "parts")] = y
            else:
                self.outputs[(key, "output")] = y
        last = self.outputs[(key, "output")]
        # The graph's output is named as the JSON names it: an Identity would add a
        # node, so the last node's output is renamed.
        for node in self.nodes:
            node.output[:] = ["output" if o == last else o for o in node.output]
        out_shape = self.shape("output")
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
            list(self.inits.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                                  producer_name="mithrilc benches/onnx_export.py")
        onnx.checker.check_model(model, full_check=True)
        return model


def export(bench, name):
    spec = json.load(open(os.path.join(bench, f"{name}.json")))
    weights = read_safetensors(os.path.join(bench, f"{name}.safetensors"))
    manifest = json.load(open(os.path.join(bench, "MANIFEST.json")))[name]
    shape = next(iter(manifest["batches"].values()))["input_shape"]
    model = Exporter(name, spec, weights).export(shape)
    unused = set(weights) - {t.name for t in model.graph.initializer}
    if unused:
        raise SystemExit(f"onnx_export: {name}: weights the JSON never uses: {sorted(unused)}")
    return model


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    bench, out = sys.argv[1:3]
    models = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else MODELS
    os.makedirs(out, exist_ok=True)
    for name in models:
        model = export(bench, name)
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{path}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers")


if __name__ == "__main__":
    main()
