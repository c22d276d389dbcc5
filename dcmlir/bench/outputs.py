"""``dcmlir bench``'s outputs: the markdown table, and the result saved and loaded as JSON.

``write_outputs`` writes every file of one run (with the plots of
:mod:`dcmlir.bench.plots` when matplotlib is installed); ``load_result``
reads the JSON back so a table or plot can be redrawn without measuring.
"""

from __future__ import annotations

import json
from pathlib import Path

from dcmlir.bench.baselines import shape_label
from dcmlir.bench.plots import plot
from dcmlir.bench.results import BASELINE, BenchResult
from dcmlir.files import write_atomic

__all__ = ["load_result", "markdown", "write_outputs"]

WEIGHT_NOTES = {
    "constant": "operand 1 one fixed array, a module constant; only the activation is an input",
    "argument": "both operands are inputs, rotated over the input sets",
}


def markdown(result: BenchResult) -> list[str]:
    """The per-shape table (us, speedup over IREE's default in brackets) and the geomeans."""
    names = result.measured_baselines()
    lines = [
        f"`{result.name}`: {result.workload}; {result.target}; device `{result.device}`"
        f" ({result.threads} thread{'s' if result.threads != 1 else ''});"
        f" weights `{result.weights}` ({WEIGHT_NOTES.get(result.weights, '')}).",
        "",
        "| shape | " + " | ".join(names) + " | dcmlir kernel |",
        "|---:|" + "---:|" * len(names) + "---|",
    ]
    for shape in result.shapes:
        cells = []
        for name in names:
            cell = result.cell(shape, name)
            if cell is None:
                cells.append("–")
            elif cell.error:
                cells.append("failed")
            elif name == BASELINE:
                cells.append(f"{cell.median_us:.1f}")
            else:
                cells.append(f"{cell.median_us:.1f} ({cell.speedup:.2f}x)")
        dcmlir = result.cell(shape, "dcmlir")
        lines.append(
            f"| {shape_label(shape)} | "
            + " | ".join(cells)
            + f" | {dcmlir.kernel if dcmlir else ''} |"
        )
    lines.append(
        "| **geomean speedup** | "
        + " | ".join(f"**{result.geomean_speedup(n):.2f}x**" for n in names)
        + " | |"
    )
    if "oracle" in names and "dcmlir" in names:
        lines += [
            "",
            f"dcmlir reaches {1 / result.geomean_ratio('dcmlir', 'oracle'):.3f} of the per-shape"
            " oracle (geomean of oracle time / dcmlir time over the shapes).",
        ]
    for baseline, reason in result.unavailable.items():
        lines += ["", f"`{baseline}` not measured: {reason}."]
    for error in result.errors():
        lines += ["", f"failed: {error}"]
    return lines


def write_outputs(result: BenchResult, directory: str | Path) -> dict[str, Path]:
    """``NAME.json`` (every number), ``NAME.md`` (the table), ``NAME.png`` (the plots)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / f"{result.name}.json", "md": out / f"{result.name}.md"}
    write_atomic(files["json"], json.dumps(result.to_json(), indent=1) + "\n")
    write_atomic(files["md"], "\n".join(markdown(result)) + "\n")
    png = out / f"{result.name}.png"
    if plot(result, png):
        files["png"] = png
    return files


def load_result(path: str | Path) -> BenchResult:
    """A result written by :func:`write_outputs` (``NAME.json``)."""
    return BenchResult.from_json(json.loads(Path(path).read_text()))
