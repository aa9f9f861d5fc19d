#!/usr/bin/env python3
"""Runs a model that mithrilc compiled for XLA (`--target xla`) through PJRT.

Shipped beside the HLO modules it runs; reads `manifest.json` from its own directory.
It parses an HLO module's text (which verifies it), compiles it with jaxlib's PJRT CPU
client, feeds it the weights (a safetensors file) and the inputs (.npy files), and
writes each output to `OUT/output_<i>.npy`, as the C target's demo does.

    python3 run_hlo.py --out DIR [--input NAME=FILE.npy | --input-index I=FILE.npy]...
                       [--module forward|backward] [--weights FILE] [--print-compiled]
                       [--repeat N] [--check]
    python3 run_hlo.py --module train_step --lr LR [--momentum M] [--steps N]
                       --out DIR --input NAME=FILE.npy ...
    python3 run_hlo.py --check

`--input NAME=FILE` gives the input (or weight) whose name NAME is such that the
argument starts with `NAME=`; a name may itself hold `=`, so when several names fit
the argument is refused and `--input-index I=FILE` (I: the input's place among the
module's inputs, counted from 0 in the manifest's order, weights not counted) says
which. Each file is read with NumPy's reader (`np.load`, no pickles) and must hold
exactly the type and shape the manifest gives (a bf16 input as float32, which .npy
files hold in its place); the weights are read with the safetensors package's reader
and every tensor must be a weight of the model, of its type and shape. Nothing is
converted: float data for an integer input is refused, not truncated.

`--module` picks the forward pass or, for a model compiled with `--grad`, the backward
pass (the default: the manifest's `main`). `--module train_step` (a model with a loss,
compiled with `--grad`) trains: N steps of SGD with momentum, each step's new weights
and velocities (zero at first) fed to the next; it writes the last step's outputs (the
loss before it, the new weights, the new velocities) and `losses.npy`, the loss before
each step. `--check` parses and compiles every module: alone, that is all it does (what
`mithrilc compile` runs); with a run, every module is compiled before the run, in the
same process (`mithrilc run`). `--print-compiled` prints
the optimized HLO that XLA compiled (after SPMD partitioning, for a sharded module).
Outputs are written under `--out` only (created if missing), never elsewhere.

A model compiled with `--mesh` (the manifest's `mesh`) is compiled for that many
devices with SPMD partitioning, its inputs and weights placed on them as the
manifest's `split` says; on the CPU the devices are virtual
(`--xla_force_host_platform_device_count`, which the runner adds to XLA_FLAGS).

Needs jax and jaxlib 0.10.2 exactly (the route to compile HLO text uses jaxlib APIs
that are private and move between versions) and safetensors 0.8.0:
pip install jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6

Every failure is one line on stderr, `run_hlo.py: ...`, and an exit status:
  0  done
  1  the data: an input or weights file missing, unreadable, malformed, or not of the
     type and shape the model declares; an `--out` that is not a usable directory
  2  usage: the arguments (an unknown option or module, an `--input` that names no
     input or several, a number that is not one)
  3  jax, jaxlib or safetensors missing or another version, or too few XLA devices
  4  the model refused its inputs: a gather index out of range (the C demo's status)
  5  XLA failed to parse, compile or run a module, or the runner failed (a fault of
     mithrilc's or XLA's, not of the data)
"""

import argparse
import json
import os
import re
import sys

JAX_VERSION = "0.10.2"
SAFETENSORS_VERSION = "0.8.0"
PINNED = {"jax": JAX_VERSION, "jaxlib": JAX_VERSION, "safetensors": SAFETENSORS_VERSION}
INSTALL = "pip install jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6"
EXIT_DATA = 1
EXIT_USAGE = 2
EXIT_TOOLCHAIN = 3
EXIT_REJECTED = 4
EXIT_XLA = 5
HERE = os.path.dirname(os.path.abspath(__file__))
# The training step's parameters that --lr and --momentum give.
FROM_OPTIONS = {"train/lr": "--lr", "train/momentum": "--momentum"}


