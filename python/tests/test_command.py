"""The wheel's `mithrilc` command and `python -m mithrilc` are the command line."""

import shutil
import subprocess
import sys

from conftest import ROOT


def test_the_command_runs(tmp_path):
    exe = shutil.which("mithrilc", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "the wheel installs a mithrilc command beside python"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("mithrilc ")
    run = subprocess.run([exe, "run", str(ROOT / "examples/mlp/mlp.json"), "--data", str(ROOT / "examples/mlp/data.npz"), "--params", str(ROOT / "examples/mlp/data.npz"), "--target", "jit", "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    bad = subprocess.run([sys.executable, "-m", "mithrilc", "compile", str(ROOT / "nope.json"), "--target", "c", "-o", str(tmp_path / "o")], capture_output=True, text=True)
    assert bad.returncode == 1 and "nope.json" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "mithrilc", "frobnicate"], capture_output=True, text=True)
    assert usage.returncode == 2
