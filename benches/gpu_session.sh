#!/usr/bin/env bash
# One GPU session's checks of the CUDA target, in order, each step timed and bounded
# (810 s at most, about nine minutes as measured steps go) so the whole fits in the
# ten minutes of a lent GPU (an H100 or H200, 16 cores):
#   1. build mithrilc and the test binary (release);
#   2. the kernel library's checks on the GPU (runtime-cuda: every tile, split-K, odd
#      sizes, the planner's choices), compiled for this GPU alone;
#   3. every conformance case and bench model built as `run --target cuda` builds them
#      and compared with the interpreter on the GPU (tests/cuda_target.rs, --ignored);
#   4. the launch report of gpt_block at batch 1 for this GPU's SM count, for the record;
#   5. benches/gpu_run.sh against torch.compile (reduce-overhead and max-autotune), if
#      torch is there, with --gemm cublaslt's builds beside the built-in kernels' where
#      cuBLASLt 13 is found (MR_CUBLASLT: set here to a pip wheel's libcublasLt.so.13,
#      e.g. a CUDA 13 torch's, when the loader would not find one itself);
#   6. --gemm cublaslt's cases on the GPU against the interpreter (tests/cuda_target.rs),
#      last, so that a short lease loses it first.
#   bash benches/gpu_session.sh [--dry-run]
# --dry-run, on a machine without a GPU: the same steps with the GPU runs replaced by
# their emulated or --dry-run forms (2: the checks under emulation; 3: skipped, as CI
# runs it under emulation; 5: gpu_run.sh --dry-run), so the script is known to work
# before device time is spent. A step that fails or overruns is reported and the
# session goes on; the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    *) echo "gpu_session.sh: unknown argument $arg (only --dry-run)" >&2; exit 2 ;;
  esac
done
failed=0
# step SECONDS NAME COMMAND...: runs COMMAND under a time limit, prints its time.
step() {
  local limit=$1 name=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  local start=$SECONDS
  if timeout "$limit" "$@"; then
    echo "== $name: ok in $((SECONDS - start)) s"
  else
    echo "== $name: FAILED (status $?) after $((SECONDS - start)) s"
    failed=$((failed + 1))
  fi
}

if [ "$dry" = 0 ]; then
  nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.max.sm --format=csv,noheader || { echo "no GPU here: use --dry-run" >&2; exit 2; }
  arch="sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')"
fi
lscpu | sed -n 's/^Model name: *//p'
if [ -z "${MR_CUBLASLT:-}" ]; then
  lt=$(python3 -c "import glob, site; m = [f for p in site.getsitepackages() + [site.getusersitepackages()] for f in sorted(glob.glob(p + '/nvidia/cu13/lib/libcublasLt.so.13'))]; print(m[-1] if m else '')" 2>/dev/null)
  [ -n "$lt" ] && export MR_CUBLASLT="$lt"
fi
echo "cuBLASLt: ${MR_CUBLASLT:-libcublasLt.so.13 as the loader finds it}"

step 180 "build" bash -c 'cargo build --release -q --bin mithrilc && cargo test --release -q --no-run --test suite'
if [ "$dry" = 0 ]; then
  step 120 "kernel checks on the GPU ($arch)" make -s -C runtime-cuda -f Makefile.kernels gpu-test ARCH="$arch"
  step 150 "every case on the GPU" cargo test --release -q --test suite cuda_target::every_model_matches_the_interpreter_on_the_gpu -- --ignored
else
  step 120 "kernel checks under emulation" make -s -C runtime-cuda -f Makefile.kernels test
fi
step 30 "launch report (gpt_block b1)" bash -c 'out=$(mktemp -d) && ./target/release/mithrilc compile ../shared/bench/gpt_block.json --shape input=1,128,768 --target cuda --emit source --report -o "$out/gpt" | sed -n "/^launches/,\$p"; rm -rf "$out"'
if [ "$dry" = 0 ]; then
  step 240 "benchmark against torch.compile" bash benches/gpu_run.sh --rounds 3 --gemm cublaslt
  step 90 "--gemm cublaslt on the GPU" cargo test --release -q --test suite cuda_target::cublaslt_products_match_the_interpreter_on_the_gpu -- --ignored
else
  step 120 "benchmark plan (dry run)" bash benches/gpu_run.sh --dry-run --gemm cublaslt
fi
echo "gpu_session.sh: $failed step(s) failed"
exit "$failed"
