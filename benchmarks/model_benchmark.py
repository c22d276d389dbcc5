"""Benchmark: whole models tuned by dcmlir against IREE (default, data tiling) and every peer.

For each model of ``--models`` (``gpt2-2l``, ``gpt2-12l``: GPT-2 from a transformers config
with seeded random weights, ``input_ids [1, T]``; ``llama-12l``: a Llama of the same width
(RoPE, SwiGLU, RMSNorm) the same way; ``bert-12l``: the generated BERT-base encoder,
``[T, 768]``; any ``gpt2-Nl`` / ``llama-Nl`` / ``bert-Nl``), T dynamic in 1..128:

1. make the module (import GPT-2 through torch.export, or generate the encoder; an
   existing module in ``--workdir`` with the same first line is reused);
2. ``dcmlir.tune`` it under ``--budget`` measurements (records in ``--db``: a rerun
   measures only what they lack; ``--reuse-plan`` skips tuning when the plan exists);
3. ``dcmlir.compile`` with the plan; IREE's default build of the same module;
4. time at every ``--seq`` T, side by side in one worker, interleaved per T, largest T
   first (``dcmlir run-model``'s loop): IREE default, IREE data tiling, dcmlir,
   onnxruntime, numpy (GPT-2 and the encoder; ``n/a`` for Llama) and torch eager, every
   output checked against the torch model in float64
   (max abs error <= 1e-4 of the output's scale).

Writes ``RESULTS/model_benchmark_<model>.json`` (every number), ``.md`` (ms per call, ratios
to the faster of IREE default and IREE data tiling, geomean rows) and ``.png`` (latency and
ratio against T), and, unless ``--no-docs``, the model-benchmark section of
docs/benchmarks.md from every ``model_benchmark_*.json`` in ``docs/results``.

    .venv/bin/pip install -e '.[torch,bench]'
    .venv/bin/python benchmarks/model_benchmark.py --models gpt2-2l,gpt2-12l,bert-12l --budget 600
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import model_report

import dcmlir
from dcmlir.bench.model_compare import ModelRun, run_model
from dcmlir.driver import compile_default
from dcmlir.ir.iree import ParameterFile, versions
from dcmlir.measure.timing import MeasureSettings
from dcmlir.models import BERT_BASE, generate_encoder, save_model
from dcmlir.models.bert import parameters_path_for
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
COMMAND = "python benchmarks/model_benchmark.py"
DEFAULT_SEQ = "1:8,13,16,17,24,31,32,48,64,65,77,96,100,112,120,127,128"
_MODEL = re.compile(r"^(gpt2|bert|llama)-(\d+)l$")


def say(line: str) -> None:
    """Progress on stderr, flushed: a long run shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def parse_seq(text: str) -> list[int]:
    found: list[int] = []
    for item in text.split(","):
        lo, _, hi = item.partition(":")
        found += range(int(lo), int(hi or lo) + 1)
    return sorted(set(found))


def commit() -> str:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return found or "unknown"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model of ``--models``: ``gpt2-2l`` is GPT-2 with 2 layers, ``llama-2l`` a Llama as
    wide (:data:`~dcmlir.models.hf_models.HF_DEFAULT_SIZES`), ``bert-12l`` the encoder."""

    kind: str
    layers: int
    factory: str = ""  # kind "factory": the package.module:factory import-torch --model takes

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        if ":" in text:  # the user's factory (benchmarks/factory_models.py holds two)
            return cls("factory", 0, text.strip())
        match = _MODEL.match(text.strip())
        if match is None:
            raise SystemExit(
                f"--models: '{text}' is not gpt2-Nl, llama-Nl, bert-Nl (e.g. gpt2-12l) or "
                "package.module:factory"
            )
        return cls(match.group(1), int(match.group(2)))

    @property
    def name(self) -> str:
        """As ``--models`` names it."""
        return self.factory or f"{self.kind}-{self.layers}l"

    @property
    def slug(self) -> str:
        if self.factory:
            return self.factory.rpartition(":")[2]
        return f"{self.kind}_{self.layers}l"

    @property
    def stem(self) -> str:
        """Records and plan file stem; the encoder's as earlier runs named them (reused)."""
        return f"model_{self.layers}l" if self.kind == "bert" else f"model_{self.slug}"


