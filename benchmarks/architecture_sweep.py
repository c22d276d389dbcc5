"""Held-out architectures, small, the way a user brings them: import, tune, run beside every peer.

Twelve ``transformers`` architectures no dcmlir code was written or tuned for, each two
layers at hidden 256 (OPT, BLOOM, Phi, Falcon, GPT-J, Mistral, Gemma, a T5 encoder,
RoBERTa, DistilBERT, MPT, StableLM), seeded random weights, token ids ``[1, T]``. Each one
goes through the commands a user runs, in its own processes::

    dcmlir import-torch --model architecture_sweep:NAME -o MODEL.mlir
    dcmlir tune MODEL.mlir --budget B --no-placement --db RECORDS -o PLAN
    dcmlir run-model MODEL.mlir --plan PLAN --seq ... --json NEW.json

so a crash anywhere (import, a pass, the guard, a peer) is a row that says where. With
``--baseline DIR`` (a checkout of another dcmlir commit) the same plan is compiled by that
checkout's ``dcmlir compile`` and run through ``run-model --vmfb`` beside IREE's builds: the
compile path compared on the same plan. Timing is one thread (``local-sync``), each
build interleaved with IREE's default and data-tiling builds in its ``run-model``.

Reproduce (docs/benchmarks.md, "Twelve small architectures"; 3-4 min per architecture)::

    python benchmarks/architecture_sweep.py --budget 20 --results /tmp/sweep \\
        --baseline /tmp/old-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers  # type: ignore[import-untyped]

HERE = Path(__file__).resolve().parent
VOCAB = 2000
SEQ = "1,2,3,4,5,8,9,13,17,32,64,128"
_WIDE = {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": VOCAB}


class Output(torch.nn.Module):
    """``input_ids [1, T]`` -> the model output's ``field`` (logits or the last hidden state)."""

    def __init__(self, inner: torch.nn.Module, field: str) -> None:
        super().__init__()
        self.inner, self.field = inner, field

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        extra = {"use_cache": False} if self.field == "logits" else {}
        return getattr(self.inner(input_ids=input_ids, **extra), self.field)


def _made(model: torch.nn.Module, field: str = "logits") -> tuple[Any, ...]:
    ids = torch.zeros((1, 9), dtype=torch.int64)
    return Output(model.eval(), field).eval(), (ids,), [{1: "seq"}]


def opt() -> tuple[Any, ...]:
    config = transformers.OPTConfig(
        hidden_size=256, num_attention_heads=4, num_hidden_layers=2, ffn_dim=1024,
        vocab_size=VOCAB, word_embed_proj_dim=256, max_position_embeddings=512,
    )  # fmt: skip
    return _made(transformers.OPTForCausalLM(config))


def bloom() -> tuple[Any, ...]:
    config = transformers.BloomConfig(hidden_size=256, n_head=4, n_layer=2, vocab_size=VOCAB)
    return _made(transformers.BloomForCausalLM(config))


def phi() -> tuple[Any, ...]:
    config = transformers.PhiConfig(
        **_WIDE, intermediate_size=1024, partial_rotary_factor=0.5, max_position_embeddings=512
    )
    return _made(transformers.PhiForCausalLM(config))


def falcon() -> tuple[Any, ...]:
    config = transformers.FalconConfig(
        **_WIDE, new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False
    )
    return _made(transformers.FalconForCausalLM(config))


def gptj() -> tuple[Any, ...]:
    config = transformers.GPTJConfig(
        n_embd=256, n_head=4, n_layer=2, vocab_size=VOCAB, rotary_dim=32, n_positions=512
    )
    return _made(transformers.GPTJForCausalLM(config))


def mistral() -> tuple[Any, ...]:
    config = transformers.MistralConfig(
        **_WIDE, intermediate_size=688, num_key_value_heads=2, sliding_window=64,
        max_position_embeddings=512,
    )  # fmt: skip
    return _made(transformers.MistralForCausalLM(config))


def gemma() -> tuple[Any, ...]:
    config = transformers.GemmaConfig(
        **_WIDE, intermediate_size=768, num_key_value_heads=1, head_dim=64,
        max_position_embeddings=512,
    )  # fmt: skip
    return _made(transformers.GemmaForCausalLM(config))


def t5_encoder() -> tuple[Any, ...]:
    config = transformers.T5Config(
        d_model=256, d_kv=64, d_ff=1024, num_layers=2, num_heads=4, vocab_size=VOCAB
    )
    return _made(transformers.T5EncoderModel(config), "last_hidden_state")


def roberta() -> tuple[Any, ...]:
    config = transformers.RobertaConfig(
        **_WIDE, intermediate_size=1024, max_position_embeddings=514
    )
    model = transformers.RobertaModel(config, add_pooling_layer=False)
    return _made(model, "last_hidden_state")


def distilbert() -> tuple[Any, ...]:
    config = transformers.DistilBertConfig(
        dim=256, n_heads=4, n_layers=2, hidden_dim=1024, vocab_size=VOCAB
    )
    return _made(transformers.DistilBertModel(config), "last_hidden_state")


def mpt() -> tuple[Any, ...]:
    config = transformers.MptConfig(
        d_model=256, n_heads=4, n_layers=2, vocab_size=VOCAB, max_seq_len=512
    )
    return _made(transformers.MptForCausalLM(config))


def stablelm() -> tuple[Any, ...]:
    config = transformers.StableLmConfig(
        **_WIDE, intermediate_size=688, num_key_value_heads=4, partial_rotary_factor=0.25,
        max_position_embeddings=512,
    )  # fmt: skip
    return _made(transformers.StableLmForCausalLM(config))


