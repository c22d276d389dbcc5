"""The house rules: role packages layered in data-flow order, names that do not collide.

``lint-imports`` checks the contracts in pyproject.toml ([tool.importlinter]): every
role package in layer order, no cycles between the modules of one package. The
other rules are about names and sizes a newcomer trips over.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = [ROOT / "dcmlir", ROOT / "passes", ROOT / "tools"]
MAX_LINES = 500
SUFFIXES = {"s", "es", "r", "er", "or", "ner", "ing", "ed", "d", "ion", "_base", "_lib", "_util"}
# A module over MAX_LINES must be one cohesive class or table; each one is named here with why.
LONG_MODULES: dict[str, str] = {}


def library_modules() -> list[Path]:
    found = []
    for folder in LIBRARY:
        for path in folder.rglob("*.py"):
            if path.is_relative_to(ROOT / "dcmlir" / "passes"):
                continue  # the link to passes/ (see docs/architecture.md)
            if path.is_relative_to(ROOT / "dcmlir" / "tools"):
                continue
            found.append(path)
    return sorted(found)


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KEPT" in result.stdout and "BROKEN" not in result.stdout, result.stdout


def test_contracts_name_every_role_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {
        f"dcmlir.{path.name}"
        for path in (ROOT / "dcmlir").iterdir()
        if (path / "__init__.py").exists() and path.name not in ("examples",)
    }
    modules = {
        f"dcmlir.{path.stem}"
        for path in (ROOT / "dcmlir").glob("*.py")
        if path.name != "__init__.py"
    }
    assert packages | modules <= named, f"not in any layer: {sorted((packages | modules) - named)}"


def test_no_two_modules_a_suffix_apart() -> None:
    """``build``/``builder``, ``measure``/``measurer``: one name must not be another plus a bit."""
    names = {path.stem for path in library_modules()} - {"__init__", "__main__"}
    names |= {path.parent.name for path in library_modules() if path.name == "__init__.py"}
    clashes = [
        (a, b)
        for a, b in itertools.permutations(sorted(names), 2)
        if b.startswith(a) and b[len(a) :] in SUFFIXES
    ]
    assert not clashes, clashes


def test_library_modules_stay_small() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in library_modules()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    unexplained = {name: lines for name, lines in long.items() if name not in LONG_MODULES}
    assert not unexplained, unexplained


def test_library_does_not_cite_the_outside_brief() -> None:
    """The design is docs/design.md, inside the repository."""
    citing = [
        str(path.relative_to(ROOT)) for path in library_modules() if "DESIGN.md" in path.read_text()
    ]
    assert not citing, citing


# Imports that may wait inside a function, each with why.
LAZY_IMPORTS = {
    "torch": "optional extra",
    "transformers": "optional extra",
    "matplotlib": "optional extra (plots)",
    "sklearn": "0.8 s to import; only a fitted cost model needs it",
    "scipy.stats": "2 s to import; only the cost-model report's rank correlation needs it",
    "scipy.optimize": "0.5 s to import; only fitting the occupancy curve (several threads, a GPU) needs it",
    "dcmlir.models.torch_import": "imports torch, an optional extra",
    "dcmlir.models.torch_factory": "imports torch, an optional extra",
    "iree.compiler.extras": "the FX importer imports torch, an optional extra",
    "iree.compiler.tools.import_onnx": "IREE's ONNX importer imports onnx, an optional extra",
    "onnxruntime": "optional extra; importing it writes $TMPDIR/.ses, so only its peer does",
    "onnx": "optional extra (the onnxruntime peer's model)",
}
# Modules whose laziness is their point, each with why.
LAZY_MODULES = {
    "dcmlir/__init__.py": "dcmlir.tune/compile resolve on first use: `import dcmlir` loads no IREE",
    "passes/__init__.py": "the pass registry is lazy (as xDSL's): listing passes imports none",
}


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


def test_imports_sit_at_module_top() -> None:
    """Imports inside functions hide the layering; only optional heavy dependencies may wait."""
    hidden = []
    for path in library_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Import | ast.ImportFrom):
                    continue
                if str(path.relative_to(ROOT)) in LAZY_MODULES:
                    continue
                allowed = [
                    name
                    for name in _imported(inner)
                    if any(name == lazy or name.startswith(f"{lazy}.") for lazy in LAZY_IMPORTS)
                ]
                if len(allowed) < len(_imported(inner)):
                    hidden.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    assert not hidden, hidden


def test_the_commands_start_without_the_runtime_or_scipy_stats() -> None:
    """Every ``dcmlir-opt`` and ``dcmlir`` run imports its command first: ``iree.runtime``
    (0.9 s), ``scipy.stats`` (2 s) and ``scipy.optimize`` wait until something uses them
    (the 38 ``dcmlir-opt`` runs of the lit tests took 75 s with them, 34 s without)."""
    heavy = ("iree.runtime", "scipy.stats", "scipy.optimize", "sklearn", "torch")
    code = (
        "import sys, dcmlir.tools.dcmlir_opt, dcmlir.tools.cli\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", loaded