def shown(text):
    """`text` (a name or path from the user) on one line: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def fail(status, message):
    print(f"run_hlo.py: {message}", file=sys.stderr)
    sys.exit(status)


def first_line(e):
    """An exception's message, first line only (XLA's run to pages)."""
    if isinstance(e, OSError) and e.strerror:
        return shown(e.strerror)
    lines = [line for line in str(e).splitlines() if line.strip()]
    return shown(lines[0] if lines else type(e).__name__)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(EXIT_USAGE, shown(message))


def count(text):
    """A count of 1 or more, in ASCII digits."""
    if not re.fullmatch(r"[0-9]{1,18}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"`{shown(text)}` is not a whole number of 1 or more")
    return int(text)


def finite(text):
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if x != x or x in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"`{shown(text)}` is not a finite number")
    return x


def check_packages():
    """Fails unless jax, jaxlib and safetensors are the pinned versions (read from
    their metadata: importing jax takes a while, and the data is checked first)."""
    import importlib.metadata as metadata

    found = {}
    for package in PINNED:
        try:
            found[package] = metadata.version(package)
        except Exception:  # PackageNotFoundError, or a broken installation
            found[package] = "none"
    wrong = [f"{p} {found[p]}" for p in PINNED if found[p] != PINNED[p]]
    if wrong:
        want = ", ".join(f"{p} {v}" for p, v in PINNED.items())
        fail(EXIT_TOOLCHAIN, f"the runner needs {want}; this Python has {', '.join(wrong)}: {INSTALL}")


def load_jax(devices):
    """jax with 64-bit types enabled (and at least `devices` CPU devices), and
    jaxlib's client module."""
    if devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip()
    try:
        import jax
        import jax.extend.backend
        from jax._src.lib import xla_client
    except Exception as e:
        fail(EXIT_TOOLCHAIN, f"cannot import jax: {first_line(e)}: {INSTALL}")
    jax.config.update("jax_enable_x64", True)
    return jax, xla_client


# The manifest's element types: the model's name for each, and NumPy's type.
DTYPES = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "s32": "i32", "s64": "i64", "pred": "bool"}


def numpy_dtype(name):
    import numpy as np

    if name == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f64": np.float64, "f16": np.float16, "s32": np.int32, "s64": np.int64, "pred": np.bool_}[name])


def dtype_name(dtype):
    """A NumPy type as the model writes types (`i64`), or as NumPy does."""
    for manifest, model in DTYPES.items():
        if dtype.newbyteorder("=") == numpy_dtype(manifest):
            return model
    return shown(dtype.str)


def declared(p):
    return f"{DTYPES[p['dtype']]}{p['shape']}"


def checked(p, a, where, stored=None):
    """Array `a` (read from `where`) for parameter `p` when it is exactly of its type
    (or `stored`, the type a file format holds it as), in either byte order, and of
    its shape; nothing is converted but the byte order (and a stand-in to the type)."""
    want = numpy_dtype(p["dtype"])
    if a.dtype.newbyteorder("=") != (stored or want) or list(a.shape) != p["shape"]:
        kind = "weight" if p["weight"] else "input"
        fail(EXIT_DATA, f"{kind} `{shown(p['name'])}` is {declared(p)}: {where} holds {dtype_name(a.dtype)}{list(a.shape)}")
    return a.astype(want)


def read_npy(path, p):
    """The .npy file `path` for parameter `p`, read by NumPy and checked (a bf16 one
    holds float32: .npy files have no bfloat16)."""
    import numpy as np

    where = shown(path)
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as e:  # whatever a hostile file makes NumPy's reader raise
        fail(EXIT_DATA, f"cannot read {where}: {first_line(e)}")
    if not isinstance(a, np.ndarray):
        a.close()
        fail(EXIT_DATA, f"{where} is an .npz archive: give each array as an .npy file")
    return checked(p, a, where, np.dtype(np.float32) if p["dtype"] == "bf16" else None)


def read_weights(path, spec):
    """The weights in the safetensors file `path`, read by the safetensors package
    (which checks the header, offsets and sizes), each checked against the weight of
    `spec` it names."""
    from safetensors import safe_open

    import ml_dtypes  # noqa: F401 (gives NumPy the bfloat16 that BF16 tensors are read as)

    weights = {p["name"]: p for p in spec["parameters"] if p["weight"]}
    where = shown(path)
    try:
        with safe_open(path, framework="np") as f:
            names = list(f.keys())
            for name in names:
                if name not in weights:
                    fail(EXIT_DATA, f"{where}: tensor `{shown(name)}` is not a weight of the model (its weights: {', '.join(map(shown, weights)) or 'none'})")
            arrays = {name: f.get_tensor(name) for name in names}
    except Exception as e:  # SafetensorError, or a type NumPy lacks
        fail(EXIT_DATA, f"cannot read the weights {where}: {first_line(e)}")
    return {name: checked(weights[name], a, where) for name, a in arrays.items()}


