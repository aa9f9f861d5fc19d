"""compile() writes and builds what the command does; a C library loads as a callable
that matches the reference numbers."""

import json

import numpy as np
import pytest

import mithrilc
from conftest import ROOT

BENCH = [("mlp", 1), ("lenet", 32), ("cnn", 1), ("gpt_block", 8)]


@pytest.mark.parametrize("model,batch", BENCH, ids=[f"{m}-b{b}" for m, b in BENCH])
def test_a_built_c_library_matches_the_reference(shared, c_compiler, tmp_path, model, batch):
    bench = shared / "bench"
    x = np.load(bench / f"{model}_b{batch}_input.npy")
    art = mithrilc.compile(bench / f"{model}.json", target="c", out=tmp_path / "out", params=bench / f"{model}.safetensors", shapes={"input": x.shape})
    assert f"wrote {tmp_path / 'out'}" in art.report
    assert tmp_path / "out" / f"lib{model}.so" in art.files
    lib = art.load()
    assert [p.name for p in lib.inputs] == ["input"]
    (y,) = lib(x).values()
    np.testing.assert_allclose(y, np.load(bench / f"{model}_b{batch}_output.npy"), rtol=1e-4, atol=1e-4)


def test_a_c_library_with_a_symbolic_batch_and_embedded_weights(shared, c_compiler, tmp_path):
    d = json.loads((ROOT / "examples/mlp/mlp.json").read_text())
    data = np.load(ROOT / "examples/mlp/data.npz")
    params = {k[len("param/"):]: data[k] for k in data.files if k.startswith("param/")}
    art = mithrilc.compile(d, target="c", out=tmp_path / "mlp", params=params, shapes={"input": ("B", 5)}, max={"B": 16}, weights="embed", name="mlp")
    lib = art.load()
    assert lib.inputs[0].shape == ("B", 5)
    jit = mithrilc.load(d, params=params, shapes={"input": ("B", 5)}, max={"B": 16})
    x = np.random.default_rng(2).standard_normal((7, 5)).astype(np.float32)
    np.testing.assert_allclose(lib(input=x)["output"], jit(x)["output"], rtol=1e-6, atol=1e-7)
    with pytest.raises(mithrilc.ModelError):
        lib(np.zeros((17, 5), np.float32))


def test_options_reach_the_command(tmp_path):
    art = mithrilc.compile(ROOT / "examples/mlp/mlp.json", target="c", out=tmp_path / "src", shapes={"input": (4, 5)}, emit="source", weight_layout="plain", report=True)
    assert (tmp_path / "src" / "mlp.c").is_file() and not (tmp_path / "src" / "libmlp.a").exists()
    assert "kernels" in art.report
    ir = mithrilc.compile(ROOT / "examples/mlp/mlp.json", shapes={"input": (4, 5)}, emit="ir")
    assert 'input "input" : f32[4, 5]' in ir.report
