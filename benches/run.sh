#!/usr/bin/env bash
# The CPU targets' benchmark against ONNX Runtime (not a test: it prints latencies and
# ratios): C (portable and --cpu native; at batch 1 also --quantize f16, bf16, q8_0 in a
# second table; every case also with --quantize int8 beside ORT's quantize_dynamic model,
# with each one's error, in an int8 table), ggml (f32 and q8_0) and XLA, after this
# machine's FMA peak and bandwidth (benches/peak) and the large GEMMs' share of it
# (runtime-c's bench-gemm). Installs the peer (onnxruntime, onnx, numpy,
# safetensors from PyPI, pinned) into target/bench-venv once, and the ggml and XLA
# targets' toolchains as .ci/run does where they are missing, builds mithrilc, writes
# the bench models as ONNX (benches/onnx_export.py, into target/bench/onnx), then runs
# benches/bench.py, which times them too (rows "NAME bB onnx", with onnx/json).
#   bash benches/run.sh [--repeat N] [--rounds R] [--baseline OTHER_MITHRILC] [--int8-only] [--peers torch]
# --peers torch adds torch.compile (Inductor with freezing, on the CPU) as a second peer
# (benches/torch_peer.py): it installs torch, pinned, into target/bench-torch-venv once,
# only when asked (PyPI's Linux wheel is the CUDA build: about 5 GB with its nvidia-*
# packages, and it runs on the CPU alike); --torch-python PYTHON takes a Python that has
# torch and numpy instead, and --torch-modes default,max-autotune times max-autotune too.
# Inductor builds its kernels with the machine's C++ compiler.
# MR_ISA=avx2 in the environment runs the portable builds' avx2 kernels on an AVX-512
# CPU (the nearest thing to an AVX2-only one), and their "% peak" is of the AVX2 peak.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy, safetensors" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6 safetensors==0.8.0
fi
# bench.py reads --peers and --torch-python itself; here they only say whether to install.
peers= torch_python=
prev=
for arg in "$@"; do
  case "$prev" in --peers) peers=$arg ;; --torch-python) torch_python=$arg ;; esac
  prev=$arg
done
if [[ ",$peers," == *,torch,* && -z "$torch_python" ]]; then
  tvenv=target/bench-torch-venv
  if [ ! -x "$tvenv/bin/python" ] || ! "$tvenv/bin/python" -c "import torch, numpy" 2>/dev/null; then
    # A failed install leaves the peer out (bench.py says why), not the whole run.
    python3 -m venv "$tvenv"
    "$tvenv/bin/pip" install -q torch==2.15.0 numpy==2.4.6 || echo "run.sh: torch did not install into $tvenv" >&2
  fi
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mithrilc"
if [ -z "${MITHRILC_GGML:-}" ] && ! ls "$cache"/ggml-0.20.2.post1/lib/python3*/site-packages/libggml/include/ggml.h >/dev/null 2>&1; then
  python3 -m venv "$cache/ggml-0.20.2.post1"
  "$cache/ggml-0.20.2.post1/bin/pip" install -q libggml-python==0.20.2.post1
fi
if [ -z "${MITHRILC_PYTHON:-}" ]; then
  if ! "$cache/jax-0.10.2/bin/python" -c 'import jax, jaxlib' 2>/dev/null; then
    python3 -m venv "$cache/jax-0.10.2"
    "$cache/jax-0.10.2/bin/pip" install -q jax==0.10.2 jaxlib==0.10.2
  fi
  MITHRILC_PYTHON="$cache/jax-0.10.2/bin/python"
fi
export JAX_PYTHON="$MITHRILC_PYTHON"
cargo build --release -q
mkdir -p target/bench
# The machine first: its CPU, FMA peak and bandwidth; bench.py gives each case's speed as a
# fraction of that peak, and the ratio to ORT a run at the peak would have.
bash benches/peak/run.sh --threads 1 --threads 2 | tee target/bench/peak.txt
# On an AVX-512 CPU, the peak with AVX2 instructions too: the avx2 kernels' share is of
# that peak (half the AVX-512 one on Intel cores with two 512-bit FMA units, the same on
# Zen 4), and MR_ISA=avx2 runs the models with them.
if grep -q '^isa=avx512' target/bench/peak.txt; then
  bash benches/peak/run.sh --threads 1 --threads 2 --isa avx2 | grep -v '^cpu: ' | tee -a target/bench/peak.txt
fi
# The large GEMMs alone (gpt_block's four, one thread) as a fraction of the peak, with
# each kernel set this CPU runs.
make -s -C runtime-c bench-gemm PEAK="$(sed -n 's/^isa=\([a-z0-9]*\) fma_gflops_1t=\([0-9.]*\).*/\2 \1/p' target/bench/peak.txt | tr '\n' ' ')"
"$venv/bin/python" benches/onnx_export.py "$PWD/../shared/bench" "$PWD/target/bench/onnx"
"$venv/bin/python" benches/bench.py "$PWD/target/release/mithrilc" "$PWD/../shared/bench" "$PWD/target/bench" --peak target/bench/peak.txt \
  --onnx "$PWD/target/bench/onnx" "$@"
