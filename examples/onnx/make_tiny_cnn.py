"""Writes tiny_cnn.onnx, the ONNX example of the README: a small image classifier
(Conv, Relu, MaxPool, Flatten, Gemm) with a symbolic batch, its weights as
initializers, written as torch.onnx.export writes these layers; and input.npy, one
batch of two images. Deterministic (a fixed seed).

    ~/.cache/mithrilc/onnx-1.22.0/bin/python examples/onnx/make_tiny_cnn.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(41)


def weight(name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


nodes = [
    helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], name="/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
    helper.make_node("MaxPool", ["r"], ["p"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Flatten", ["p"], ["f"], name="/Flatten", axis=1),
    helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
]
graph = helper.make_graph(
    nodes,
    "tiny_cnn",
    [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    [weight("conv.weight", 4, 1, 3, 3), weight("conv.bias", 4), weight("fc.weight", 10, 64), weight("fc.bias", 10)],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="mithrilc-example")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, os.path.join(here, "tiny_cnn.onnx"))
np.save(os.path.join(here, "input.npy"), rng.standard_normal((2, 1, 8, 8)).astype(np.float32))
