"""Gradients, training steps and parameters by name."""

import numpy as np
import pytest

import mithrilc
from conftest import ROOT

TRAIN = ROOT / "examples/train_mlp/train_mlp.json"


def dataset(n=96):
    """Three classes of points around three centres (as examples/train_mlp/train.c)."""
    rng = np.random.default_rng(0)
    target = np.arange(n) % 3
    centres = np.array([[1.0, 0.0], [-0.5, 0.87], [-0.5, -0.87]], dtype=np.float32)
    x = (centres[target] + 0.3 * rng.standard_normal((n, 2))).astype(np.float32)
    return {"input": x, "target": target.astype(np.int32)}


SHAPES = {"input": (96, 2), "target": (96,)}


def initial_params():
    """The MLP's parameters (2 -> 16 tanh -> 3), seeded."""
    rng = np.random.default_rng(1)
    shapes = {"weight0": (16, 2), "bias0": (16,), "weight1": (3, 16), "bias1": (3,)}
    return {k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def test_training_lowers_the_loss_and_state_dict_round_trips(tmp_path):
    batch = dataset()
    shapes, params = SHAPES, initial_params()
    m = mithrilc.load(TRAIN, shapes=shapes, params=params, grad=True)
    first = m.train_step(batch, lr=0.5, momentum=0.9)
    for _ in range(200):
        last = m.train_step(batch, lr=0.5, momentum=0.9)
    assert last < first / 10
    trained = m.state_dict()
    assert trained.keys() == params.keys()
    assert any(not np.array_equal(trained[k], params[k]) for k in params)
    # The trained parameters, saved and loaded into a fresh model, give its outputs.
    np.savez(tmp_path / "trained.npz", **trained)
    again = mithrilc.load(TRAIN, shapes=shapes, params=tmp_path / "trained.npz", grad=True)
    for k, v in again.state_dict().items():
        np.testing.assert_array_equal(v, trained[k])
    np.testing.assert_array_equal(again(**batch)["final_cost"], m(**batch)["final_cost"])


def test_backward_matches_the_interpreter():
    batch = dataset()
    shapes, params = SHAPES, initial_params()
    jit = mithrilc.load(TRAIN, shapes=shapes, params=params, grad=True)
    interp = mithrilc.load(TRAIN, shapes=shapes, params=params, grad=True, target="interp")
    g, want = jit.backward(**batch), interp.backward(**batch)
    assert g.keys() == want.keys() == params.keys()
    for k in g:
        np.testing.assert_allclose(g[k], want[k], rtol=1e-4, atol=1e-6)


def test_load_state_dict_replaces_values_by_name():
    m = mithrilc.load(ROOT / "examples/mlp/mlp.json", params=ROOT / "examples/mlp/data.npz", shapes={"input": (4, 5)})
    x = np.ones((4, 5), np.float32)
    before = m(x)["output"]
    state = m.state_dict()
    m.load_state_dict({"bias2": state["bias2"] + 100.0})
    after = m(x)["output"]
    assert not np.allclose(after, before)
    m.load_state_dict({"bias2": state["bias2"]})
    np.testing.assert_array_equal(m(x)["output"], before)
    with pytest.raises(mithrilc.ModelError, match="`nope` is not a parameter"):
        m.load_state_dict({"nope": np.zeros(3, np.float32)})
    with pytest.raises(mithrilc.ModelError, match="has shape"):
        m.load_state_dict({"bias2": np.zeros(4, np.float32)})
    with pytest.raises(mithrilc.UsageError, match="training step needs"):
        m.train_step({"input": x}, lr=0.1)


@pytest.mark.parametrize("target", ["jit", "interp"])
def test_absent_cotangents_are_ones(target):
    m = mithrilc.load(ROOT / "examples/mlp/mlp.json", params=ROOT / "examples/mlp/data.npz", shapes={"input": (4, 5)}, grad=True, target=target)
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    ones = m.backward(x, **{"output_grad/output": np.ones((4, 3), np.float32)})
    default = m.backward(x)
    assert default.keys() == ones.keys() == {p.name for p in m.params}
    for k in ones:
        np.testing.assert_array_equal(default[k], ones[k])
    twice = m.backward(x, **{"output_grad/output": np.full((4, 3), 2, np.float32)})
    np.testing.assert_allclose(twice["bias2"], 2 * ones["bias2"], rtol=1e-6)