def given_inputs(spec, named, indexed):
    """The file for each parameter that `--input NAME=FILE` and `--input-index I=FILE`
    give, by name."""
    nameable = [p["name"] for p in spec["parameters"] if p["name"] not in FROM_OPTIONS]
    set_by_options = [p["name"] for p in spec["parameters"] if p["name"] in FROM_OPTIONS]
    inputs = [p["name"] for p in spec["parameters"] if not p["weight"] and p["name"] not in FROM_OPTIONS]
    listed = ", ".join(f"{i} `{shown(n)}`" for i, n in enumerate(inputs)) or "none"
    files = {}

    def give(name, path, arg):
        if name in files:
            fail(EXIT_USAGE, f"{arg}: `{shown(name)}` is already given")
        files[name] = path

    for item in named:
        arg = f"--input {shown(item)}"
        fits = [n for n in nameable if item.startswith(n + "=")]
        for name, option in FROM_OPTIONS.items():
            if not fits and name in set_by_options and item.startswith(name + "="):
                fail(EXIT_USAGE, f"{arg}: `{name}` is given by {option}")
        if not fits:
            fail(EXIT_USAGE, f"{arg}: expected NAME=FILE with NAME an input or weight of the module (inputs: {listed})")
        if len(fits) > 1:
            which = " and ".join(f"`{shown(n)}`" for n in fits)
            fail(EXIT_USAGE, f"{arg}: fits the names {which}: give --input-index I=FILE (inputs: {listed})")
        give(fits[0], item[len(fits[0]) + 1 :], arg)
    for item in indexed:
        arg = f"--input-index {shown(item)}"
        m = re.fullmatch(r"([0-9]{1,9})=(.*)", item, re.DOTALL)
        if not m:
            fail(EXIT_USAGE, f"{arg}: expected I=FILE with I the input's index (inputs: {listed})")
        if int(m[1]) >= len(inputs):
            fail(EXIT_USAGE, f"{arg}: no input {int(m[1])} (inputs: {listed})")
        give(inputs[int(m[1])], m[2], arg)
    return files


