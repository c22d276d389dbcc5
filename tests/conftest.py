"""Fixtures and hooks of the pytest suite (shared IR snippets live in ``helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dcmlir.driver.roles import Roles
from dcmlir.testing import keep_placement, keep_reports


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the user's ~/.cache out of the tests; one cache for the session saves compiles."""
    directory = tmp_path_factory.mktemp("dcmlir-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DCMLIR_CACHE_DIR", str(directory))
        yield directory


@pytest.fixture(autouse=True)
def no_placement_timing() -> Iterator[None]:
    """Tunes keep the search's plan: the placement step compiles the module four more times,
    the guard three (their own tests put the real ones back in scope)."""
    with Roles(placement=keep_placement, guard=keep_reports).in_scope():
        yield


@pytest.fixture
def write_mlir(tmp_path):
    """Write IR text to a file and return its path."""

    def write(text: str, name: str = "input.mlir") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test collected is a broken suite, not a pass: fail loudly instead of exit 5."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print(
            "\nerror: no tests were collected; the suite is broken (check paths and -k/-m filters)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