@dataclasses.dataclass
class Module:
    path: Path
    text: str
    parameters: ParameterFile | None
    describe: str
    config: Any = None  # the encoder's EncoderConfig (its numpy/torch reference)


def make_module(spec: ModelSpec, args: argparse.Namespace) -> Module:
    """The model's module in ``--workdir``, reused when its first line (the config) matches."""
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{spec.slug}.mlir"
    if spec.kind == "bert":
        config = dataclasses.replace(BERT_BASE, layers=spec.layers, seq=(1, args.max_t))
        model = generate_encoder(config, "params")
        first = model.text.split("\n", 1)[0]
        if _reusable(path, first):
            say(f"{spec.slug}: reusing {path}")
            parameters = ParameterFile(str(parameters_path_for(path)), "model")
        else:
            say(f"{spec.slug}: generating {config.describe()} into {path}")
            parameters = save_model(model, path)
        return Module(path, model.text, parameters, config.describe(), config)
    if spec.kind == "llama":
        return _llama_module(spec, path, args.max_t)
    if spec.kind == "factory":
        return _factory_module(spec, path, args.max_t)
    from dcmlir.models.hf_models import Gpt2Config, gpt2, model_header  # needs no torch

    gpt = Gpt2Config(spec.layers, seq=(1, args.max_t), lm_head=args.lm_head)
    if _reusable(path, model_header(gpt)):
        say(f"{spec.slug}: reusing {path}")
        parameters = ParameterFile(str(path.with_suffix(".irpa")), "model")
    else:
        say(f"{spec.slug}: importing {gpt.describe()} (torch.export, IREE input conversion)")
        start = time.perf_counter()
        built = gpt2(spec.layers, seq=(1, args.max_t), lm_head=args.lm_head)
        parameters = built.save(path)
        say(f"{spec.slug}: imported into {path} in {time.perf_counter() - start:.0f} s")
    return Module(path, path.read_text(encoding="utf-8"), parameters, gpt.describe())


