"""Shared fixtures: where the repository and ../shared are, and how a test that lacks a
toolchain skips (or, in CI, where MITHRILC_REQUIRE_TOOLS=1, fails)."""

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


def need(what: str, present: bool) -> None:
    """Skips the test without `what`; fails it in CI (MITHRILC_REQUIRE_TOOLS=1)."""
    if present:
        return
    if os.environ.get("MITHRILC_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{what} is missing and MITHRILC_REQUIRE_TOOLS=1")
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="session")
def shared() -> Path:
    need("../shared (the test data beside the repository)", (SHARED / "testdata/manifest.json").exists())
    return SHARED


@pytest.fixture(scope="session")
def c_compiler() -> None:
    need("a C compiler (cc) and make", shutil.which(os.environ.get("CC", "cc")) is not None and shutil.which("make") is not None)
