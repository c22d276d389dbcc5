"""Fixtures and hooks of the pytest suite (shared IR snippets live in ``helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the user's ~/.cache out of the tests; one cache for the session saves compiles."""
    directory = tmp_path_factory.mktemp("dcmlir-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DCMLIR_CACHE_DIR", str(directory))
        yield directory


@pytest.fixture
def write_mlir(tmp_path):
    """Write IR text to a file and return its path."""

    def write(text: str, name: str = "input.mlir") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


HEAVY_FIRST = (
    "test_model_tuning.py",
    "test_run_model_peers.py",
    "test_resume.py",
    "test_onnx_import.py",
    "test_failures.py",
    "test_lit.py",
    "test_cuda_tools.py",
    "test_fuzz.py",
    "test_batch_seq.py",
)
"""The files that take longest (``--durations``: 650 s for the first on the 2-core Zen 3,
260 s for the second, 100-130 s for the rest), in that order. pytest-xdist hands a worker
whole files in collection order; collected by name, the longest file started 10 minutes
in and ran alone to the end (22.5 min of wall time for 16 of work per core)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (:data:`HEAVY_FIRST`), the rest in their order: the tail
    of the run is short files, not one long one."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test collected is a broken suite, not a pass: fail loudly instead of exit 5."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print(
            "\nerror: no tests were collected; the suite is broken (check paths and -k/-m filters)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
