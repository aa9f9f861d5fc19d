#!/usr/bin/env bash
# The CUDA target's benchmark against torch eager and torch.compile (not a test: it
# prints latencies and ratios). Builds mithrilc, checks that this machine has what the
# measurement needs (an NVIDIA GPU with its driver, python with numpy and a CUDA build
# of torch), then runs benches/gpu_bench.py on ../shared/bench.
#   bash benches/gpu_run.sh [--repeat N] [--rounds R] [--warmup W] [--models mlp,cnn] [--gemm cublaslt] [--precision tf32] [--dry-run]
# PYTHON picks the interpreter (default python3). nvcc is found by mithrilc itself
# ($MITHRILC_NVCC, PATH, or the pinned pip wheels; it exits 3 naming the pip command
# when there is none). Nothing is installed here: the GPU machines this runs on have no
# network, so torch must already be there. With --dry-run the checks are skipped and
# the script only compiles the CUDA sources and prints its plan (no GPU, torch or nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dry=0
for arg in "$@"; do [ "$arg" = --dry-run ] && dry=1; done

cargo build --release -q

if [ "$dry" = 0 ]; then
  missing=()
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    missing+=("nvidia-smi (no NVIDIA driver on this machine)")
  elif ! nvidia-smi -L >/dev/null 2>&1; then
    missing+=("a GPU: nvidia-smi -L fails ($(nvidia-smi -L 2>&1 | head -1))")
  fi
  if ! "$python" -c "import numpy" >/dev/null 2>&1; then
    missing+=("numpy for $python")
  fi
  if ! "$python" -c "import torch" >/dev/null 2>&1; then
    missing+=("torch for $python (not installed here on purpose: install a CUDA build of torch, or set PYTHON)")
  elif ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    missing+=("a CUDA device visible to torch ($("$python" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"))")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu_run.sh: cannot measure here; missing:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    echo "gpu_run.sh: 'bash benches/gpu_run.sh --dry-run' checks the rest without them." >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
fi

mkdir -p target/gpu-bench
"$python" benches/gpu_bench.py "$PWD/target/release/mithrilc" "$PWD/../shared/bench" "$PWD/target/gpu-bench" "$@"
