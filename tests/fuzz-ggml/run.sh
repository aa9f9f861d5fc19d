#!/usr/bin/env bash
# Fuzzes the ggml target's GGUF loader with libFuzzer under AddressSanitizer and UBSan
# (fuzz_gguf.c says what one run does), starting from the seeds in corpus/:
#
#   tests/fuzz-ggml/run.sh [SECONDS]     # default 60
#
# Needs clang (with libFuzzer), a built mithrilc ($MITHRILC_BIN, else
# target/release/mithrilc, else `cargo build --release` runs) and ggml where mithrilc finds it ($MITHRILC_GGML, or
# ~/.cache/mithrilc/ggml-0.20.2.post1). ggml's own libraries are the prebuilt ones, not
# instrumented: coverage guides the mutations through the generated loader only, and
# a fault inside ggml shows as a crash without its sanitizer report. New inputs go to
# target/fuzz-ggml/corpus (not the committed seeds); a crash is saved in
# target/fuzz-ggml/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
work="target/fuzz-ggml"
mkdir -p "$work/corpus"
if [ -n "${MITHRILC_GGML:-}" ]; then
  ggml="$MITHRILC_GGML"
else
  ggml="$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/mithrilc/ggml-0.20.2.post1/lib/python3*/site-packages/libggml | head -1)"
fi
lib="$ggml/lib64"
[ -e "$lib/libggml.so" ] || lib="$ggml/lib"
mithrilc="${MITHRILC_BIN:-target/release/mithrilc}"
[ -x "$mithrilc" ] || cargo build --release
# The library for examples/mlp, as mithrilc writes it.
rm -rf "$work/mlp"
"$mithrilc" compile examples/mlp/mlp.json --target ggml --params examples/mlp/data.npz --emit source -o "$work/mlp" >/dev/null
clang -g -O1 -std=c11 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$work/mlp" -I"$ggml/include" tests/fuzz-ggml/fuzz_gguf.c "$work/mlp/mlp.c" \
  -L"$lib" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$lib" -lm -o "$work/fuzz_gguf"
# The inputs are written to a file in memory where there is one (a disk under load
# stalled one open() past the timeout).
dir="$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)"
trap 'rm -rf "$dir"' EXIT
FUZZ_GGUF_DIR="$dir" "$work/fuzz_gguf" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -timeout=60 -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" tests/fuzz-ggml/corpus
