#!/usr/bin/env python3
"""Runs a model that mithrilc compiled for XLA (`--target xla`) through PJRT.

Shipped beside the HLO modules it runs; reads `manifest.json` from its own directory.
It parses an HLO module's text (which verifies it), compiles it with jaxlib's PJRT CPU
client, feeds it the weights (a safetensors file) and the inputs (.npy files), and
writes each output to `OUT/output_<i>.npy`, as the C target's demo does.

    python3 run_hlo.py --input NAME=PATH ... [--out DIR] [--module forward|backward]
                       [--weights FILE] [--check] [--print-compiled]
    python3 run_hlo.py --module train_step --lr LR [--momentum M] [--steps N]
                       --input NAME=PATH ... [--out DIR]

`--module` picks the forward pass or, for a model compiled with `--grad`, the backward
pass (the default: the manifest's `main`); a weight may also be given as an input.
`--module train_step` (a model with a loss, compiled with `--grad`) trains: N steps
of SGD with momentum, each step's new weights and velocities (zero at first) fed to
the next; it writes the last step's outputs (the loss before it, the new weights, the
new velocities) and `losses.npy`, the loss before each step.
`--check` only parses and compiles every module. `--print-compiled` prints the
optimized HLO that XLA compiled (after SPMD partitioning, for a sharded module).

A model compiled with `--mesh` (the manifest's `mesh`) is compiled for that many
devices with SPMD partitioning, its inputs and weights placed on them as the
manifest's `split` says; on the CPU the devices are virtual
(`--xla_force_host_platform_device_count`, which the runner adds to XLA_FLAGS).

Needs jax and jaxlib 0.10.2 exactly (the route to compile HLO text uses jaxlib APIs
that are private and move between versions): pip install jax==0.10.2 jaxlib==0.10.2.
Exit status: 0 done, 2 usage, 3 jax missing or another version, 4 the data does not
fit the model.
"""

import argparse
import json
import os
import sys

JAX_VERSION = "0.10.2"
EXIT_NO_JAX = 3
EXIT_REJECTED = 4
HERE = os.path.dirname(os.path.abspath(__file__))


def fail(status, message):
    print(f"run_hlo.py: {message}", file=sys.stderr)
    sys.exit(status)


def load_jax(devices):
    """jax with 64-bit types enabled (and at least `devices` CPU devices), and
    jaxlib's client module."""
    try:
        import importlib.metadata as metadata

        versions = [metadata.version(p) for p in ("jax", "jaxlib")]
    except Exception as e:  # PackageNotFoundError, or a broken installation
        fail(EXIT_NO_JAX, f"jax and jaxlib {JAX_VERSION} are needed ({e}): pip install jax=={JAX_VERSION} jaxlib=={JAX_VERSION}")
    if versions != [JAX_VERSION, JAX_VERSION]:
        fail(EXIT_NO_JAX, f"jax and jaxlib {JAX_VERSION} are needed, found {versions[0]} and {versions[1]}: pip install jax=={JAX_VERSION} jaxlib=={JAX_VERSION}")
    if devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip()
    import jax
    import jax.extend.backend
    from jax._src.lib import xla_client

    jax.config.update("jax_enable_x64", True)
    return jax, xla_client


def numpy_dtype(name):
    import numpy as np

    if name == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f64": np.float64, "f16": np.float16, "s32": np.int32, "s64": np.int64, "pred": np.bool_}[name]


def read_safetensors(path):
    """Every tensor of a safetensors file, by name (numpy arrays)."""
    import numpy as np

    kinds = {"F32": "f32", "F64": "f64", "F16": "f16", "BF16": "bf16", "I32": "s32", "I64": "s64", "BOOL": "pred"}
    try:
        with open(path, "rb") as f:
            data = f.read()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size])
    except (OSError, ValueError) as e:
        fail(EXIT_REJECTED, f"cannot read the weights {path}: {e}")
    body = data[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in kinds:
            fail(EXIT_REJECTED, f"{path}: tensor `{name}` has dtype {info['dtype']}, which the runner does not read")
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=numpy_dtype(kinds[info["dtype"]]))
        out[name] = array.reshape(info["shape"])
    return out


