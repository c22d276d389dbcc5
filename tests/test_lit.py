"""Run every lit test file as one pytest case, so one command runs the whole suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LIT_DIR = Path(__file__).resolve().parent.parent / "lit_tests"
LIT_FILES = sorted(p for p in LIT_DIR.glob("*.mlir"))


def test_there_are_lit_tests() -> None:
    assert len(LIT_FILES) >= 3, f"expected one lit file per pass in {LIT_DIR}"


@pytest.mark.parametrize("path", LIT_FILES, ids=[p.name for p in LIT_FILES])
def test_lit(path: Path) -> None:
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    lit = shutil.which("lit", path=env["PATH"])
    assert lit is not None, "lit is not installed: pip install -e '.[dev]'"
    result = subprocess.run(
        [lit, "-v", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert "Passed" in result.stdout, result.stdout
