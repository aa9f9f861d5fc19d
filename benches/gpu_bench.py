"""The CUDA target's benchmark against PyTorch (eager and torch.compile) on ../shared/bench.

For every model and batch size, in one run:
  1. compiles the model with mithrilc (--target cuda, weights in weights.bin), loads
     lib<name>.so with ctypes and checks its output, through <name>_forward and through
     its CUDA graph, against the reference output;
  2. rebuilds the model as a torch nn.Module from the same safetensors (the structures
     the bench README describes) and checks that it reproduces the reference output;
  3. times, with CUDA events, mithrilc's <name>_forward, mithrilc's CUDA graph
     (<name>_graph_launch), torch eager, torch.compile(mode="max-autotune-no-cudagraphs")
     and torch.compile(mode="reduce-overhead"), i.e. with CUDA graphs;
  4. prints each case's latencies and ratio = best mithrilc / best torch.compile.

With --gemm cublaslt every case is also compiled with mithrilc's --gemm cublaslt (its
matrix products on cuBLASLt, loaded at run time: $MR_CUBLASLT or libcublasLt.so.13) and
timed as two more runners, "lt" and "lt graph", with their own ratio column, run with
MR_CUBLASLT_REQUIRE=1 so that a product cuBLASLt would not run fails that runner's check
rather than time the built-in kernels. When cuBLASLt cannot be loaded here, or a case's
build fails, those runners are left out, saying why.

By default everything is f32 with TF32 off: mithrilc's CUDA kernels compute exact f32,
and torch with TF32 would be measured doing less work (10-bit mantissas in its GEMMs and
convolutions). A check fails when max |output - reference| > 1e-3 * max |reference|.
With --precision tf32 both sides round their products' operands to TF32: mithrilc
compiles with --precision tf32 (tensor cores, mma.sync) and torch runs with
allow_tf32 on for matmuls and cuDNN (float32_matmul_precision "high"); the checks then
allow 1e-2 * max |reference|.

As in bench.py, the whole measurement runs --rounds times (3 by default), alternating
the runners and cases, and each keeps its best median of --repeat calls: a GPU's
clocks and its host's load drift, and one round can catch one side at a bad moment.
Every timed call waits for the stream before the next starts, so a time is the latency
of one inference (host launch overhead included), as the C benchmark's demo measures.
torch.compile's compilation happens in the warm-up, before the first round, and is not
timed; with max-autotune it benchmarks GEMM and convolution templates and can take
minutes per case (Inductor caches them on disk, so a second run on the same machine is
faster). --models runs a subset and --compile-modes reduce-overhead skips the tuning,
e.g. to fit the run into a machine lent for a short time. The cases build side by side,
one per core.

--dry-run (automatic, with the reason, when torch cannot be imported or sees no CUDA
device) needs neither a GPU nor nvcc nor numpy: it compiles every case with
--emit source, checks each header (its size macros against the manifest's shapes and
weights.bin, the five functions declared in it and defined in the .cu) and each
safetensors file against the torch model's parameters, and prints what would be
measured. Run on a GPU machine through benches/gpu_run.sh, which builds mithrilc and
checks that nvidia-smi and torch are there.

Usage: python gpu_bench.py MITHRILC BENCH_DIR WORK_DIR [--repeat N] [--rounds R]
           [--warmup W] [--models mlp,cnn,...] [--compile-modes reduce-overhead,...]
           [--gemm cublaslt] [--precision tf32] [--dry-run]
"""

import argparse
import ast
import concurrent.futures
import ctypes
import json
import os
import re
import statistics
import struct
import subprocess
import sys

# The bench models as torch modules, shared with torch_peer.py (this script's folder).
from torch_models import MODELS, check_params, load_params, prod, torch_model

