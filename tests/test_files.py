"""Outputs are written whole or not at all (dcmlir.files.write_atomic)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dcmlir.files import temporary_path, write_atomic


def test_a_file_is_replaced_whole_and_no_temporary_is_left(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_full_disk_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """The write fails half way (the staging file is on a full device): the target keeps
    its old bytes and the staging file is gone. Before, a full disk left 4096 bytes of a
    plan that was not JSON in place of the good one."""
    target = tmp_path / "plan.json"
    target.write_text('{"good": true}')
    temporary_path(target).symlink_to("/dev/full")
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "x" * 100_000)
    assert target.read_text() == '{"good": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_link_is_followed_and_kept(tmp_path: Path) -> None:
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_device_is_written_not_replaced() -> None:
    write_atomic("/dev/null", b"discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
