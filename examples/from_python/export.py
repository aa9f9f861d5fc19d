"""From a Mithril model in Python to the two files mithrilc compiles.

Writes mlp.json (the model, as Mithril's model_to_dict serializes it) and params.npz
(its parameters, one array per parameter under the name Mithril gave it, which is the
name `mithrilc inspect` prints). Needs Mithril itself (synnada-ai/mithril at the commit
../../docs/from-python.md names; its PyPI package is an empty placeholder) and NumPy.

    python export.py            # then: mithrilc compile mlp.json --params params.npz ...
"""

import json

import numpy as np

import mithril as ml
from mithril.models import MLP, Relu, Sigmoid, Tanh
from mithril.utils.dict_conversions import model_to_dict

# 1. The model, built as any Mithril model is.
model = MLP(activations=[Relu(), Tanh(), Sigmoid()], dimensions=[8, 6, 3])

# 2. Its serialization: what mithrilc reads.
with open("mlp.json", "w") as f:
    json.dump(model_to_dict(model), f, indent=1)

# 3. Its parameters under Mithril's names. Compiling with a backend fixes the shapes
#    and names them (an unnamed Linear's weight becomes weight_0, MLP's own are weight0,
#    bias0, ...). Here they are random; after training, save the trained ones.
pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), shapes={"input": [4, 5]}, data_keys={"input"}, jit=False)
params = pm.randomize_params()
np.savez("params.npz", **{name: np.asarray(value, dtype=np.float32) for name, value in params.items()})

# 4. A reference output to check the compiled library against.
x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
out = pm.evaluate(params, {"input": x})
np.savez("reference.npz", **{"input/input": x, "output/output": np.asarray(out["output"])})
