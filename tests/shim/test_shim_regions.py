"""ShimRegions: the agent's regions on the host, their files' modes, a restarted agent's
reading of the regions of sessions that run on, and a region of the older format."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpu_shim import _reader, pace
from gpu_shim.pace import PaceFile
from services.adapters.shim_regions import ShimRegions
from services.domain.container_spec import PACE_SUFFIX, SLICE_SUFFIX
from tests.support.shim_kit import GIB, Kit, read_line, running


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_slice_is_read_only_and_nothing_is_open_to_every_user(tmp_path: Path) -> None:
    regions = ShimRegions(str(tmp_path / "regions"), group=os.getegid())
    path = regions.create("s1", [4 * GIB], [250_000])
    assert mode(tmp_path / "regions") == 0o700
    assert (mode(path), mode(path + SLICE_SUFFIX), mode(path + PACE_SUFFIX)) == (
        0o660,
        0o440,
        0o640,
    )
    assert os.stat(path).st_gid == os.stat(path + SLICE_SUFFIX).st_gid == regions.group
    assert os.stat(path + PACE_SUFFIX).st_gid == regions.group
    regions.remove("s1")
    assert sorted(os.listdir(tmp_path / "regions")) == []


def test_the_slice_suffix_is_the_shims() -> None:
    assert SLICE_SUFFIX == _reader.SLICE_SUFFIX
    assert PACE_SUFFIX == pace.SUFFIX


def test_a_restarted_agent_reads_the_regions_of_sessions_that_run_on(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    before = ShimRegions(str(tmp_path / "regions"))
    path = before.create("s1", [4 * GIB], [250_000])
    env = kit.env(state=state, region=Path(path))
    with running(kit, "hold", str(GIB), env=env) as holder:
        assert read_line(holder)["rc"] == 0
        del before  # the agent goes; its session runs on
        after = ShimRegions(str(tmp_path / "regions"))
        (dev,) = after.sample("s1")
        assert (dev.mem_limit, dev.mem_used) == (4 * GIB, GIB)
    assert (mode(path), mode(path + SLICE_SUFFIX)) == (0o660, 0o440)


def test_a_region_of_the_older_format_is_not_read_and_said_once(tmp_path: Path) -> None:
    """A session started by an agent before the slice had a file of its own: its region
    (version 1, the slice inside the counters, writable from the container) is not
    trusted. The agent reads nothing of it, says so once, and goes on."""
    regions = ShimRegions(str(tmp_path / "regions"))
    path = Path(regions.path("old"))
    path.write_bytes(_version_1_region())
    with capture_logs() as logs:
        assert regions.sample("old") == []
        assert regions.drain_ooms("old") == []
        assert regions.reclaim("old") == 0
    assert [e["event"] for e in logs] == ["shim_regions.unreadable"]
    regions.remove("old")
    assert not path.exists()


def test_a_region_made_anew_replaces_one_of_the_older_format(tmp_path: Path) -> None:
    """The agent went down between making a session's region and starting its container,
    and came back upgraded: it makes the region again, whatever was there."""
    regions = ShimRegions(str(tmp_path / "regions"))
    Path(regions.path("s1")).write_bytes(_version_1_region())
    regions.create("s1", [GIB], [500_000])
    (dev,) = ShimRegions(str(tmp_path / "regions")).sample("s1")
    assert (dev.mem_limit, dev.mem_used) == (GIB, 0)


def _version_1_region() -> bytes:
    """The header of a version 1 region (magic, version 1, its size) and zeros."""
    size = 92224  # sizeof(fgpu_layout) of version 1: the counters' size today too
    header = (0x3147455255504746).to_bytes(8, "little") + (1).to_bytes(4, "little")
    return header + size.to_bytes(4, "little") + bytes(size - 16)


@pytest.mark.parametrize("missing", ["counters", "slice"])
def test_a_region_with_a_file_missing_is_not_read(tmp_path: Path, missing: str) -> None:
    regions = ShimRegions(str(tmp_path / "regions"))
    path = regions.create("s1", [GIB], [500_000])
    other = ShimRegions(str(tmp_path / "regions"))  # a fresh reader, as after a restart
    os.unlink(path if missing == "counters" else path + SLICE_SUFFIX)
    assert other.sample("s1") == []


def test_a_sample_carries_the_share_and_the_gpu_time_charged_against_it(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    """What the agent reports how busy a session kept a device from (``charged_ns``)."""
    regions = ShimRegions(str(tmp_path / "regions"))
    path = regions.create("s1", [4 * GIB], [250_000])
    kit.run("launch", "0.3", "1000000", env=kit.env(state=state, region=Path(path)))
    (dev,) = regions.sample("s1")
    assert dev.sm_share_ppm == 250_000 and dev.charged_ns > 0


def test_the_agent_scales_a_share_through_the_pace_file_also_after_a_restart(
    tmp_path: Path,
) -> None:
    regions = ShimRegions(str(tmp_path / "regions"))
    path = regions.create("s1", [4 * GIB, 4 * GIB], [250_000, 500_000])
    regions.set_pace("s1", 1, 0.8)
    after = ShimRegions(str(tmp_path / "regions"))  # a restarted agent opens it again
    after.set_pace("s1", 0, 0.9)
    after.set_pace("gone", 0, 0.5)  # no region: nothing to scale, no error
    with PaceFile(Path(path + PACE_SUFFIX)) as pace:
        assert (pace.scale(0), pace.scale(1)) == (0.9, 0.8)
    after.remove("s1")
    assert not Path(path + PACE_SUFFIX).exists()
