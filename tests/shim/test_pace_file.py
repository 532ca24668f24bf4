"""The pace file's writer (gpu_shim.pace): what the shim maps read-only."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpu_shim.pace import MIN_SCALE, PaceFile, pace_path


def test_a_new_pace_file_is_unscaled_and_only_its_owner_may_write_it(tmp_path: Path) -> None:
    region = tmp_path / "c1"
    with PaceFile.create(region) as pace:
        assert pace.path == pace_path(region) == tmp_path / "c1.pace"
        assert [pace.scale(d) for d in (0, 15)] == [1.0, 1.0]
    assert stat.S_IMODE(pace_path(region).stat().st_mode) == 0o644


def test_scales_are_clamped_to_what_the_shim_accepts(tmp_path: Path) -> None:
    with PaceFile.create(tmp_path / "c") as pace:
        pace.set_scale(1, 0.8)
        pace.set_scale(2, 0.01)
        pace.set_scale(3, 7.0)
        assert [pace.scale(d) for d in (0, 1, 2, 3)] == [1.0, 0.8, MIN_SCALE, 1.0]
        with pytest.raises(ValueError, match="device 16"):
            pace.set_scale(16, 0.5)
    with PaceFile(pace_path(tmp_path / "c")) as again:  # another writer sees the same
        assert again.scale(1) == 0.8


def test_a_file_that_is_not_a_pace_file_is_refused(tmp_path: Path) -> None:
    path = pace_path(tmp_path / "c")
    path.write_bytes(b"\0" * 72)
    with pytest.raises(ValueError, match="not a version 1 pace file"):
        PaceFile(path)
