"""The C target's benchmark against ONNX Runtime on ../shared/bench.

For every model and batch size: compiles the model with mithrilc (embedded weights,
portable, as `compile` builds by default: the runtime picks this CPU's kernels at run
time; the demo names them), runs its demo on the reference input and takes the median
latency of N calls; runs ONNX Runtime on the same model and weights with 1 and 2
threads (ort_peer.py, which first checks ORT reproduces the reference output); and
prints the ratio mithrilc / best ORT. The whole measurement runs --rounds times (3 by
default), alternating mithrilc and ORT, and each case keeps its best median: the
machines are shared VMs whose load changes from minute to minute, so one round can
catch one side at a bad moment. Run through benches/run.sh, which installs the peer's
packages.

With --baseline OTHER_MITHRILC (another build of mithrilc, e.g. of an earlier commit),
every case is also compiled with it and timed in the same rounds, and a last column
gives this build / the baseline (best of 1 and 2 threads each): a change's effect on
latency, measured side by side.

With --onnx DIR (the bench models as ONNX, written by onnx_export.py, which run.sh
passes), each case is also compiled from DIR/NAME.onnx (its own weights, embedded as
the JSON version's) and timed in the same rounds: a row "NAME bB onnx" below each case
gives its latency and ratio to ORT, and onnx/json the faster ONNX run / the faster JSON
run. The two frontends make the same graph of these models (tests/onnx_bench.rs), so
the ratio is 1 within the machine's noise.

The same build for this CPU only (`--cpu native`) is timed in the same rounds too: the
"native" column gives the faster of its 1- and 2-thread runs and portable / native, what
portability costs.

The ggml target is timed in the same rounds: each case compiled with --target ggml with
f32 weights and with --quantize q8_0, its demo run with 1 and 2 threads; the ggml
columns give both, and the faster one's ratio to the best ORT run. So is the XLA
target: each case compiled with --target xla and run by its runner (run_hlo.py, under
JAX_PYTHON, a Python with jax) through PJRT's CPU client, which uses every core; the
XLA column gives its median and ratio to the best ORT run.

At batch 1 the C target is also compiled with --quantize f16, bf16 and q8_0 (weights of
matrix products and convolutions stored narrow, computed in f32) and timed in the same
rounds; a second table gives each beside the f32 build: 1- and 2-thread latency, the
faster one's ratio to f32's, and the size of weights.bin. --narrow-only times those
builds alone (no ORT, ggml, XLA or native runs: no peer packages needed), and --models
NAME,... limits the run to some models.

The in-process JIT (--target jit) is timed in the same rounds: `mithrilc run --target jit
--repeat N --threads T` on each case gives the median latency of one run as the C demo's
--repeat gives it (the arrays made once, outside the runs), beside the C target's and
ORT's (jit/C, jit/ORT: each the faster of 1 and 2 threads). A second JIT table times what
a user waits for from a model file to its first output: the whole `mithrilc run` process
(read the model and parameters, compile, run once, write nothing) at batch 1 with
--target jit, with --target c (its runtime's objects in the build cache, as after a first
build) and with the interpreter, best of the rounds; and once, in the first round, mlp
with --target c --no-cache (a first build). --jit-only times the JIT tables alone (the C
demos and ORT beside it; no ggml, XLA, native, narrow or ONNX builds).

Every case is also compiled with --quantize int8 (int8 products: weights int8 per output
column, each product's input quantized per row as it runs) and timed in the same rounds,
and ONNX Runtime runs each model quantized with quantize_dynamic too (ort_peer.py
--quantized); an int8 table gives, per case, the C target in f32 and int8, ORT in f32 and
quantized, each mode's error against the reference output (as a fraction of the output's
largest magnitude: a faster but less accurate mode shows as such), int8 / f32 and int8 /
ORT's quantized model. --int8-only times those alone (no ggml, XLA, native, JIT, narrow
or ONNX builds); with --peak, the int8 products' share of the int8 peak.

With --peak FILE (the output of benches/peak/run.sh, which run.sh passes), each case's
FLOPs (from MANIFEST.json) give the faster mithrilc run's speed as a fraction of the
measured FMA peak for its thread count ("% peak"), and the "floor" column the ratio to
ORT that a run at the 2-thread peak would have: where the floor is above a target ratio,
no f32 code can reach that ratio on this machine.

With --peers torch, a second peer: torch.compile with Inductor's freezing on the CPU
(torch_peer.py, run by --torch-python, by default target/bench-torch-venv's python, which
run.sh installs when asked for this peer; torch is large and the default run does without
it), which checks each compiled model against the reference output, then times it at 1
and 2 threads as ort_peer.py times ORT. The main table gains its columns: its 1- and
2-thread latency, its error, and "vs torch", the faster mithrilc run / the faster torch
run. It runs once, after mithrilc's rounds, doing --rounds rounds of its own: compiling
each case (seconds to a minute) each round would be most of the run. --torch-modes
default,max-autotune also times mode="max-autotune" (Inductor then benchmarks its own C++
GEMM templates against MKL's while compiling: minutes more), and the column takes the
faster mode ("ma" after its time when max-autotune won). Where the peer cannot run (no
torch, no C++ compiler for Inductor, a case that fails), one line says why and the table
shows "-" for what it could not time.

Usage: python bench.py MITHRILC BENCH_DIR WORK_DIR [--repeat N] [--rounds R] [--baseline OTHER] [--peak FILE]
                       [--onnx DIR] [--models NAME,...] [--narrow-only] [--jit-only] [--int8-only]
                       [--peers torch] [--torch-python PYTHON] [--torch-modes default,max-autotune]
"""

