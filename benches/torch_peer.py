"""torch.compile on the CPU, the C target's optional second peer (bench.py --peers torch).

Rebuilds each benchmark model of ../shared/bench as a torch nn.Module from the same
safetensors (torch_models.py, which gpu_bench.py uses too) and compiles it as a torch
user deploys a model for inference on the CPU: f32 throughout (float32 matmul precision
"highest"), eval mode, under torch.no_grad, torch.compile with Inductor's freezing
(`torch._inductor.config.freezing`: the weights become constants, folded into the graph
and prepacked for oneDNN and MKL) at a fixed shape (dynamic=False). Inductor writes C++
for this CPU and builds it with the machine's compiler; its OpenMP loops take their
thread count when they are compiled (`cpp.threads`), so each case is compiled once for
each thread count and runs under torch.set_num_threads of the same.

Each compiled model's output is first checked against the reference output (within
1e-4 of its largest magnitude, as ort_peer.py checks ORT); then the median latency of
one call is taken over N calls, and the best of --rounds rounds is kept (each round
goes over every case, as bench.py's rounds do, so that one busy moment of the shared
machine does not catch every run of one case). One line per case, ort_peer.py's format:

    torch MODEL BATCH THREADS MEDIAN_US ERROR

with KIND "torch-ma" for mode="max-autotune" when --modes names it (Inductor then
also benchmarks its C++ GEMM templates against the ATen kernels while compiling).
ERROR is the largest difference from the reference output as a fraction of the
output's largest magnitude. Compiling is not timed: it takes seconds to a minute a
case, the first one longer while Inductor starts its compile workers; its caches on
disk make a second run faster.

A case that fails to compile or run, or differs from the reference, is left out with a
line on stderr saying why. When Inductor cannot build anything here (no working C++
compiler: it takes $CXX, else g++), the script says so in one line and exits 3 before
the first case. Other notes (torch's version, the CPU capability it found) go to stderr
too, so that stdout holds only the cases' lines.

Usage: python torch_peer.py BENCH_DIR [--repeat N] [--rounds R] [--models NAME,...]
                            [--modes default,max-autotune]
"""

import json
import statistics
import sys
import time

import numpy as np
import torch

from torch_models import MODELS, check_params, load_params, torch_model

KINDS = {"default": "torch", "max-autotune": "torch-ma"}


def note(text):
    print(f"torch_peer: {text}", file=sys.stderr, flush=True)


def reason(e):
    """One line for an exception: Inductor wraps the cause (a compiler's error, a
    missing compiler) in BackendCompilerFailed, whose own first line says little."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def compile_for(model, x, threads, mode):
    """`model` compiled for `threads` threads and run once (the compilation happens at
    the first call): the compiled callable and its output."""
    torch.set_num_threads(threads)
    torch._inductor.config.cpp.threads = threads
    compiled = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
    return compiled, compiled(x)


def main():
    bench = sys.argv[1]
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 100
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    models = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else list(MODELS)
    modes = sys.argv[sys.argv.index("--modes") + 1].split(",") if "--modes" in sys.argv else ["default"]
    if unknown := [m for m in modes if m not in KINDS]:
        sys.exit(f"torch_peer: unknown mode(s) {unknown}; known: {', '.join(KINDS)}")
    manifest = json.load(open(f"{bench}/MANIFEST.json"))
    torch.set_num_interop_threads(1)
    # f32 products in f32: with a lower precision oneDNN may compute them in bf16, which
    # mithrilc's f32 build does not.
    torch.set_float32_matmul_precision("highest")
    torch._inductor.config.freezing = True
    # Every model's Net shares one forward, each case and thread count is a compilation
    # of it, and dynamo keeps 8 of one code object by default: past that it would run
    # the later cases eagerly.
    # (recompile_limit is the newer name of cache_size_limit.)
    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, max(64, getattr(torch._dynamo.config, key)))
    note(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
         f"Inductor with freezing, f32; modes {', '.join(modes)}")
    with torch.no_grad():
        try:
            compile_for(lambda x: torch.relu(x) * 2.0, torch.ones(8), 1, "default")
        except Exception as e:
            note(f"Inductor cannot compile on this machine ({reason(e)}); the torch peer is left out")
            sys.exit(3)
        torch._dynamo.reset()
        plans = []  # (kind, name, batch, threads, compiled, x, runs, error): what the rounds time
        for name in models:
            check_params(name, f"{bench}/{name}.safetensors", manifest[name]["params"])
            params = load_params(f"{bench}/{name}.safetensors")
            for batch, info in sorted(manifest[name]["batches"].items(), key=lambda kv: int(kv[0])):
                x = torch.from_numpy(np.load(f"{bench}/{info['input']}"))
                want = np.load(f"{bench}/{info['output']}")
                scale = float(np.max(np.abs(want)))
                runs = max(5, repeat if info["flops"] < 5e9 else repeat // 10)
                for mode in modes:
                    for threads in (1, 2):
                        label = f"{name} b{batch} {mode} {threads}t"
                        start = time.perf_counter()
                        try:
                            compiled, got = compile_for(torch_model(name, params), x, threads, mode)
                            took = time.perf_counter() - start
                            for _ in range(3):
                                compiled(x)
                        except Exception as e:
                            note(f"{label}: left out: torch.compile failed ({reason(e)})")
                            continue
                        err = float(np.max(np.abs(got.numpy().reshape(want.shape) - want)))
                        note(f"{label}: compiled in {took:.1f} s, error {err / scale:.2e}")
                        if err > 1e-4 * max(1.0, scale):
                            note(f"{label}: left out: differs from the reference by {err:.3e} (max |output| {scale:.3f})")
                            continue
                        plans.append((KINDS[mode], name, batch, threads, compiled, x, runs, err / scale))
        best = {}
        for _ in range(rounds):
            for kind, name, batch, threads, compiled, x, runs, _ in plans:
                # Dynamo's guards include the thread count: this picks the compilation
                # made for it.
                torch.set_num_threads(threads)
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    compiled(x)
                    times.append((time.perf_counter() - t0) * 1e6)
                key = (kind, name, batch, threads)
                best[key] = min(statistics.median(times), best.get(key, float("inf")))
    for kind, name, batch, threads, _, _, _, err in plans:
        print(f"{kind} {name} {batch} {threads} {best[(kind, name, batch, threads)]:.1f} {err:.3e}", flush=True)


if __name__ == "__main__":
    main()
