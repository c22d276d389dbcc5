"""Benchmark: what a call pays for the dispatch's form (docs/design.md section 8).

One decision tree over M (random thresholds, ``--splits`` splits, 8 kernels: a small
``?x48 @ 48x48`` matmul plus a fill of the kernel's number, so each branch differs) in
three modules, timed interleaved in one process on ``local-sync``:

- ``selects``: what ``dcmlir-emit-dispatch`` emits below its branches, the tree as
  ``arith.cmpi`` + ``arith.select`` to a position, then a balanced ``scf.if`` search;
- ``blocks``: the tree as blocks, ``cf.cond_br`` per split and one block per kernel, in an
  ``scf.execute_region`` (IREE 3.13 takes it in a function, not inside a loop), so a call
  evaluates only its path;
- ``table``: the kernel read from a table of every M with one ``util.buffer.load``
  (``dcmlir-emit-dispatch``'s default since 2026-12-03, :mod:`dcmlir.dispatch.case_table`),
  then the balanced search;
- ``one``: the kernel alone, no tree.

Every M in 1..128 is checked to give the same output from every form with a tree.
Reproduce: ``python benchmarks/dispatch_forms.py --splits 50``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

from dcmlir.build.compiler import TARGETS
from dcmlir.ir.iree import LoadedFunction, load_function, run_compile

KERNELS = 8
HEAD = """func.func @main(%a: tensor<?x48xf32>, %b: tensor<48x48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x48xf32>
"""

Tree = tuple  # ("leaf", kernel) | ("split", threshold, left, right)


def random_tree(rng: random.Random, splits: int) -> Tree:
    """A random binary search tree over ``splits`` distinct thresholds of M in 1..127."""

    def subtree(thresholds: list[int]) -> Tree:
        if not thresholds:
            return ("leaf", rng.randrange(KERNELS))
        root = rng.randrange(len(thresholds))
        left, right = thresholds[:root], thresholds[root + 1 :]
        return ("split", thresholds[root], subtree(left), subtree(right))

    return subtree(sorted(rng.sample(range(1, 128), splits)))


class Text:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"%{prefix}{self.count}"

    def kernel(self, number: int) -> str:
        fill, empty, filled, out = (self.name(p) for p in ("v", "e", "f", "r"))
        self.lines += [
            f"{fill} = arith.constant {number}.0 : f32",
            f"{empty} = tensor.empty(%m) : tensor<?x48xf32>",
            f"{filled} = linalg.fill ins({fill} : f32) outs({empty} : tensor<?x48xf32>)"
            " -> tensor<?x48xf32>",
            f"{out} = linalg.matmul ins(%a, %b : tensor<?x48xf32>, tensor<48x48xf32>)"
            f" outs({filled} : tensor<?x48xf32>) -> tensor<?x48xf32>",
        ]
        return out

    def index(self, value: int) -> str:
        out = self.name("c")
        self.lines.append(f"{out} = arith.constant {value} : index")
        return out


def balanced_search(text: Text, case: str, numbers: list[int]) -> str:
    """The kernel whose number ``case`` holds: a balanced ``scf.if`` search, as
    ``dcmlir-emit-dispatch`` writes it."""
    if len(numbers) == 1:
        return text.kernel(numbers[0])
    half = len(numbers) // 2
    low, out = text.name("l"), text.name("r")
    text.lines += [
        f"{low} = arith.cmpi ule, {case}, {text.index(numbers[half - 1])} : index",
        f"{out} = scf.if {low} -> tensor<?x48xf32> {{",
    ]
    text.lines.append(f"scf.yield {balanced_search(text, case, numbers[:half])} : tensor<?x48xf32>")
    text.lines.append("} else {")
    text.lines.append(f"scf.yield {balanced_search(text, case, numbers[half:])} : tensor<?x48xf32>")
    text.lines.append("}")
    return out


def selects_module(tree: Tree) -> str:
    text = Text()

    def position(node: Tree) -> str:
        if node[0] == "leaf":
            return text.index(node[1])
        below = text.name("b")
        text.lines.append(f"{below} = arith.cmpi ule, %m, {text.index(node[1])} : index")
        left, right = position(node[2]), position(node[3])
        out = text.name("s")
        text.lines.append(f"{out} = arith.select {below}, {left}, {right} : index")
        return out

    result = balanced_search(text, position(tree), list(range(KERNELS)))
    return HEAD + "\n".join(text.lines) + f"\nreturn {result} : tensor<?x48xf32>\n}}\n"


def pick(tree: Tree, m: int) -> int:
    """The kernel ``tree`` picks at ``m``."""
    while tree[0] == "split":
        tree = tree[2] if m <= tree[1] else tree[3]
    return int(tree[1])


def table_module(tree: Tree) -> str:
    """The kernel read from a table of every M in 1..128 (one ``util.buffer.load``), then the
    balanced search, as ``dcmlir-emit-dispatch`` emits it by default."""
    text = Text()
    cases = ", ".join(str(pick(tree, m)) for m in range(1, 129))
    row, byte, case = text.name("o"), text.name("t"), text.name("k")
    one, size = text.index(1), text.index(128)
    text.lines += [
        f"{row} = arith.subi %m, {one} : index",
        f"%table = util.buffer.constant : !util.buffer = dense<[{cases}]> : tensor<128xi8>",
        f"{byte} = util.buffer.load %table[{row} for {one}] : !util.buffer{{{size}}} -> i8",
        f"{case} = arith.index_castui {byte} : i8 to index",
    ]

    result = balanced_search(text, case, list(range(KERNELS)))
    return HEAD + "\n".join(text.lines) + f"\nreturn {result} : tensor<?x48xf32>\n}}\n"


def blocks_module(tree: Tree) -> str:
    text = Text()
    blocks: list[tuple[str, list[str]]] = []

    def label(node: Tree) -> str:
        if node[0] == "leaf":
            return f"^kernel{node[1]}"
        name = f"^split{len(blocks)}"
        slot: list[str] = []
        blocks.append((name, slot))
        left, right = label(node[2]), label(node[3])
        text.lines = slot
        below = text.name("b")
        slot.append(f"{below} = arith.cmpi ule, %m, {text.index(node[1])} : index")
        slot.append(f"cf.cond_br {below}, {left}, {right}")
        return name

    root = label(tree)
    body = ["%out = scf.execute_region -> tensor<?x48xf32> {", f"cf.br {root}"]
    for name, lines in blocks:
        body += [f"{name}:", *lines]
    for number in range(KERNELS):
        text.lines = []
        result = text.kernel(number)
        body += [f"^kernel{number}:", *text.lines, f"cf.br ^exit({result} : tensor<?x48xf32>)"]
    body += ["^exit(%q: tensor<?x48xf32>):", "scf.yield %q : tensor<?x48xf32>", "}"]
    return HEAD + "\n".join(body) + "\nreturn %out : tensor<?x48xf32>\n}\n"


def one_module() -> str:
    text = Text()
    result = text.kernel(0)
    return HEAD + "\n".join(text.lines) + f"\nreturn {result} : tensor<?x48xf32>\n}}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--shapes", default="3,17,64,120")
    args = parser.parse_args(argv)
    tree = random_tree(random.Random(args.seed), args.splits)
    texts = {
        "selects": selects_module(tree),
        "blocks": blocks_module(tree),
        "table": table_module(tree),
        "one": one_module(),
    }
    calls: dict[str, LoadedFunction] = {}
    for name, text in texts.items():
        built = run_compile(text, TARGETS["llvm-cpu"])
        if built.returncode != 0:
            raise SystemExit(f"dispatch_forms: the {name} module does not compile:\n{built.log}")
        calls[name] = load_function(built.output, "main")
    rng = np.random.default_rng(args.seed)
    b = rng.random((48, 48), dtype=np.float32)
    for m in range(1, 129):
        a = rng.random((m, 48), dtype=np.float32)
        want = calls["selects"](a, b)[0]
        for form in ("blocks", "table"):
            if not np.allclose(calls[form](a, b)[0], want):
                raise SystemExit(f"dispatch_forms: selects and {form} differ at M = {m}")
    print(f"{args.splits} splits, {KERNELS} kernels: outputs agree at M = 1..128")
    print(
        "| M | one (us) | selects (us) | blocks (us) | table (us) | selects - one "
        "| blocks - one | table - one |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in (int(v) for v in args.shapes.split(",")):
        inputs = {
            name: call.prepare([rng.random((m, 48), dtype=np.float32), b])
            for name, call in calls.items()
        }
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    call.invoke(inputs[name])
                times[name].append((time.perf_counter() - start) / args.calls * 1e6)
        med = {name: statistics.median(values) for name, values in times.items()}
        print(
            f"| {m} | {med['one']:.2f} | {med['selects']:.2f} | {med['blocks']:.2f} "
            f"| {med['table']:.2f} | {med['selects'] - med['one']:+.2f} "
            f"| {med['blocks'] - med['one']:+.2f} | {med['table'] - med['one']:+.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