# A check's bound, relative to the reference's largest magnitude, per --precision.
TOLERANCE = {"f32": 1e-3, "tf32": 1e-2}
COMPILE_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")
RUNNERS = ("mithrilc", "mithrilc graph", "torch eager") + tuple(f"compile {m}" for m in COMPILE_MODES) + ("lt", "lt graph")
FUNCTIONS = ("forward", "graph_create", "graph_launch", "graph_destroy", "load_weights")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mithrilc")
    ap.add_argument("bench")
    ap.add_argument("work")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--compile-modes", default=",".join(COMPILE_MODES),
                    help="the torch.compile modes to measure, comma-separated (max-autotune's tuning takes "
                         "minutes: a short lease may take reduce-overhead alone); empty for none")
    ap.add_argument("--gemm", choices=("builtin", "cublaslt"), default="builtin",
                    help="cublaslt: also time each case compiled with --gemm cublaslt")
    ap.add_argument("--precision", choices=tuple(TOLERANCE), default="f32",
                    help="tf32: mithrilc's --precision tf32 against torch with TF32 on")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    models = args.models.split(",")
    if unknown := [m for m in models if m not in MODELS]:
        sys.exit(f"gpu_bench: unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    dry = args.dry_run or not gpu_ready()
    manifest = json.load(open(f"{args.bench}/MANIFEST.json"))
    args.modes = modes = args.compile_modes.split(",") if args.compile_modes else []
    if unknown := [m for m in modes if m not in COMPILE_MODES]:
        sys.exit(f"gpu_bench: unknown torch.compile mode(s) {unknown}; known: {', '.join(COMPILE_MODES)}")
    todo = []
    for name in models:
        check_params(name, f"{args.bench}/{name}.safetensors", manifest[name]["params"])
        for batch, info in sorted(manifest[name]["batches"].items(), key=lambda kv: int(kv[0])):
            todo.append((name, batch, info, f"{args.work}/{name}_b{batch}"))
    # --gemm cublaslt's builds, unless cuBLASLt is missing here (the library would run its
    # built-in kernels: nothing new to time). The dry run builds them anyway.
    lt_skip = None if args.gemm == "cublaslt" and dry else cublaslt_missing() if args.gemm == "cublaslt" else "not asked for"
    if args.gemm == "cublaslt":
        print(f"cuBLASLt: {'loads' if lt_skip is None else 'left out: ' + lt_skip}", flush=True)
    flags = ["--precision", args.precision]
    lt_todo = [(name, batch, info, f"{out}_lt", flags + ["--gemm", "cublaslt"]) for name, batch, info, out in todo] if lt_skip is None else []
    # Each build is one nvcc process (about 20 s of one core for the four code
    # generations): the cases build side by side, one per core.
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        emit = "source" if dry else "build"
        built = list(pool.map(lambda c: compile_case(args.mithrilc, args.bench, c[0], c[2], c[3], emit, c[4]),
                              [c + (flags,) for c in todo] + lt_todo))
    if not all(built[:len(todo)]):
        sys.exit("gpu_bench: the built-in kernels' builds failed (above)")
    cases = [Case(name, batch, info, out, read_header(out, info)) for name, batch, info, out in todo]
    for case, ok in zip(cases, built[len(todo):]):
        # A --gemm cublaslt build that failed leaves that case's lt runners out, not the run.
        if ok:
            case.builds.append(("lt", f"{case.out}_lt", read_header(f"{case.out}_lt", case.info)))
    if dry:
        return dry_run(args, cases)
    return measure(args, cases)


def gpu_ready():
    """Whether the measurement can run here; otherwise says why the dry run follows."""
    try:
        import torch
    except ImportError as e:
        print(f"gpu_bench: dry run: torch cannot be imported ({e})")
        return False
    if not torch.cuda.is_available():
        print(f"gpu_bench: dry run: torch {torch.__version__} sees no CUDA device (torch.version.cuda = {torch.version.cuda})")
        return False
    return True


class Case:
    def __init__(self, name, batch, info, out, header):
        self.name, self.batch, self.info, self.out, self.header = name, batch, info, out, header
        self.label = f"{name} b{batch}"
        # (runner, directory, header) of each build: the built-in kernels', then
        # --gemm cublaslt's when there is one
        self.builds = [("mithrilc", out, header)]

    def runs(self, repeat):
        # As bench.py: the cases above 5 GFLOP take a tenth of the calls, so that a slow
        # first version of a kernel cannot make the run outlast the device's lease.
        return repeat if self.info["flops"] < 5e9 else max(5, repeat // 10)


def compile_case(mithrilc, bench, name, info, out, emit, flags):
    """Whether the build succeeded (a failure is printed)."""
    shape = ",".join(str(d) for d in info["input_shape"])
    cmd = [mithrilc, "compile", f"{bench}/{name}.json", "--target", "cuda", "--shape", f"input={shape}",
           "--params", f"{bench}/{name}.safetensors", "-o", out, "--force", "--emit", emit] + flags
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"gpu_bench: {' '.join(cmd)}\nexited {done.returncode}:\n{done.stdout}{done.stderr}", flush=True)
    return done.returncode == 0


def read_header(out, info):
    """The artifact's name and size macros, checked against the manifest and weights.bin.

    The name is taken from the header's file name (the one .h with a .cu of the same
    stem; mithril_cuda.h and the like have none), not assumed to be the JSON's stem."""
    stems = [f[:-2] for f in sorted(os.listdir(out)) if f.endswith(".h") and os.path.exists(f"{out}/{f[:-2]}.cu")]
    if len(stems) != 1:
        sys.exit(f"gpu_bench: {out}: expected one <name>.h with a <name>.cu, found {stems}")
    name = stems[0]
    text = open(f"{out}/{name}.h").read()
    macro = name.upper()
    sizes = {}
    for key in ("WEIGHTS_SIZE", "ARENA_SIZE", "INPUT_0_SIZE", "OUTPUT_0_SIZE", "NUM_INPUTS", "NUM_OUTPUTS"):
        m = re.search(rf"^#define {macro}_{key} \(?(\d+)u?\)?$", text, re.M)
        if not m:
            sys.exit(f"gpu_bench: {out}/{name}.h: no #define {macro}_{key}")
        sizes[key] = int(m.group(1))
    # The script passes one input and one output: a second of either would be read
    # from uninitialised pointer slots.
    if (sizes["NUM_INPUTS"], sizes["NUM_OUTPUTS"]) != (1, 1):
        sys.exit(f"gpu_bench: {out}/{name}.h: {sizes['NUM_INPUTS']} inputs, {sizes['NUM_OUTPUTS']} outputs; expected 1 and 1")
    for key, shape in (("INPUT_0_SIZE", info["input_shape"]), ("OUTPUT_0_SIZE", info["output_shape"])):
        if sizes[key] != prod(shape):
            sys.exit(f"gpu_bench: {out}/{name}.h: {macro}_{key} = {sizes[key]}, but the manifest's shape {shape} has {prod(shape)}")
    blob = os.path.getsize(f"{out}/weights.bin")
    if blob != sizes["WEIGHTS_SIZE"]:
        sys.exit(f"gpu_bench: {out}/weights.bin has {blob} bytes, {macro}_WEIGHTS_SIZE says {sizes['WEIGHTS_SIZE']}")
    source = open(f"{out}/{name}.cu").read()
    for fn in FUNCTIONS:
        if not re.search(rf"\b{name}_{fn}\s*\(", text):
            sys.exit(f"gpu_bench: {out}/{name}.h does not declare {name}_{fn}")
        if not re.search(rf'^extern "C" \w+ {name}_{fn}\s*\(', source, re.M):
            sys.exit(f'gpu_bench: {out}/{name}.cu does not define extern "C" {name}_{fn}')
    return {"name": name, **sizes}


def npy_shape(path):
    """An .npy file's dtype and shape from its header (the dry run has no numpy)."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            sys.exit(f"gpu_bench: {path} is not an .npy file")
        major = f.read(2)[0]
        (size,) = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))
        header = ast.literal_eval(f.read(size).decode("latin1"))
    return header["descr"], list(header["shape"])


def dry_run(args, cases):
    for case in cases:
        for key, what in (("input", "input_shape"), ("output", "output_shape")):
            path = f"{args.bench}/{case.info[key]}"
            descr, shape = npy_shape(path)
            if descr != "<f4" or shape != case.info[what]:
                sys.exit(f"gpu_bench: {path}: {descr} {shape}, expected <f4 {case.info[what]}")
    print(f"dry run: compiled {len(cases)} cases with --emit source into {args.work}; on a GPU it would measure:")
    for case in cases:
        h = case.header
        print(f"{case.label:<14} lib{h['name']}.so: weights {h['WEIGHTS_SIZE']} B, arena {h['ARENA_SIZE']} B, "
              f"input {case.info['input_shape']}, output {case.info['output_shape']}; "
              f"{case.runs(args.repeat)} calls after {args.warmup} warm-up, {case.info['flops'] / 1e9:.3f} GFLOP")
    runners = RUNNERS[:3] + tuple(f"compile {m}" for m in args.modes) + (("lt", "lt graph") if args.gemm == "cublaslt" else ())
    print(f"runners per case: {', '.join(runners)}")
    print(f"each checked against NAME_bB_output.npy (max abs error <= {TOLERANCE[args.precision]:g} * max |output|) before timing;")
    print(f"best of {args.rounds} rounds of the median latency (CUDA events, one synchronised call each); {precision_words(args)}.")
    print(f"header checks passed: size macros = manifest shapes and weights.bin; {', '.join(FUNCTIONS)} declared and defined.")
    print(f"safetensors checks passed: every parameter maps to a torch layer ({', '.join(dict.fromkeys(c.name for c in cases))}).")
    return 0


# ---- the measurement (needs numpy, torch and a CUDA device) ----

def cublaslt_missing():
    """Why mithrilc's --gemm cublaslt would not find cuBLASLt here (None: it would),
    looked up as the generated library does: $MR_CUBLASLT, else libcublasLt.so.13."""
    name = os.environ.get("MR_CUBLASLT") or "libcublasLt.so.13"
    if name == "off":
        return "MR_CUBLASLT=off"
    try:
        lib = ctypes.CDLL(name, mode=os.RTLD_LOCAL)
    except OSError as e:
        return f"{name} does not load ({e}); set MR_CUBLASLT to its path"
    version = lib.cublasLtGetVersion()
    return None if version // 10000 == 13 else f"{name} is cuBLASLt {version}, not 13.x"


class Mithrilc:
    """lib<name>.so with its device buffers, called through ctypes on its own stream."""

    loaded = {}

    def __init__(self, case, x, out, h):
        import numpy as np
        import torch
        name = h["name"]
        path = os.path.abspath(f"{out}/lib{name}.so")
        lib = ctypes.CDLL(path)
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        self.forward_fn = lib[f"{name}_forward"]
        self.forward_fn.argtypes, self.forward_fn.restype = [vp, pvp, pvp, vp, vp], ctypes.c_int
        self.create_fn = lib[f"{name}_graph_create"]
        self.create_fn.argtypes, self.create_fn.restype = [pvp, vp, pvp, pvp, vp, vp], ctypes.c_int
        self.launch_fn = lib[f"{name}_graph_launch"]
        self.launch_fn.argtypes, self.launch_fn.restype = [vp, vp], ctypes.c_int
        self.destroy_fn = lib[f"{name}_graph_destroy"]
        self.destroy_fn.argtypes, self.destroy_fn.restype = [vp], None
        # Two cases of one model both build lib<name>.so. Were the libraries to carry a
        # soname, dlopen would hand the second case the first one's code (the wrong batch).
        address = ctypes.cast(self.forward_fn, vp).value
        if address in Mithrilc.loaded:
            sys.exit(f"gpu_bench: {path} resolved to the library of {Mithrilc.loaded[address]}")
        Mithrilc.loaded[address] = path
        blob = np.fromfile(f"{out}/weights.bin", dtype=np.uint8)
        self.weights = torch.from_numpy(blob).cuda()
        # max(1, ...): an empty arena would have a null data_ptr.
        self.arena = torch.empty(max(1, h["ARENA_SIZE"]), dtype=torch.uint8, device="cuda")
        self.x = x.contiguous()
        self.y = torch.empty(h["OUTPUT_0_SIZE"], dtype=torch.float32, device="cuda")
        self.inputs = (vp * 1)(self.x.data_ptr())
        self.outputs = (vp * 1)(self.y.data_ptr())
        # Not torch's default stream: that is the legacy NULL stream, which CUDA refuses
        # to capture into a graph.
        self.stream = torch.cuda.Stream()
        self.handle = self.stream.cuda_stream
        torch.cuda.synchronize()
        self.exec = vp()
        with torch.cuda.stream(self.stream):
            self.status("graph_create", self.create_fn(ctypes.byref(self.exec), self.weights.data_ptr(), self.inputs,
                                                         self.outputs, self.arena.data_ptr(), self.handle))
        self.label = case.label

    def status(self, fn, rc):
        if rc != 0:
            raise RuntimeError(f"{self.label}: {fn} returned {rc}")

    def forward(self):
        self.status("forward", self.forward_fn(self.weights.data_ptr(), self.inputs, self.outputs,
                                               self.arena.data_ptr(), self.handle))
        return self.y

    def graph(self):
        self.status("graph_launch", self.launch_fn(self.exec, self.handle))
        return self.y

    def close(self):
        self.destroy_fn(self.exec)


def precision_words(args):
    """What both sides compute, in words."""
    if args.precision == "tf32":
        return ("TF32 on both sides: mithrilc --precision tf32, torch.backends.cuda.matmul.allow_tf32 = True, "
                "torch.backends.cudnn.allow_tf32 = True")
    return "f32 throughout: torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False"


def error(got, want, precision):
    """max |got - want| and whether it is within the precision's tolerance."""
    import numpy as np
    got = got.detach().float().cpu().numpy().reshape(want.shape)
    err = float(np.max(np.abs(got - want)))
    return err, err <= TOLERANCE[precision] * float(np.max(np.abs(want)))


def time_calls(fn, n, stream):
    """The median latency in µs of n calls, each timed by CUDA events on `stream` and
    waited for before the next: one inference's latency, not a pipelined throughput."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.cuda.stream(stream):
        for _ in range(n):
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def measure(args, cases):
    import numpy as np
    import torch
    # By default mithrilc's kernels compute exact f32, and TF32 would let torch do less
    # work; with --precision tf32 both round to TF32.
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    # Every case's model shares Net.forward's code, and dynamo keeps 8 compilations of
    # one code object by default: past that it would run the later cases eagerly and
    # time them as torch.compile. (recompile_limit is the newer name of cache_size_limit.)
    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, max(64, getattr(torch._dynamo.config, key)))
    failures = []
    plans = []  # (case, runner, fn, stream): what the rounds time
    # A product the lt builds run on the built-in kernels is then an error, so that an lt
    # time is cuBLASLt's (mr_cublaslt.h); the built-in builds never call cuBLASLt.
    os.environ["MR_CUBLASLT_REQUIRE"] = "1"

    def check(case, runner, fn, stream, want):
        """Warms fn up, checks its output and adds it to the plans; a runner that fails
        is reported and left out, so that one broken case still lets the others run."""
        try:
            with torch.cuda.stream(stream):
                # The first calls compile (torch.compile) and record graphs (reduce-overhead).
                for _ in range(args.warmup):
                    fn()
                got = fn().clone()
            torch.cuda.synchronize()
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else ""
            print(f"check {case.label:<14} {runner:<36} FAILED to run: {type(e).__name__}: {first}", flush=True)
            failures.append(f"{case.label} {runner}: {type(e).__name__}")
            return
        err, ok = error(got, want, args.precision)
        print(f"check {case.label:<14} {runner:<36} max abs error {err:.2e} (max |output| {np.max(np.abs(want)):.3f})"
              f"{'' if ok else '  FAILED'}", flush=True)
        if ok:
            plans.append((case, runner, fn, stream))
        else:
            failures.append(f"{case.label} {runner}: max abs error {err:.2e}")

    params = {}
    libraries = []
    with torch.no_grad():
        for case in cases:
            x = torch.from_numpy(np.load(f"{args.bench}/{case.info['input']}")).cuda()
            want = np.load(f"{args.bench}/{case.info['output']}")
            for runner, out, header in case.builds:
                try:
                    m = Mithrilc(case, x, out, header)
                    libraries.append(m)
                    check(case, runner, m.forward, m.stream, want)
                    check(case, f"{runner} graph", m.graph, m.stream, want)
                except Exception as e:
                    print(f"check {case.label:<14} {runner:<36} FAILED to load: {type(e).__name__}: {e}", flush=True)
                    failures.append(f"{case.label} {runner}: {type(e).__name__}")
            if case.name not in params:
                params[case.name] = load_params(f"{args.bench}/{case.name}.safetensors")
            model = torch_model(case.name, params[case.name]).cuda()
            stream = torch.cuda.current_stream()
            check(case, "torch eager", lambda model=model, x=x: model(x), stream, want)
            for mode in args.modes:
                # dynamic=False: the second batch of a model would otherwise be compiled
                # with a symbolic batch dimension, which is not what a fixed-shape
                # deployment (or mithrilc's artifact) gets.
                compiled = torch.compile(model, mode=mode, dynamic=False)
                if mode == "reduce-overhead":
                    # Tells cudagraph trees each call is a new inference, so that they
                    # replay the graph rather than keep the last call's outputs alive.
                    def fn(compiled=compiled, x=x):
                        torch.compiler.cudagraph_mark_step_begin()
                        return compiled(x)
                else:
                    def fn(compiled=compiled, x=x):
                        return compiled(x)
                check(case, f"compile {mode}", fn, stream, want)
        best = {}
        for r in range(args.rounds):
            for case, runner, fn, stream in plans:
                us = time_calls(fn, case.runs(args.repeat), stream)
                best[(case.label, runner)] = min(us, best.get((case.label, runner), us))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
        for m in libraries:
            m.close()
    report(args, cases, best)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


def report(args, cases, best):
    import torch
    print()
    print(f"GPU: {torch.cuda.get_device_name()} (capability {'.'.join(map(str, torch.cuda.get_device_capability()))}), "
          f"driver {driver_version()}")
    mithrilc_version = subprocess.run([args.mithrilc, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{mithrilc_version}; torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}); "
          f"python {sys.version.split()[0]}")
    print(precision_words(args))
    print(f"{'case':<14} {'mithrilc':>10} {'m. graph':>10} {'eager':>10} {'compile':>10} {'mode':>4} {'ratio':>7}"
          f" {'lt':>10} {'ratio lt':>8}")

    def cell(us):
        return f"{us:>8.1f}us" if us is not None else f"{'-':>10}"

    for case in cases:
        got = {runner: best.get((case.label, runner)) for runner in RUNNERS}
        ours = [us for us in (got["mithrilc"], got["mithrilc graph"]) if us is not None]
        compiled = [(got[f"compile {m}"], tag) for m, tag in zip(COMPILE_MODES, ("ma", "ro")) if got[f"compile {m}"] is not None]
        peer, tag = min(compiled) if compiled else (None, "-")
        ratio = f"{min(ours) / peer:>7.2f}" if ours and peer else f"{'-':>7}"
        lt = [us for us in (got["lt"], got["lt graph"]) if us is not None]
        ratio_lt = f"{min(lt) / peer:>8.2f}" if lt and peer else f"{'-':>8}"
        print(f"{case.label:<14} {cell(got['mithrilc'])} {cell(got['mithrilc graph'])} {cell(got['torch eager'])} "
              f"{cell(peer)} {tag:>4} {ratio} {cell(min(lt) if lt else None)} {ratio_lt}")
    print("ratio = the faster mithrilc run (plain or graph) / the faster torch.compile mode; median latency of one call")
    print(f"(CUDA events, synchronised after each), the best of {args.rounds} rounds in this run; - = failed its check or did not run.")
    print("mode: ma = torch.compile(mode=\"max-autotune-no-cudagraphs\"), ro = mode=\"reduce-overhead\" (CUDA graphs).")
    print("m. graph = <name>_graph_launch of a CUDA graph captured by <name>_graph_create.")
    print("lt, ratio lt: the faster of plain and graph with --gemm cublaslt (products on cuBLASLt, MR_CUBLASLT_REQUIRE=1);")
    print("- = not asked for, cuBLASLt absent, or a product it would not run.")


def driver_version():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