def prepare_out(out):
    """Makes `out` the directory outputs go to (created if missing), or fails."""
    where = shown(out)
    if os.path.lexists(out) and not os.path.isdir(out):
        fail(EXIT_DATA, f"--out {where}: not a directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail(EXIT_DATA, f"--out {where}: cannot create it: {shown(e.strerror)}")
    if not os.access(out, os.W_OK | os.X_OK):
        fail(EXIT_DATA, f"--out {where}: not writable")


def write_npy(out, name, array):
    """Writes `array` to `out/name`, a new file or one replaced (never through a
    symbolic link), or fails."""
    import numpy as np

    path = os.path.join(out, name)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
    except OSError as e:
        fail(EXIT_DATA, f"cannot write {shown(path)}: {shown(e.strerror)}")


class Module:
    """One HLO module of the manifest, parsed and compiled for `devices`."""

    def __init__(self, jax, xla_client, spec, devices, mesh):
        self.spec = spec
        self.mesh = mesh
        path = os.path.join(HERE, spec["hlo"])
        try:
            with open(path) as f:
                text = f.read()
        except (OSError, ValueError) as e:
            fail(EXIT_DATA, f"cannot read {shown(path)}: {first_line(e)}")
        try:
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
        except Exception as e:
            fail(EXIT_XLA, f"XLA cannot compile {shown(spec['hlo'])}: {first_line(e)}")

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

        try:
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
        except Exception as e:
            fail(EXIT_XLA, f"XLA failed running {shown(self.spec['hlo'])}: {first_line(e)}")


def feeds(spec, arrays):
    """The module's parameter values from `arrays` (by name, each already checked
    against its parameter), in parameter order; gather indices checked."""
    import numpy as np

    values = []
    for p in spec["parameters"]:
        kind = "weight" if p["weight"] else "input"
        if p["name"] not in arrays:
            how = "give it in the weights file or as --input NAME=FILE" if p["weight"] else "give --input NAME=FILE or --input-index I=FILE"
            fail(EXIT_DATA, f"no value for {kind} `{shown(p['name'])}` ({declared(p)}): {how}")
        a = arrays[p["name"]]
        if "rows" in p and a.size:
            # XLA clamps an index out of range; the model's semantics refuse it.
            n = p["rows"]
            bad = (a < -n) | (a >= n)
            if bad.any():
                at = tuple(int(i) for i in np.argwhere(bad)[0])
                fail(EXIT_REJECTED, f"index {a[at]} at {list(at)} of input `{shown(p['name'])}` is out of range for {n} rows (valid: -{n} to {n - 1})")
        values.append(a)
    return values


def devices_for(mesh):
    """jax, jaxlib's client module and the CPU devices of `mesh` (one without)."""
    devices = 1
    for _, n in mesh:
        devices *= n
    jax, xla_client = load_jax(devices)
    found = jax.extend.backend.get_backend("cpu").devices()
    if len(found) < devices:
        fail(EXIT_TOOLCHAIN, f"the mesh needs {devices} devices, XLA has {len(found)} (XLA_FLAGS={shown(os.environ.get('XLA_FLAGS', ''))})")
    return jax, xla_client, found[:devices]


def main():
    parser = Parser(description="Runs a model mithrilc compiled for XLA through PJRT.", allow_abbrev=False)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE", help="an input (or weight) as a .npy file, by name")
    parser.add_argument("--input-index", action="append", default=[], metavar="I=FILE", help="an input as a .npy file, by its index among the inputs")
    parser.add_argument("--out", help="the directory output_<i>.npy are written to (needed for a run)")
    parser.add_argument("--module", help="forward or backward (default: the manifest's main)")
    parser.add_argument("--weights", help="the weights (default: the manifest's safetensors file)")
    parser.add_argument("--lr", type=finite, help="train_step: the learning rate")
    parser.add_argument("--momentum", type=finite, default=0.0, help="train_step: the momentum (default 0)")
    parser.add_argument("--steps", type=count, default=1, help="train_step: how many steps (default 1)")
    parser.add_argument("--check", action="store_true", help="parse and compile every module (first, with a run; else only that)")
    parser.add_argument("--print-compiled", action="store_true", help="print the HLO XLA compiled")
    parser.add_argument("--repeat", type=count, help="also time N calls (after 10 warm-up calls) and print the median latency")
    args = parser.parse_args()

    try:
        with open(os.path.join(HERE, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        fail(EXIT_DATA, f"cannot read manifest.json beside the runner: {first_line(e)}")
    mesh = manifest.get("mesh") or []
    name = args.module or manifest["main"]
    if name not in manifest["modules"]:
        fail(EXIT_USAGE, f"--module {shown(name)}: this artifact has {', '.join(manifest['modules'])}")
    spec = manifest["modules"][name]
    training = name == "train_step"
    running = not args.check or args.out is not None
    if running:
        if args.out is None:
            fail(EXIT_USAGE, "give --out DIR, the directory output_<i>.npy are written to")
        if training and args.lr is None:
            fail(EXIT_USAGE, "--module train_step needs --lr")
        if args.repeat and mesh:
            fail(EXIT_USAGE, "--repeat times one device; this artifact is sharded over a mesh")
        files = given_inputs(spec, args.input, args.input_index)

    check_packages()
    compiled = {}
    if args.check:
        jax, xla_client, found = devices_for(mesh)
        compiled = {n: Module(jax, xla_client, m, found, mesh) for n, m in manifest["modules"].items()}
        if not running:
            return

    import numpy as np

    arrays = {}
    weights = args.weights or (manifest["weights"] and os.path.join(HERE, manifest["weights"]))
    if weights:
        arrays.update(read_weights(weights, spec))
    by_name = {p["name"]: p for p in spec["parameters"]}
    for input_name, path in files.items():
        arrays[input_name] = read_npy(path, by_name[input_name])
    if training:
        for p in spec["parameters"]:
            if p["name"] in FROM_OPTIONS:
                arrays[p["name"]] = np.array(args.lr if p["name"] == "train/lr" else args.momentum, numpy_dtype(p["dtype"]))
            elif p["name"].startswith("train/velocity/") and p["name"] not in arrays:
                arrays[p["name"]] = np.zeros(p["shape"], numpy_dtype(p["dtype"]))
    values = feeds(spec, arrays)
    prepare_out(args.out)
    if name in compiled:
        module = compiled[name]
    else:
        jax, xla_client, found = devices_for(mesh)
        module = Module(jax, xla_client, spec, found, mesh)
    if args.print_compiled:
        print(module.compiled_text())
    outputs = module.run(jax, values)
    if args.repeat:
        print(f"median {module.time(jax, values, args.repeat):.1f} us over {args.repeat} calls")
    losses = []
    for _ in range(1, args.steps if training else 1):
        # The step's outputs (after the loss) are the next step's weights and velocities.
        losses.append(outputs[0])
        updated = dict(zip(spec["outputs"][1:], outputs[1:]))
        values = [updated.get(p["name"], v) for p, v in zip(spec["parameters"], values)]
        outputs = module.run(jax, values)
    if training:
        write_npy(args.out, "losses.npy", np.array(losses + [outputs[0]]))
    for i, o in enumerate(outputs):
        if o.dtype.name == "bfloat16":
            o = o.astype(np.float32)  # NumPy's files have no bfloat16
        write_npy(args.out, f"output_{i}.npy", o)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a fault of the runner's: still one line
        fail(EXIT_XLA, f"the runner failed: {type(e).__name__}: {first_line(e)}")
