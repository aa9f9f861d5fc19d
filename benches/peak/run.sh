#!/usr/bin/env bash
# This machine's FMA, int8 and bf16 dot-product and AMX tile peaks (1 thread and every
# core) and memory bandwidth, measured by benches/peak/peak.c (built with the system's cc,
# no -march flag: it picks AVX-512, AVX2+FMA or NEON, and VNNI, AVX-VNNI, BF16, AMX or the
# dot-product extension, at run time). Prints one line a figure and a last line of
# key=value pairs, which benches/bench.py reads to give GEMM speeds as a fraction of the
# peak.
#   bash benches/peak/run.sh [--threads N]... [--isa avx512|avx2|neon|scalar]
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p target/bench
"${CC:-cc}" -std=c11 -O2 -Wall -Wextra -Werror benches/peak/peak.c -o target/bench/peak -lpthread
lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | sed 's/^/cpu: /' || true
target/bench/peak "$@"
