"""Bad input gives the exception of its kind, with the command's message; nothing
crashes the interpreter."""

import os
import subprocess
import sys

import numpy as np
import pytest

import mithrilc
from conftest import ROOT

MLP = ROOT / "examples/mlp/mlp.json"
PARAMS = ROOT / "examples/mlp/data.npz"


@pytest.fixture(scope="module")
def mlp():
    return mithrilc.load(MLP, params=PARAMS, shapes={"input": (4, 5)})


def test_the_classes_follow_the_exit_kinds():
    for cls in (mithrilc.ModelError, mithrilc.UsageError, mithrilc.ToolchainError, mithrilc.InternalError):
        assert issubclass(cls, mithrilc.Error) and issubclass(cls, Exception)


def test_a_malformed_model_is_a_model_error(shared):
    with pytest.raises(mithrilc.ModelError, match="malformed.json"):
        mithrilc.load(shared / "testdata/bad/malformed.json")
    with pytest.raises(mithrilc.ModelError, match="not broadcastable|shape"):
        mithrilc.load(shared / "testdata/bad/shape_mismatch_add.json")
    with pytest.raises(mithrilc.ModelError, match="cannot read .*no_such_model.json"):
        mithrilc.load(ROOT / "no_such_model.json")
    with pytest.raises(mithrilc.ModelError):
        mithrilc.load({"name": "Model", "submodels": 3})


def test_wrong_inputs_are_model_errors(mlp):
    with pytest.raises(mithrilc.ModelError, match=r"input `input` has shape \[4, 6\], the model takes \[4, 5\]"):
        mlp(np.zeros((4, 6), np.float32))
    with pytest.raises(mithrilc.ModelError, match=r"input `input` is float64, the model takes f32 \(convert it: x.astype\(numpy.float32\)\)"):
        mlp(np.zeros((4, 5)))
    with pytest.raises(mithrilc.ModelError, match="no value for the input"):
        mlp()
    with pytest.raises(mithrilc.ModelError, match="`x` is not an input of the model"):
        mlp(x=np.zeros((4, 5), np.float32))
    with pytest.raises(mithrilc.ModelError, match="given twice"):
        mlp(np.zeros((4, 5), np.float32), input=np.zeros((4, 5), np.float32))


def test_wrong_calls_are_usage_errors(mlp):
    with pytest.raises(mithrilc.UsageError, match='target="tpu"'):
        mithrilc.load(MLP, params=PARAMS, shapes={"input": (4, 5)}, target="tpu")
    with pytest.raises(mithrilc.UsageError, match="invalid value 'tpu' for '--target"):
        mithrilc.compile(MLP, target="tpu", out="never-written")
    assert not os.path.exists("never-written")
    with pytest.raises(mithrilc.UsageError, match="without gradients"):
        mlp.backward(np.zeros((4, 5), np.float32))
    with pytest.raises(mithrilc.UsageError, match="quantize"):
        mithrilc.load(MLP, params=PARAMS, shapes={"input": (4, 5)}, quantize="q2")
    with pytest.raises(mithrilc.UsageError, match="max"):
        mithrilc.load(MLP, params=PARAMS, shapes={"input": (4, 5)}, max={"B": 0})


def test_a_missing_toolchain_is_a_toolchain_error(tmp_path):
    # The C target's build with a compiler that is not there.
    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"), MITHRILC_NO_CACHE="1")
    code = (
        "import mithrilc, sys\n"
        "try:\n"
        f"    mithrilc.compile({str(MLP)!r}, target='c', out={str(tmp_path / 'out')!r}, params={str(PARAMS)!r}, shapes={{'input': (4, 5)}})\n"
        "except mithrilc.ToolchainError as e:\n"
        "    print('ToolchainError:', e); sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no-such-cc" in run.stdout
    assert not (tmp_path / "out").exists()


def test_a_bad_index_is_a_model_error_not_a_crash(shared):
    data = np.load(shared / "testdata/gpt_tiny.npz")
    import json

    latent = json.loads((ROOT / "tests/conformance/latent/gpt_tiny.json").read_text())["set"]
    params = {k[6:]: data[k] for k in data.files if k.startswith("param/")}
    inputs = {k[6:]: data[k] for k in data.files if k.startswith("input/")}
    m = mithrilc.load(shared / "testdata/gpt_tiny.json", params=params, shapes={k: v.shape for k, v in inputs.items()}, set=latent)
    bad = {k: np.full_like(v, 1000) if v.dtype.kind == "i" else v for k, v in inputs.items()}
    with pytest.raises(mithrilc.ModelError, match="index is out of range"):
        m(**bad)
