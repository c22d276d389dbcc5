"""The wheel ships passes/ and tools/ inside the dcmlir package, with both entry points."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contents(tmp_path: Path) -> None:
    # build from a copy: an in-tree build would leave build/ and *.egg-info behind
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("dcmlir", "passes", "tools"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "wheel"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "wheel").glob("dcmlir-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ROOT.joinpath("passes").glob("*.py"):
        assert f"dcmlir/passes/{path.name}" in names
    for path in ROOT.joinpath("tools").glob("*.py"):
        assert f"dcmlir/tools/{path.name}" in names
    assert "dcmlir/examples/bert_dense.mlir" in names
    assert not any(name.startswith(("passes/", "tools/", "tests/")) for name in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "dcmlir-opt = dcmlir.tools.dcmlir_opt:main" in text
    assert "dcmlir = dcmlir.tools.cli:main" in text