def _llama_module(spec: ModelSpec, path: Path, max_t: int) -> Module:
    """A Llama (RoPE, SwiGLU, RMSNorm) of ``spec.layers`` layers, hidden 768, imported once."""
    from dcmlir.models.hf_models import hf_model
    from dcmlir.models.torch_import import import_torch

    model = hf_model("llama", {"layers": spec.layers}, seq=(1, max_t))
    assert model.header is not None  # run-model rebuilds the torch model from it
    if _reusable(path, model.header):
        say(f"{spec.slug}: reusing {path}")
        parameters = ParameterFile(str(path.with_suffix(".irpa")), "model")
        return Module(path, path.read_text(encoding="utf-8"), parameters, model.description)
    say(f"{spec.slug}: importing {model.description} (torch.export, IREE input conversion)")
    start = time.perf_counter()
    imported = import_torch(
        model.module,
        model.example_inputs,
        model.dynamic_dims,
        input_dims=model.input_dims,
        weights="params",
    )
    parameters = imported.save(path)
    path.write_text(model.header + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    say(f"{spec.slug}: imported into {path} in {time.perf_counter() - start:.0f} s")
    return Module(path, path.read_text(encoding="utf-8"), parameters, model.description)


def _factory_module(spec: ModelSpec, path: Path, max_t: int) -> Module:
    """The factory's model imported as a user imports it (``dcmlir import-torch --model``:
    its header lets run-model rebuild it for the reference and the peers)."""
    from dcmlir.models.hf_models import source_from_text
    from dcmlir.tools.cli import main as cli

    if not _reusable(path, f'"seq": [1, {max_t}], "spec": "{spec.factory}"', whole=False):
        say(f"{spec.slug}: importing {spec.factory} (dcmlir import-torch --model)")
        argv = ["import-torch", "--model", spec.factory, "--seq", f"1:{max_t}", "-o", str(path)]
        if cli(argv) != 0:
            raise SystemExit(f"{spec.factory}: import-torch failed")
    else:
        say(f"{spec.slug}: reusing {path}")
    text = path.read_text(encoding="utf-8")
    if source_from_text(text) is None:
        raise SystemExit(f"{spec.factory}: no factory header (several dynamic dims?)")
    parameters = ParameterFile(str(path.with_suffix(".irpa")), "model")
    return Module(path, text, parameters, f"{spec.factory}, T in 1..{max_t}")


def _reusable(path: Path, first_line: str, whole: bool = True) -> bool:
    if not path.exists() or not path.with_suffix(".irpa").exists():
        return False
    with path.open(encoding="utf-8") as file:
        found = file.readline().rstrip("\n")
    return found == first_line if whole else first_line in found


def run(spec: ModelSpec, args: argparse.Namespace, results: Path) -> dict[str, Any]:
    """Import, tune, compile, time one model; the result as one JSON object."""
    module = make_module(spec, args)
    plan_path = Path(args.plan) if args.plan else results / f"{spec.stem}_plan.json"
    records = Path(args.db) if args.db else results / f"{spec.stem}_records.jsonl"
    earlier = len(records.read_text().splitlines()) if records.exists() else 0
    report = None
    start = time.perf_counter()
    if args.reuse_plan and plan_path.exists():
        say(f"{spec.slug}: reusing the plan {plan_path} (--reuse-plan)")
    else:
        say(f"{spec.slug}: tuning, budget {args.budget} ({earlier} records in {records})")
        report = dcmlir.tune(
            module.path,
            budget=args.budget,
            db=records,
            output=plan_path,
            min_time=args.tune_min_time,
            rounds=args.tune_rounds,
            level=args.level,
            device=args.device,  # the kernels are timed where they will run
        )
        for line in report.model_lines():
            print(line, file=sys.stderr)
    tune_seconds = time.perf_counter() - start
    say(f"{spec.slug}: compiling with the plan and as IREE does by default")
    start = time.perf_counter()
    tuned = dcmlir.compile(module.path, plan=plan_path).vmfb
    compile_seconds = time.perf_counter() - start
    default = compile_default(module.path)
    seq_lens = parse_seq(args.seq)
    say(f"{spec.slug}: checking and timing every column at {len(seq_lens)} sequence lengths")
    settings = MeasureSettings(
        min_time=args.min_time,
        rounds=args.rounds,
        warmup=max(2 * args.min_time, 0.1),
        rtol=1e-4,
        warm_calls=args.warm_calls,
    )
    done = [0]

    def progress(t: int) -> None:
        done[0] += 1
        say(f"{spec.slug}: T={t} ({done[0]}/{len(seq_lens)})")

    result: ModelRun = run_model(
        module.text,
        tuned,
        default,
        seq_lens,
        parameters=module.parameters,
        reference=args.reference,
        device=args.device,
        settings=settings,
        progress=progress,
        config=module.config,
        log=lambda line: say(f"{spec.slug}: {line}"),
    )
    for line in result.table():
        print(line, file=sys.stderr)
    command = f"{COMMAND} --models {spec.name} --budget {args.budget}"
    if args.device != "local-sync" or args.results != str(RESULTS):
        command += f" --device {args.device} --results {args.results} --no-docs"
    return {
        "slug": spec.slug,
        "commit": commit(),
        **versions(),
        "model": module.describe,
        "kind": spec.kind,
        "layers": spec.layers,
        "command": command + (f" --seq {args.seq}" if args.seq != DEFAULT_SEQ else ""),
        "target": CpuTarget().describe(),
        "budget": args.budget,
        "records": str(records.relative_to(ROOT) if records.is_relative_to(ROOT) else records),
        "records_before": earlier,
        "tuned_now": report is not None,
        "level": report.level if report else None,
        "measurements": report.measurements if report else None,
        "probes": report.probes if report else None,
        "tune_seconds": tune_seconds,
        "compile_seconds": compile_seconds,
        "workloads": workloads(report),
        "run": result.to_json(),
    }


def workloads(report: Any) -> list[dict[str, Any]]:
    """Where model time goes and the budget split (empty when the plan was reused)."""
    graph = report.graph if report is not None else None
    if graph is None:
        return []
    shares = graph.shares()
    found = []
    for item in report.workloads:
        key = item.workload.key
        if key not in graph.workloads:
            continue
        estimate, workload = graph.estimates[key], graph.workloads[key]
        found.append(
            {
                "key": key,
                "kind": workload.kind,
                "space": "x".join(d.describe() for d in workload.dims),
                "ops": estimate.ops,
                "default_ms": estimate.default_seconds * 1e3,
                "share": shares[key],
                "budget": estimate.budget,
                "measurements": estimate.measurements,
                "tuned_ms": (estimate.tuned_seconds or math.nan) * 1e3,
                "kernels": len(item.plan.kernels),
            }
        )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default="gpt2-2l,gpt2-12l,bert-12l",
        help="gpt2-Nl, llama-Nl, bert-Nl or package.module:factory (benchmarks/factory_models.py "
        "holds factory_models:qwen2 and factory_models:gpt_neox), comma-separated "
        "(default: %(default)s)",
    )
    parser.add_argument("--budget", type=int, default=600, help="tuning measurements per model")
    parser.add_argument("--seq", default=DEFAULT_SEQ, help="T values (default: %(default)s)")
    parser.add_argument("--max-t", type=int, default=128, help="T dynamic in 1..MAX_T")
    parser.add_argument("--lm-head", action="store_true", help="GPT-2 with its LM head (logits)")
    parser.add_argument("--level", default="auto")
    parser.add_argument("--reference", default="auto", choices=("auto", "numpy", "torch"))
    parser.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per sample")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--warm-calls",
        type=int,
        default=0,
        help="untimed calls of a column before each of its samples (with a tiny --min-time: "
        "the columns alternate call by call, each on its own caches)",
    )
    parser.add_argument("--tune-min-time", type=float, default=0.03)
    parser.add_argument("--tune-rounds", type=int, default=3)
    parser.add_argument(
        "--workdir", default="/tmp/dcmlir-model-benchmark", help="the models' modules and weights"
    )
    parser.add_argument("--db", default=None, help="records (default: RESULTS/model_<m>_...)")
    parser.add_argument("--plan", default=None, help="plan (default: RESULTS/model_<m>_...)")
    parser.add_argument("--reuse-plan", action="store_true", help="do not tune if the plan exists")
    parser.add_argument("--results", default=str(RESULTS), help="where outputs go")
    parser.add_argument(
        "--no-docs", action="store_true", help="leave docs/benchmarks.md as it is (development)"
    )
    args = parser.parse_args()
    specs = [ModelSpec.parse(m) for m in args.models.split(",") if m.strip()]
    if (args.db or args.plan) and len(specs) > 1:
        raise SystemExit("--db and --plan name one model's files: give one model in --models")
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    for index, spec in enumerate(specs, 1):
        say(f"== model {index}/{len(specs)}: {spec.slug}")
        result = run(spec, args, results)
        out = results / f"model_benchmark_{spec.slug}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        (results / f"model_benchmark_{spec.slug}.md").write_text(model_report.markdown(result))
        png = model_report.plot(result, results / f"model_benchmark_{spec.slug}.png")
        say(f"{spec.slug}: wrote {out}, its .md" + (" and .png" if png else " (no matplotlib)"))
    if not args.no_docs:
        model_report.write_docs(ROOT / "docs" / "benchmarks.md", RESULTS)
        say("docs/benchmarks.md: model-benchmark section regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