class Module:
    """One HLO module of the manifest, parsed and compiled for `devices`."""

    def __init__(self, jax, xla_client, spec, devices, mesh):
        self.spec = spec
        self.mesh = mesh
        path = os.path.join(HERE, spec["hlo"])
        with open(path) as f:
            text = f.read()
        # The route that jaxlib 0.10.2 offers for HLO text: parse (which verifies),
        # convert to MLIR, compile with the backend's own client.
        module = xla_client.hlo.hlo_module_from_text(text)
        computation = xla_client.XlaComputation(module.as_serialized_hlo_module_proto())
        mlir = xla_client._xla.mlir.xla_computation_to_mlir_module(computation)
        backend = jax.extend.backend.get_backend("cpu")
        self.devices = devices
        options = xla_client.CompileOptions()
        if mesh:
            import numpy as np

            # One replica, one partition per device of the mesh: XLA's SPMD partitioner
            # splits the program as the parameters' sharding annotations say.
            options.num_replicas = 1
            options.num_partitions = len(devices)
            options.executable_build_options.use_spmd_partitioning = True
            options.device_assignment = xla_client.DeviceAssignment.create(np.arange(len(devices)).reshape(1, len(devices)))
        self.executable = backend.compile_and_load(mlir, xla_client.DeviceList(tuple(devices)), options)

    def time(self, jax, values, repeat):
        """The median latency in microseconds of `repeat` calls on `values` placed on
        the device once (10 calls first to warm up), each call waited for."""
        import statistics
        import time

        buffers = [jax.device_put(v, self.devices[0]) for v in values]
        times = []
        for i in range(10 + repeat):
            start = time.perf_counter()
            for o in self.executable.execute(buffers):
                o.block_until_ready()
            if i >= 10:
                times.append((time.perf_counter() - start) * 1e6)
        return statistics.median(times)

    def compiled_text(self):
        return "\n".join(m.to_string() for m in self.executable.hlo_modules())

    def run(self, jax, values):
        """Runs on `values` (numpy arrays in parameter order); returns numpy outputs."""
        import numpy as np

        if not self.mesh:
            buffers = [jax.device_put(v, self.devices[0]) for v in values]
            return [np.asarray(o) for o in self.executable.execute(buffers)]
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        names = [a for a, _ in self.mesh]
        mesh = Mesh(np.array(self.devices).reshape([n for _, n in self.mesh]), names)
        placed = [jax.device_put(v, NamedSharding(mesh, PartitionSpec(*p["split"]))) for v, p in zip(values, self.spec["parameters"])]
        results = self.executable.execute_sharded(placed).disassemble_into_single_device_arrays()
        # Every output is replicated: the first device's copy is the whole value.
        return [np.asarray(o[0]) for o in results]


def feeds(spec, arrays):
    """The module's parameter values from `arrays` (by name), each checked against its
    declared shape and converted to its type."""
    import numpy as np

    values = []
    for p in spec["parameters"]:
        kind = "parameter" if p["weight"] else "input"
        if p["name"] not in arrays:
            how = "give it in the weights file or as --input NAME=PATH" if p["weight"] else "give --input NAME=PATH"
            fail(EXIT_REJECTED, f"no value for {kind} `{p['name']}` ({p['dtype']}{p['shape']}): {how}")
        a = np.asarray(arrays[p["name"]])
        if list(a.shape) != p["shape"]:
            fail(EXIT_REJECTED, f"{kind} `{p['name']}` is {p['dtype']}{p['shape']} but was given an array of shape {list(a.shape)}")
        if "rows" in p and a.size:
            # XLA clamps an index out of range; the model's semantics refuse it.
            n = p["rows"]
            bad = (a < -n) | (a >= n)
            if bad.any():
                at = tuple(int(i) for i in np.argwhere(bad)[0])
                fail(EXIT_REJECTED, f"index {a[at]} at {list(at)} of input `{p['name']}` is out of range for {n} rows (valid: -{n} to {n - 1})")
        values.append(a.astype(numpy_dtype(p["dtype"])))
    return values


