"""Every test-data case and bench model through mithrilc.load(...) matches the reference
numbers: Mithril's outputs and gradients (../shared/testdata) and the bench models'
reference outputs (../shared/bench), at the tolerance the test data states."""

import json
from pathlib import Path

import numpy as np
import pytest

import mithrilc
from conftest import ROOT, SHARED

# Deep cases, where summation order changes the last bits (testdata/README.md).
DEEP = ("lenet", "mlp", "gpt_tiny", "attention_block", "layernorm")


def variants():
    manifest = SHARED / "testdata/manifest.json"
    if not manifest.exists():
        return []
    entries = json.loads(manifest.read_text().replace(": Infinity", ": null").replace(": NaN", ": null"))
    out = []
    for case, entry in entries.items():
        for v in entry.get("variants") or []:
            if v.get("status") == "ok":
                out.append(pytest.param(case, entry["json"], v, id=v["npz"]))
    return out


def latent(case):
    """Constructor values Mithril's JSON lacks (tests/conformance/latent)."""
    path = ROOT / "tests/conformance/latent" / f"{case}.json"
    return json.loads(path.read_text())["set"] if path.exists() else None


def close(got, want, case):
    rtol, atol = (1e-3, 1e-4) if case.startswith(DEEP) else (1e-4, 1e-5)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("case,json_name,variant", variants())
@pytest.mark.parametrize("target", ["jit", "interp"])
def test_case_matches_mithril(shared, case, json_name, variant, target):
    data = np.load(shared / "testdata" / variant["npz"])
    group = lambda prefix: {k[len(prefix):]: data[k] for k in data.files if k.startswith(prefix)}
    # Mithril's JSON does not say which keys are data: every array goes in as a
    # parameter's value (giving its type and shape), and those the model takes as
    # inputs are passed to the calls.
    arrays = {**group("input/"), **group("param/")}
    model = mithrilc.load(shared / "testdata" / json_name, params=arrays, grad=True, target=target, set=latent(case))
    inputs = {p.name: arrays[p.name] for p in model.inputs}
    outputs = model(**inputs)
    for name, want in group("output/").items():
        close(outputs[name], want, case)
    cotangents = {f"output_grad/{k}": v for k, v in group("output_grad/").items()}
    grads = model.backward(**inputs, **cotangents)
    want = group("grad/")
    assert want.keys() - inputs.keys() <= grads.keys()
    for name, g in want.items():
        if name in grads:  # (a model input has no gradient)
            close(grads[name], g, case)


BENCH = [("mlp", 1), ("mlp", 32), ("lenet", 1), ("lenet", 32), ("cnn", 1), ("cnn", 32), ("gpt_block", 1), ("gpt_block", 8)]


@pytest.mark.parametrize("model,batch", BENCH, ids=[f"{m}-b{b}" for m, b in BENCH])
def test_bench_model_matches_its_reference(shared, model, batch):
    bench = shared / "bench"
    x = np.load(bench / f"{model}_b{batch}_input.npy")
    m = mithrilc.load(bench / f"{model}.json", params=bench / f"{model}.safetensors", shapes={"input": x.shape})
    (y,) = m(x).values()
    np.testing.assert_allclose(y, np.load(bench / f"{model}_b{batch}_output.npy"), rtol=1e-4, atol=1e-4)


def test_a_symbolic_batch_runs_at_every_size(shared):
    bench = shared / "bench"
    x = np.load(bench / "mlp_b32_input.npy")
    want = np.load(bench / "mlp_b32_output.npy")
    m = mithrilc.load(bench / "mlp.json", params=bench / "mlp.safetensors", shapes={"input": ("B", *x.shape[1:])}, max={"B": 32})
    assert m.inputs[0].shape == ("B", x.shape[1])
    assert m.outputs[0].shape[0] == "B"
    for n in (1, 5, 32):
        np.testing.assert_allclose(m(input=x[:n])["output"], want[:n], rtol=1e-4, atol=1e-4)
    with pytest.raises(mithrilc.ModelError, match=r"dimension 0 \(B\) is 33, outside 1 to its maximum 32"):
        m(np.concatenate([x, x[:1]]))


def test_ports_describe_the_model():
    m = mithrilc.load(ROOT / "examples/mlp/mlp.json", params=ROOT / "examples/mlp/data.npz", shapes={"input": "B,5"}, max={"B": 4})
    assert [(p.name, p.dtype, p.shape) for p in m.inputs] == [("input", "float32", ("B", 5))]
    assert [(p.name, p.shape) for p in m.outputs] == [("output", ("B", 3))]
    assert [(p.name, p.shape) for p in m.params] == [("weight0", (8, 5)), ("bias0", (8,)), ("weight1", (6, 8)), ("bias1", (6,)), ("weight2", (3, 6)), ("bias2", (3,))]
    assert 'input "input" : f32[B, 5]' in m.ir()
    assert "kernels" in m.report()
    assert repr(m.inputs[0]) == "Port(name='input', dtype='float32', shape=('B', 5))"


def test_inputs_are_read_in_place_or_converted_as_documented():
    m = mithrilc.load(ROOT / "examples/mlp/mlp.json", params=ROOT / "examples/mlp/data.npz", shapes={"input": (4, 5)})
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    want = m(x)["output"]
    # a strided view is copied first; a list becomes an array of the input's type
    wide = np.zeros((4, 10), dtype=np.float32)
    wide[:, ::2] = x
    np.testing.assert_array_equal(m(wide[:, ::2])["output"], want)
    np.testing.assert_array_equal(m(x.tolist())["output"], m(x.astype(np.float64).astype(np.float32))["output"])
    np.testing.assert_array_equal(m(memoryview(x))["output"], want)

    class DLPackOnly:  # a tensor of another library: DLPack, no buffer protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(m(DLPackOnly(x))["output"], want)
    assert want.dtype == np.float32 and want.flags.c_contiguous


def test_the_interpreter_and_the_jit_agree_on_a_model_dict():
    d = json.loads((ROOT / "examples/mlp/mlp.json").read_text())
    data = np.load(ROOT / "examples/mlp/data.npz")
    params = {k[len("param/"):]: data[k] for k in data.files if k.startswith("param/")}
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    jit = mithrilc.load(d, params=params, shapes={"input": (4, 5)}, name="mlp")
    interp = mithrilc.load(d, params=params, shapes={"input": (4, 5)}, target="interp")
    np.testing.assert_allclose(jit(x)["output"], interp(x)["output"], rtol=1e-5, atol=1e-6)
    assert "mlp" in repr(jit)


def test_a_mithril_model_object_goes_through_model_to_dict(tmp_path, monkeypatch):
    # Mithril itself is not installable from PyPI (its package there is a placeholder):
    # a stand-in with its module path gives load() what model_to_dict would.
    pkg = tmp_path / "mithril" / "utils"
    pkg.mkdir(parents=True)
    (tmp_path / "mithril" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "dict_conversions.py").write_text(
        "import json\n"
        f"def model_to_dict(model):\n    return json.load(open({str(ROOT / 'examples/mlp/mlp.json')!r}))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    class MLP:  # what a Mithril model is to load(): not a path, not a dict
        pass

    m = mithrilc.load(MLP(), params=ROOT / "examples/mlp/data.npz", shapes={"input": (2, 5)}, name="mlp")
    assert [p.name for p in m.outputs] == ["output"]
    with pytest.raises(mithrilc.UsageError, match="model is a int"):
        monkeypatch.setitem(__import__("sys").modules, "mithril.utils.dict_conversions", None)
        mithrilc.load(3)
