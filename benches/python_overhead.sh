#!/usr/bin/env bash
# The Python package's per-call overhead against ONNX Runtime (not a test; prints a
# table): builds the wheel with maturin into target/python, installs it with the peer
# (onnxruntime, onnx, numpy, pinned as benches/run.sh pins them) into
# target/py-bench-venv, writes the bench MLP as ONNX, and runs python_overhead.py.
#   bash benches/python_overhead.sh [--rounds R] [--calls N]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/py-bench-venv
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy, safetensors, maturin" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6 safetensors==0.8.0 maturin==1.16.0
fi
rm -rf target/python/wheels
CARGO_TARGET_DIR=target/python "$venv/bin/maturin" build --release --quiet -m python/Cargo.toml -i "$venv/bin/python" -o target/python/wheels
"$venv/bin/pip" install -q --force-reinstall --no-deps target/python/wheels/mithrilc-*.whl
"$venv/bin/python" benches/onnx_export.py "$PWD/../shared/bench" "$PWD/target/bench/onnx" --models mlp
"$venv/bin/python" benches/python_overhead.py "$PWD/../shared/bench" "$PWD/target/bench/onnx" "$@"