def main():
    parser = argparse.ArgumentParser(description="Runs a model mithrilc compiled for XLA through PJRT.")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=PATH", help="an input (or weight) as a .npy file")
    parser.add_argument("--out", default=".", help="where output_<i>.npy are written")
    parser.add_argument("--module", help="forward or backward (default: the manifest's main)")
    parser.add_argument("--weights", help="the weights (default: the manifest's safetensors file)")
    parser.add_argument("--lr", type=float, help="train_step: the learning rate")
    parser.add_argument("--momentum", type=float, default=0.0, help="train_step: the momentum (default 0)")
    parser.add_argument("--steps", type=int, default=1, help="train_step: how many steps (default 1)")
    parser.add_argument("--check", action="store_true", help="only parse and compile every module")
    parser.add_argument("--print-compiled", action="store_true", help="print the HLO XLA compiled")
    parser.add_argument("--repeat", type=int, default=0, help="also time N calls (after 10 warm-up calls) and print the median latency")
    args = parser.parse_args()

    with open(os.path.join(HERE, "manifest.json")) as f:
        manifest = json.load(f)
    mesh = manifest.get("mesh") or []
    count = 1
    for _, n in mesh:
        count *= n
    jax, xla_client = load_jax(count)
    devices = jax.extend.backend.get_backend("cpu").devices()
    if len(devices) < count:
        fail(EXIT_NO_JAX, f"the mesh needs {count} devices, XLA has {len(devices)} (XLA_FLAGS={os.environ.get('XLA_FLAGS', '')})")
    devices = devices[:count]
    if args.check:
        for spec in manifest["modules"].values():
            Module(jax, xla_client, spec, devices, mesh)
        return
    name = args.module or manifest["main"]
    if name not in manifest["modules"]:
        fail(2, f"--module {name}: this artifact has {', '.join(manifest['modules'])}")
    spec = manifest["modules"][name]

    import numpy as np

    arrays = {}
    weights = args.weights or (manifest["weights"] and os.path.join(HERE, manifest["weights"]))
    if weights:
        arrays.update(read_safetensors(weights))
    for item in args.input:
        key, sep, path = item.partition("=")
        if not sep:
            fail(2, f"--input {item}: expected NAME=PATH")
        try:
            arrays[key] = np.load(path)
        except (OSError, ValueError) as e:
            fail(EXIT_REJECTED, f"cannot read input `{key}` from {path}: {e}")
    training = name == "train_step"
    if training:
        if args.lr is None:
            fail(2, "--module train_step needs --lr")
        arrays["train/lr"] = np.array(args.lr)
        arrays["train/momentum"] = np.array(args.momentum)
        for p in spec["parameters"]:
            if p["name"].startswith("train/velocity/") and p["name"] not in arrays:
                arrays[p["name"]] = np.zeros(p["shape"], numpy_dtype(p["dtype"]))
    values = feeds(spec, arrays)
    module = Module(jax, xla_client, spec, devices, mesh)
    if args.print_compiled:
        print(module.compiled_text())
    outputs = module.run(jax, values)
    if args.repeat > 0:
        if mesh:
            fail(2, "--repeat times one device; this artifact is sharded over a mesh")
        print(f"median {module.time(jax, values, args.repeat):.1f} us over {args.repeat} calls")
    losses = []
    for _ in range(1, args.steps if training else 1):
        # The step's outputs (after the loss) are the next step's weights and velocities.
        losses.append(outputs[0])
        updated = dict(zip(spec["outputs"][1:], outputs[1:]))
        values = [updated.get(p["name"], v) for p, v in zip(spec["parameters"], values)]
        outputs = module.run(jax, values)
    os.makedirs(args.out, exist_ok=True)
    if training:
        np.save(os.path.join(args.out, "losses.npy"), np.array(losses + [outputs[0]]))
    for i, o in enumerate(outputs):
        if o.dtype.name == "bfloat16":
            o = o.astype(np.float32)  # NumPy's files have no bfloat16
        np.save(os.path.join(args.out, f"output_{i}.npy"), o)


if __name__ == "__main__":
    main()
