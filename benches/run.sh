#!/usr/bin/env bash
# The C target's benchmark against ONNX Runtime (not a test: it prints latencies and
# ratios). Installs the peer (onnxruntime, onnx, numpy, safetensors from PyPI, pinned)
# into target/bench-venv once, builds mithrilc, then runs benches/bench.py.
#   bash benches/run.sh [--repeat N] [--rounds R] [--baseline OTHER_MITHRILC]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy, safetensors" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6 safetensors==0.8.0
fi
cargo build --release -q
mkdir -p target/bench
"$venv/bin/python" benches/bench.py "$PWD/target/release/mithrilc" "$PWD/../shared/bench" "$PWD/target/bench" "$@"