ARCHITECTURES = (
    "opt", "bloom", "phi", "falcon", "gptj", "mistral", "gemma", "t5_encoder", "roberta",
    "distilbert", "mpt", "stablelm",
)  # fmt: skip


def _run(command: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> bool:
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    return done.returncode == 0


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text().replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def sweep_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Import, tune, run one architecture (and the baseline's compile of its plan)."""
    out = args.results / name
    out.mkdir(parents=True, exist_ok=True)
    model, plan = out / "model.mlir", out / "plan.json"
    dcmlir = [sys.executable, "-m", "dcmlir.tools.cli"]
    found: dict[str, Any] = {"architecture": name}
    steps = [
        ("import", [*dcmlir, "import-torch", "--model", f"architecture_sweep:{name}", "-o",
                    str(model)], HERE),
        ("tune", [*dcmlir, "tune", str(model), "--budget", str(args.budget), "--no-placement",
                  "--db", str(out / "records.jsonl"), "-o", str(plan)], out),
        ("run", [*dcmlir, "run-model", str(model), "--plan", str(plan), "--seq", args.seq,
                 "--json", str(out / "run.json")], out),
    ]  # fmt: skip
    for step, command, cwd in steps:
        if not _run(command, out / f"{step}.log", cwd):
            found["failed"] = f"{step}: {_last_line(out / f'{step}.log')}"
            return found
    found["run"] = json.loads((out / "run.json").read_text())
    found["split"] = [
        line.strip()
        for line in (out / "run.log").read_text().splitlines()
        if "entry split" in line or "entry not split" in line
    ]
    if args.baseline is None:
        return found
    env = {**os.environ, "PYTHONPATH": str(args.baseline)}
    old = out / "baseline.vmfb"
    compiled = [*dcmlir, "compile", str(model), "--plan", str(plan), "-o", str(old)]
    if not _run(compiled, out / "baseline_compile.log", Path("/"), env):
        found["baseline_failed"] = _last_line(out / "baseline_compile.log")
        return found
    timed = [*dcmlir, "run-model", str(model), "--plan", str(plan), "--vmfb", str(old),
             "--seq", args.seq, "--peers", "data-tiling", "--json",
             str(out / "baseline.json")]  # fmt: skip
    if _run(timed, out / "baseline_run.log", out):
        found["baseline"] = json.loads((out / "baseline.json").read_text())
    return found


def _ratios(run: dict[str, Any], column: str) -> list[float]:
    return [row["vs_best_iree"][column] for row in run["rows"] if column in row["vs_best_iree"]]


def _geomean(values: list[float]) -> float:
    return statistics.geometric_mean(values) if values else 0.0


def _cell(run: dict[str, Any]) -> str:
    """dcmlir's time over the faster IREE build: geomean over T (the worst T)."""
    pairs = [(row["vs_best_iree"]["dcmlir"], row["t"]) for row in run["rows"]]
    worst = max(pairs, default=(0.0, 0))
    return f"{_geomean([r for r, _ in pairs]):.2f} ({worst[0]:.2f} at T={worst[1]})"


def table(found: list[dict[str, Any]]) -> str:
    """Markdown: time over the faster IREE build, geomean over T and the worst T."""
    head = (
        "| architecture | dcmlir (worst T) | baseline's compile of the plan (worst T) | "
        "IREE default | IREE data tiling | onnxruntime | torch eager |\n"
        "|---|---|---|---:|---:|---:|---:|\n"
    )
    rows = []
    for item in found:
        if "failed" in item:
            rows.append(f"| {item['architecture']} | failed: {item['failed']} | | | | | |")
            continue
        run = item["run"]
        baseline = item.get("baseline")
        old = _cell(baseline) if baseline else item.get("baseline_failed", "n/a")
        peers = [
            f"{_geomean(_ratios(run, c)):.2f}" if _ratios(run, c) else "n/a"
            for c in ("IREE default", "IREE data tiling", "onnxruntime", "torch eager")
        ]
        cells = [item["architecture"], _cell(run), old, *peers]
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def plot(found: list[dict[str, Any]], path: Path) -> None:
    """dcmlir's time over the faster IREE build against T, per architecture: this commit's
    compile and (dashed) the baseline's, on the same plans."""
    import matplotlib  # the bench extra; only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5))
    for index, item in enumerate(i for i in found if "run" in i):
        color = plt.get_cmap("tab20")(index % 20)
        for key, style in (("run", "-"), ("baseline", "--")):
            if key in item:
                rows = item[key]["rows"]
                ts = [row["t"] for row in rows]
                ratios = [row["vs_best_iree"]["dcmlir"] for row in rows]
                label = item["architecture"] if key == "run" else None
                axes.plot(ts, ratios, style, color=color, label=label, marker=".")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("T (sequence length)")
    axes.set_ylabel("dcmlir time / faster IREE build")
    axes.set_title("held-out architectures: this compile (solid), the baseline's (dashed)")
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="a folder per architecture")
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--seq", default=SEQ, help=f"run-model's T (default: {SEQ})")
    parser.add_argument("--only", default=",".join(ARCHITECTURES), help="comma-separated")
    parser.add_argument("--baseline", type=Path, help="another dcmlir checkout: its compile")
    args = parser.parse_args()
    found = []
    for name in args.only.split(","):
        if name not in ARCHITECTURES:
            parser.error(f"unknown architecture '{name}' (one of {', '.join(ARCHITECTURES)})")
        started = time.perf_counter()
        found.append(sweep_one(name, args))
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    (args.results / "sweep.json").write_text(json.dumps(found, indent=1) + "\n")
    text = table(found)
    (args.results / "sweep.md").write_text(text)
    plot(found, args.results / "sweep.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
