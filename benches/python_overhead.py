"""Per-call overhead from Python (not a test: it prints times and a ratio).

What a call costs beyond the model's run, on the bench MLP at batch 1, for mithrilc
(`Model.__call__`) and ONNX Runtime (`InferenceSession.run`) in the same process and
the same rounds, both on one thread:

  mithrilc: call - run, the run being Jit::run_arrays as `mithrilc run --repeat`
            times it (in this process, through the wheel's command);
  ORT:      call - run on a session with ORT's profiler on, the run being the
            profiler's "model_run" events (InferenceSession::Run inside the binding);
            the profiler's own per-node cost falls inside the run, not the overhead.
            The call of a session without the profiler is printed beside it.

Each figure is the median of single calls (perf_counter_ns around each), rounds
interleaved, the best round kept. Both outputs are checked against the reference first.

Usage: python python_overhead.py BENCH_DIR ONNX_DIR [--rounds R] [--calls N]
(benches/python_overhead.sh installs the wheel and the peer and runs it).
"""

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

import mithrilc


def per_call(fn, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return re.search(r"Model name:\s*(.+)", out).group(1).strip()
    except Exception:
        return platform.processor() or "unknown"


def main():
    args = sys.argv[1:]
    bench, onnx_dir = args[0], args[1]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
    calls = int(args[args.index("--calls") + 1]) if "--calls" in args else 2000
    x = np.load(os.path.join(bench, "mlp_b1_input.npy"))
    want = np.load(os.path.join(bench, "mlp_b1_output.npy"))

    model = mithrilc.load(os.path.join(bench, "mlp.json"), params=os.path.join(bench, "mlp.safetensors"), shapes={"input": x.shape}, threads=1)
    np.testing.assert_allclose(model(x)["output"], want, rtol=1e-4, atol=1e-4)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    onnx = os.path.join(onnx_dir, "mlp.onnx")
    sess = ort.InferenceSession(onnx, opts, providers=["CPUExecutionProvider"])
    feed = {"input": x}
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-4, atol=1e-4)

    # The runs alone.
    argv = ["mithrilc", "run", os.path.join(bench, "mlp.json"), "--data", "input=" + os.path.join(bench, "mlp_b1_input.npy"), "--params", os.path.join(bench, "mlp.safetensors"), "--target", "jit", "--threads", "1", "--repeat", str(calls)]
    prof = ort.SessionOptions()
    prof.intra_op_num_threads = 1
    prof.inter_op_num_threads = 1
    prof.enable_profiling = True
    prof.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    psess = ort.InferenceSession(onnx, prof, providers=["CPUExecutionProvider"])

    best = {"mithrilc call": [], "mithrilc run": [], "ort call": [], "ort profiled call": []}
    for _ in range(rounds):
        best["mithrilc call"].append(per_call(lambda: model(x), calls))
        printed = mithrilc._mithrilc.command(argv)
        best["mithrilc run"].append(float(re.search(r"median ([0-9.]+) us per run", printed).group(1)))
        best["ort call"].append(per_call(lambda: sess.run(None, feed), calls))
        best["ort profiled call"].append(per_call(lambda: psess.run(None, feed), calls))
    events = json.load(open(psess.end_profiling()))
    runs = [e["dur"] for e in events if e.get("name") == "model_run"]
    b = {k: min(v) for k, v in best.items()}
    b["ort run"] = statistics.median(runs)
    ours = b["mithrilc call"] - b["mithrilc run"]
    theirs = b["ort profiled call"] - b["ort run"]
    print(f"cpu: {cpu_model()}; python {platform.python_version()}; numpy {np.__version__}; onnxruntime {ort.__version__}; mithrilc {mithrilc.__version__}")
    print(f"bench mlp, batch 1, 1 thread; medians of {calls} calls, best of {rounds} rounds (us)")
    print(f"{'':10} {'call':>8} {'run':>8} {'overhead':>9}")
    print(f"{'mithrilc':10} {b['mithrilc call']:8.2f} {b['mithrilc run']:8.2f} {ours:9.2f}")
    print(f"{'ORT':10} {b['ort profiled call']:8.2f} {b['ort run']:8.2f} {theirs:9.2f}   (profiled; without the profiler a call takes {b['ort call']:.2f})")
    print(f"overhead ratio mithrilc/ORT: {ours / theirs:.2f} (goal: at most 1)")


if __name__ == "__main__":
    main()