import json
import os
import re
import shutil
import subprocess
import time
import sys

import numpy as np


def main():
    mithrilc, bench, work = sys.argv[1:4]
    repeat = sys.argv[sys.argv.index("--repeat") + 1] if "--repeat" in sys.argv else "100"
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
    baseline = sys.argv[sys.argv.index("--baseline") + 1] if "--baseline" in sys.argv else None
    peak = read_peak(sys.argv[sys.argv.index("--peak") + 1]) if "--peak" in sys.argv else {}
    models = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else ["mlp", "lenet", "cnn", "gpt_block"]
    narrow_only = "--narrow-only" in sys.argv
    jit_only = "--jit-only" in sys.argv
    int8_only = "--int8-only" in sys.argv
    only = narrow_only or jit_only or int8_only
    onnx_dir = sys.argv[sys.argv.index("--onnx") + 1] if "--onnx" in sys.argv and not only else None
    peers = sys.argv[sys.argv.index("--peers") + 1].split(",") if "--peers" in sys.argv else []
    if unknown := [p for p in peers if p != "torch"]:
        sys.exit(f"bench: unknown peer(s) {unknown}; known: torch (ONNX Runtime always runs)")
    builds = [("new", mithrilc, [])] + ([] if only else [("native", mithrilc, ["--cpu", "native"])] + ([("base", baseline, [])] if baseline else []))
    builds += [("onnx", mithrilc, [])] if onnx_dir else []
    builds += [("int8", mithrilc, ["--quantize", "int8"])] if not narrow_only and not jit_only else []
    narrow_types = ("f16", "bf16", "q8_0")
    manifest = json.load(open(f"{bench}/MANIFEST.json"))
    cases = []

    def fresh(out):
        """The case's directory, emptied: the demos of an earlier run left their outputs
        there, which compile refuses to overwrite (--force replaces only its own files)."""
        shutil.rmtree(out, ignore_errors=True)
        return out

    for name in models:
        for batch, info in sorted(manifest[name]["batches"].items(), key=lambda kv: int(kv[0])):
            if narrow_only and batch != "1":
                continue
            shape = ",".join(str(d) for d in info["input_shape"])
            narrow_builds = [(f"c {q}", mithrilc, ["--quantize", q]) for q in narrow_types] if batch == "1" and not jit_only else []
            for build, compiler, flags in builds + narrow_builds:
                out = fresh(f"{work}/{name}_b{batch}" + ("" if build == "new" else f"_{build.replace(' ', '_')}"))
                # The ONNX version carries its weights; the JSON version takes them from
                # the safetensors file.
                source = [f"{onnx_dir}/{name}.onnx"] if build == "onnx" else [f"{bench}/{name}.json", "--params", f"{bench}/{name}.safetensors"]
                subprocess.run([compiler, "compile"] + source + ["--target", "c", "--shape", f"input={shape}",
                                "--weights", "embed", "-o", out, "--force"] + flags,
                               check=True, stdout=subprocess.DEVNULL)
                cases.append((build, name, batch, info, out))
            if narrow_only or int8_only:
                continue
            cases.append(("jit", name, batch, info, None))
            if jit_only:
                continue
            for quantize in ("f32", "q8_0"):
                out = fresh(f"{work}/{name}_b{batch}_ggml_{quantize}")
                subprocess.run([mithrilc, "compile", f"{bench}/{name}.json", "--target", "ggml", "--shape", f"input={shape}",
                                "--params", f"{bench}/{name}.safetensors", "--quantize", quantize, "-o", out, "--force"],
                               check=True, stdout=subprocess.DEVNULL)
                cases.append((f"ggml {quantize}", name, batch, info, out))
            out = fresh(f"{work}/{name}_b{batch}_xla")
            subprocess.run([mithrilc, "compile", f"{bench}/{name}.json", "--target", "xla", "--shape", f"input={shape}",
                            "--params", f"{bench}/{name}.safetensors", "-o", out, "--force"],
                           check=True, stdout=subprocess.DEVNULL)
            cases.append(("xla", name, batch, info, out))
    ours, base, native, ort, ggml, xla, narrow, onnx, jit, first = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
    int8, ortq, errors = {}, {}, {}
    kernels = set()

    def keep(table, key, us):
        table[key] = min(us, table.get(key, us))

    # The LLVM tier where this mithrilc was built with it (--features llvm).
    targets = subprocess.run([mithrilc, "targets"], check=True, capture_output=True, text=True).stdout
    jit_tiers = ["jit"] + (["jit-llvm"] if "\njit-llvm\n" in "\n" + targets else [])

    def run_args(name, info):
        return [mithrilc, "run", f"{bench}/{name}.json", "--params", f"{bench}/{name}.safetensors", "--data", f"input={bench}/{info['input']}"]

    for round_ in range(rounds):
        for build, name, batch, info, out in cases:
            runs = repeat if info["flops"] < 5e9 else str(max(5, int(repeat) // 10))
            if build == "jit":
                for tier in jit_tiers:
                    for threads in (1, 2):
                        run = subprocess.run(run_args(name, info) + ["--target", tier, "--repeat", runs, "--threads", str(threads)],
                                             check=True, capture_output=True, text=True).stdout
                        keep(jit, (tier, name, batch, threads), float(re.search(r"median ([0-9.]+) us", run).group(1)))
                if batch != "1":
                    continue
                # From the model file to the first output, the whole process.
                for how, flags in (("jit", ["--target", "jit"]), ("c", ["--target", "c"]), ("interp", [])) + \
                        ((("c cold", ["--target", "c", "--no-cache"]),) if round_ == 0 and name == "mlp" else ()):
                    start = time.perf_counter()
                    subprocess.run(run_args(name, info) + flags, check=True, stdout=subprocess.DEVNULL)
                    keep(first, (how, name), (time.perf_counter() - start) * 1e6)
                continue
            if build == "xla":
                run = subprocess.run([os.environ["JAX_PYTHON"], f"{out}/run_hlo.py", "--input", f"input={bench}/{info['input']}",
                                      "--out", f"{out}/outputs", "--repeat", runs], check=True, capture_output=True, text=True).stdout
                keep(xla, (name, batch), float(re.search(r"median ([0-9.]+) us", run).group(1)))
                continue
            for threads in (1, 2):
                demo = subprocess.run([f"{out}/{name}_demo", "--input", f"input={bench}/{info['input']}", "--repeat", runs,
                                       "--threads", str(threads)], check=True, capture_output=True, text=True, cwd=out).stdout
                us = float(re.search(r"median ([0-9.]+) us", demo).group(1))
                if build.startswith("ggml"):
                    keep(ggml, (build, name, batch, threads), us)
                elif build.startswith("c "):
                    keep(narrow, (build[2:], name, threads), us)
                else:
                    keep({"new": ours, "native": native, "base": base, "onnx": onnx, "int8": int8}[build], (name, batch, threads), us)
                    if build == "new":
                        kernels.update(re.findall(r", (\w+) kernels", demo))
            if round_ == 0 and build in ("new", "int8"):
                errors[(build, name, batch)] = demo_error(out, name, bench, info)
        if narrow_only:
            continue
        peer = subprocess.run([sys.executable, f"{sys.path[0]}/ort_peer.py", bench, "--repeat", repeat, "--quantized", "--models", ",".join(models)],
                              check=True, capture_output=True, text=True).stdout
        for line in peer.splitlines():
            kind, name, batch, threads, us, err = line.split()
            keep(ort if kind == "ort" else ortq, (name, batch, int(threads)), float(us))
            errors[(kind, name, batch)] = float(err)
    # torch.compile's table columns are of the main table only.
    torch_c = run_torch_peer(bench, repeat, rounds, models) if "torch" in peers and not only else None
    if jit:
        print_jit(ours, ort, jit, first, rounds)
    if jit_only:
        return
    if int8:
        print_int8(ours, int8, ort, ortq, errors, manifest, peak, rounds)
    if int8_only:
        return
    if not narrow_only:
        print_table(ours, base, native, ort, ggml, xla, onnx, kernels, manifest, peak, rounds, baseline, torch_c)
    print_narrow(ours, narrow, narrow_types, work, rounds)


def run_torch_peer(bench, repeat, rounds, models):
    """torch.compile's runs by (name, batch, threads) as (us, mode tag, error), the
    faster mode's; {} with one line saying why when the peer cannot run. Its notes
    (torch's version, compile times, a case left out) are printed; Inductor's
    autotuning chatter is not."""
    python = sys.argv[sys.argv.index("--torch-python") + 1] if "--torch-python" in sys.argv else \
        os.path.join(os.path.dirname(sys.path[0]), "target", "bench-torch-venv", "bin", "python")
    modes = sys.argv[sys.argv.index("--torch-modes") + 1] if "--torch-modes" in sys.argv else "default"
    if not os.access(python, os.X_OK):
        print(f"torch peer left out: no {python} (bash benches/run.sh --peers torch installs it, or pass --torch-python)")
        return {}
    peer = subprocess.Popen([python, f"{sys.path[0]}/torch_peer.py", bench, "--repeat", repeat, "--rounds", str(rounds),
                             "--models", ",".join(models), "--modes", modes], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = peer.communicate()
    for line in err.splitlines():
        if line.startswith("torch_peer: "):
            print(line, flush=True)
    if peer.returncode != 0:
        last = (err.strip().splitlines() or [""])[-1]
        print(f"torch peer left out: torch_peer.py exited {peer.returncode}" +
              (" (its line above says why)" if last.startswith("torch_peer: ") else f": {last}"))
        return {}
    times = {}
    for line in out.splitlines():
        kind, name, batch, threads, us, error = line.split()
        key = (name, batch, int(threads))
        if key not in times or float(us) < times[key][0]:
            times[key] = (float(us), "ma" if kind == "torch-ma" else "", float(error))
    return times


def demo_error(out, name, bench, info):
    """The demo's output (one call, 1 thread) against the reference output: the largest
    difference as a fraction of the output's largest magnitude."""
    os.makedirs(f"{out}/check", exist_ok=True)
    subprocess.run([f"{out}/{name}_demo", "--input", f"input={bench}/{info['input']}", "--out", f"{out}/check"],
                   check=True, capture_output=True, cwd=out)
    got = np.load(next(f"{out}/check/{f}" for f in sorted(os.listdir(f"{out}/check")) if f.endswith(".npy")))
    want = np.load(f"{bench}/{info['output']}")
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def print_int8(ours, int8, ort, ortq, errors, manifest, peak, rounds):
    """Int8 products beside f32 and ORT's quantized models, each with its error."""
    print(f"{'case':<14} {'f32 1t/2t':>17} {'err':>8} {'int8 1t/2t':>17} {'err':>8} {'vs f32':>6} "
          f"{'ORT f32':>10} {'ORT int8 1t/2t':>17} {'err':>8} {'vs ORT int8':>11}" + (f" {'int8 GOP/s':>10} {'% peak':>6}" if peak else ""))
    int8_peak = next((p.get("int8") for p in peak.values() if p.get("int8")), None) if peak else None
    for (name, batch, threads), us in int8.items():
        if threads != 1:
            continue
        f1, f2 = ours[(name, batch, 1)], ours[(name, batch, 2)]
        i1, i2 = us, int8[(name, batch, 2)]
        o = min(ort[(name, batch, 1)], ort[(name, batch, 2)])
        q1, q2 = ortq[(name, batch, 1)], ortq[(name, batch, 2)]
        best = min(i1, i2)
        row = (f"{name + ' b' + batch:<14} {f'{f1:.1f}/{f2:.1f}us':>17} {errors[('new', name, batch)]:>8.1e} {f'{i1:.1f}/{i2:.1f}us':>17} "
               f"{errors[('int8', name, batch)]:>8.1e} {best / min(f1, f2):>6.2f} {o:>8.1f}us {f'{q1:.1f}/{q2:.1f}us':>17} "
               f"{errors[('ortq', name, batch)]:>8.1e} {best / min(q1, q2):>11.2f}")
        if int8_peak:
            ops = manifest[name]["batches"][batch]["flops"]
            threads = 1 if i1 <= i2 else 2
            gops = ops / best / 1e3
            row += f" {gops:>10.1f} {100 * gops / int8_peak[threads]:>5.0f}%"
        print(row)
    print(f"int8: --quantize int8 (int8 products); ORT int8: quantize_dynamic's model; median latency of one call, best of {rounds} rounds, "
          "1 and 2 threads; err: the largest difference from the reference output / its largest magnitude; vs f32, vs ORT int8: "
          "the faster int8 run / the faster other run" + ("; % peak: the whole model's operations (all of them, not only "
                                                          "the int8 products') against the measured int8 dot-product peak." if int8_peak else "."))


def print_jit(ours, ort, jit, first, rounds):
    """The JIT (each tier built) beside the C target and ORT, and the time to a first output."""
    print(f"{'case':<22} {'1t':>10} {'2t':>10} {'C 1t':>10} {'C 2t':>10} {'ORT':>10} {'/C':>6} {'/ORT':>6}")
    for (tier, name, batch, threads), us in jit.items():
        if threads != 1:
            continue
        j = min(us, jit[(tier, name, batch, 2)])
        c1, c2 = ours[(name, batch, 1)], ours[(name, batch, 2)]
        o = min(ort[(name, batch, 1)], ort[(name, batch, 2)])
        print(f"{name + ' b' + batch + ' ' + tier:<22} {us:>8.1f}us {jit[(tier, name, batch, 2)]:>8.1f}us {c1:>8.1f}us {c2:>8.1f}us {o:>8.1f}us {j / min(c1, c2):>6.2f} {j / o:>6.2f}")
    print(f"jit, jit-llvm: run --target jit (cranelift) or jit-llvm (LLVM, when built with --features llvm) --repeat: the median latency of one run "
          f"in this process, best of {rounds} rounds; C: the C target's demo; ORT: the faster of 1 and 2 threads; /C and /ORT: the faster JIT run / the faster other run.")
    print(f"{'first output':<14} {'jit':>10} {'c':>10} {'interp':>10} {'c no cache':>11}")
    for (how, name), us in first.items():
        if how != "jit":
            continue
        cold = first.get(("c cold", name))
        cold = f"{cold / 1e3:>9.0f}ms" if cold else f"{'':>11}"
        print(f"{name + ' b1':<14} {us / 1e3:>8.1f}ms {first[('c', name)] / 1e3:>8.1f}ms {first[('interp', name)] / 1e3:>8.1f}ms {cold}")
    print("first output: the whole `mithrilc run` process from the model file to its output (batch 1), best of the rounds; "
          "c: with the runtime's objects in the build cache; c no cache: --no-cache, a first build (mlp, once).")


def print_narrow(ours, narrow, types, work, rounds):
    """The C target at batch 1 with f32 weights and each --quantize type side by side."""
    head = f"{'case':<14} {'f32 1t/2t':>17} {'weights':>9}"
    for q in types:
        head += f" {q + ' 1t/2t':>17} {'vs f32':>6} {'weights':>9}"
    print(head)
    for (name, batch, threads), us in ours.items():
        if batch != "1" or threads != 1:
            continue
        f1, f2 = us, ours[(name, batch, 2)]
        mb = lambda out: os.path.getsize(f"{out}/weights.bin") / 1e6
        row = f"{name + ' b1':<14} {f'{f1:.1f}/{f2:.1f}us':>17} {mb(f'{work}/{name}_b1'):>7.2f}MB"
        for q in types:
            q1, q2 = narrow[(q, name, 1)], narrow[(q, name, 2)]
            row += f" {f'{q1:.1f}/{q2:.1f}us':>17} {min(q1, q2) / min(f1, f2):>6.2f} {mb(f'{work}/{name}_b1_c_{q}'):>7.2f}MB"
        print(row)
    print(f"narrow weights: the C target with --quantize TYPE (median latency of one call, best of {rounds} rounds, 1 and 2 threads); "
          "vs f32 = the faster narrow run / the faster f32 run; weights = weights.bin.")


def print_table(ours, base, native, ort, ggml, xla, onnx, kernels, manifest, peak, rounds, baseline, torch_c):
    """The main table: every case against ONNX Runtime, ggml, XLA and the native build
    (and torch.compile, with --peers torch), and below each the same model compiled
    from ONNX, when timed."""
    extra = f" {'base 1t':>10} {'base 2t':>10} {'vs base':>8}" if baseline else ""
    extra += f" {'ggml f32 1t/2t':>17} {'ratio':>6} {'ggml q8_0 1t/2t':>17} {'ratio':>6} {'XLA':>10} {'ratio':>6}"
    extra += f" {'native':>10} {'portable/native':>15}"
    # None: not asked for; {} when it could not run (a line said why)
    peered = torch_c is not None
    if peered:
        extra += f" {'torch 1t/2t':>22} {'err':>8} {'vs torch':>8}"
    # the peak of the instructions the models ran (MR_ISA=avx2 on an AVX-512 CPU), else
    # the best measured
    peak_isa = next((isa for isa in kernels if len(kernels) == 1 and isa in peak), next(iter(peak), None))
    peak = peak.get(peak_isa, {})
    if peak:
        extra += f" {'GFLOP/s':>8} {'% peak':>7} {'floor':>6}"
    print(f"{'case':<14} {'mithrilc 1t':>12} {'mithrilc 2t':>12} {'ORT 1t':>10} {'ORT 2t':>10} {'ratio':>7}{extra}")
    for (name, batch, threads), us in ours.items():
        if threads != 1:
            continue
        m2 = ours[(name, batch, 2)]
        o1, o2 = ort[(name, batch, 1)], ort[(name, batch, 2)]
        ratio = min(us, m2) / min(o1, o2)
        row = f"{name + ' b' + batch:<14} {us:>10.1f}us {m2:>10.1f}us {o1:>8.1f}us {o2:>8.1f}us {ratio:>7.2f}"
        if baseline:
            b1, b2 = base[(name, batch, 1)], base[(name, batch, 2)]
            row += f" {b1:>8.1f}us {b2:>8.1f}us {min(us, m2) / min(b1, b2):>8.2f}"
        for quantize in ("f32", "q8_0"):
            g1, g2 = (ggml[(f"ggml {quantize}", name, batch, t)] for t in (1, 2))
            row += f" {f'{g1:.1f}/{g2:.1f}us':>17} {min(g1, g2) / min(o1, o2):>6.2f}"
        x = xla[(name, batch)]
        row += f" {x:>8.1f}us {x / min(o1, o2):>6.2f}"
        n = min(native[(name, batch, 1)], native[(name, batch, 2)])
        row += f" {n:>8.1f}us {min(us, m2) / n:>15.2f}"
        if peered:
            t1, t2 = torch_c.get((name, batch, 1)), torch_c.get((name, batch, 2))
            if t1 or t2:
                t, tag, err = min(t for t in (t1, t2) if t)
                cell = "/".join(f"{t[0]:.1f}" if t else "-" for t in (t1, t2)) + "us" + (f" {tag}" if tag else "")
                row += f" {cell:>22} {err:>8.1e} {min(us, m2) / t:>8.2f}"
            else:
                row += f" {'-':>22} {'-':>8} {'-':>8}"
        if peak:
            flops = manifest[name]["batches"][batch]["flops"]
            best, threads = min((us, 1), (m2, 2))
            gflops = flops / best / 1e3
            floor = flops / peak[2] / 1e3 / min(o1, o2)
            row += f" {gflops:>8.1f} {100 * gflops / peak[threads]:>6.0f}% {floor:>6.2f}"
        print(row)
        if (name, batch, 1) in onnx:
            n1, n2 = onnx[(name, batch, 1)], onnx[(name, batch, 2)]
            print(f"{name + ' b' + batch + ' onnx':<14} {n1:>10.1f}us {n2:>10.1f}us {o1:>8.1f}us {o2:>8.1f}us {min(n1, n2) / min(o1, o2):>7.2f}"
                  f"  onnx/json {min(n1, n2) / min(us, m2):.3f}")
    print(f"ratio = the faster mithrilc run / the faster ORT run; median latency of one call, the best of {rounds} rounds in this run.")
    print(f"mithrilc's runtime ran its {', '.join(sorted(kernels))} kernels; native = the same models built with --cpu native.")
    if baseline:
        print(f"vs base = the faster run of this build / the faster run of {baseline}, same rounds.")
    print("ggml f32 / q8_0: --target ggml with f32 weights / --quantize q8_0, 1 and 2 threads; ratio = the faster / the faster ORT run.")
    print("XLA: --target xla through PJRT's CPU client (every core), one call with the inputs already on the device; ratio to the faster ORT run.")
    if peak:
        print(f"% peak: the faster mithrilc run's GFLOP/s against the measured FMA peak for its threads ({peak[1]:.0f} / {peak[2]:.0f} GFLOP/s, {peak_isa}); "
              "floor: the ratio to ORT of a run at the 2-thread peak.")
    if onnx:
        print("NAME bB onnx: the same model compiled from the ONNX file onnx_export.py writes (its own weights), the same rounds; "
              "onnx/json = its faster run / the JSON version's faster run.")
    if peered:
        print(f"torch: torch.compile with Inductor's freezing (f32, no_grad, fixed shapes), 1 and 2 threads, each compiled for its "
              f"thread count; ma = mode=\"max-autotune\" was the faster; err: the largest difference from the reference output / its "
              f"largest magnitude; vs torch = the faster mithrilc run / the faster torch run; - = not timed (a torch_peer line before the tables says why).")
    print("mithrilc 2t: the demo's pthreads pool through <name>_forward_threaded (loop kernels, GEMMs and batched convolutions split).")


def read_peak(path):
    """The FMA peaks in GFLOP/s by instruction set and thread count, from peak's summary
    lines (isa=avx512 fma_gflops_1t=...), the first line's set (the best) first; each
    with "int8", the int8 dot-product peaks in GOP/s by thread count, where it has them."""
    peaks = {}
    for line in open(path).read().splitlines():
        if line.startswith("isa="):
            p = {int(t): float(v) for t, v in re.findall(r"fma_gflops_(\d+)t=([0-9.]+)", line)}
            p["int8"] = {int(t): float(v) for t, v in re.findall(r"int8_gops_(\d+)t=([0-9.]+)", line)}
            peaks[line.split()[0][4:]] = p
    return peaks


if __name__ == "__main__":
    main()
