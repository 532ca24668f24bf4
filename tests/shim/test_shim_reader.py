"""The region reader (Cython) and the pure-Python usage facade."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_shim import (
    HappeningKind,
    RegionClosed,
    RegionInvalid,
    RegionNotFound,
    create_region,
    open_region,
)
from services.domain.gpu_slice import SHARE_FULL_PPM
from tests.support.shim_kit import MIB, Kit

HEADER = Path(__file__).resolve().parents[2] / "gpu_shim" / "src" / "fgpu_region.h"


def test_import_does_not_need_the_extension() -> None:
    code = "import sys, gpu_shim; assert 'gpu_shim._reader' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _header_define(name: str) -> int:
    """The value of ``#define name <integer>[u]`` in the shim's public header."""
    (value,) = re.findall(rf"^#define {name} (\d+)u?\b", HEADER.read_text(), re.MULTILINE)
    return int(value)


def test_the_full_share_is_the_headers() -> None:
    # The agent's shares (services.domain.gpu_slice) and the shim's are one unit.
    assert _header_define("FGPU_SHARE_FULL") == SHARE_FULL_PPM
    from gpu_shim._reader import SHARE_FULL

    assert SHARE_FULL == SHARE_FULL_PPM


def _share_from_env(kit: Kit, state: Path, region: Path, **share: str) -> int:
    """The SM share of device 0 in the region the first process makes from ``share``."""
    kit.run("exit", str(MIB), env=kit.env(state=state, region=region, mem_limit="1G", **share))
    with open_region(region) as r:
        return r.device(0).sm_share_ppm


@pytest.mark.parametrize(
    ("decimal", "ppm"), [("0.5", 500_000), ("1", SHARE_FULL_PPM), ("0.000001", 1)]
)
def test_shares_parse_exactly(
    kit: Kit, state: Path, tmp_path: Path, decimal: str, ppm: int
) -> None:
    # The one parser of a share is the shim's: a decimal, or parts per million (the agent's).
    assert _share_from_env(kit, state, tmp_path / "d", sm_share=decimal) == ppm
    assert _share_from_env(kit, state, tmp_path / "p", FGPU_SM_SHARE_PPM=str(ppm)) == ppm
    # Parts per million win over the decimal where both are set.
    both = {"sm_share": "0.25", "FGPU_SM_SHARE_PPM": str(ppm)}
    assert _share_from_env(kit, state, tmp_path / "b", **both) == ppm


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.1", "0.0000001", "abc", "nan"])
def test_a_bad_decimal_share_is_no_share(kit: Kit, state: Path, tmp_path: Path, bad: str) -> None:
    assert _share_from_env(kit, state, tmp_path / "r", sm_share=bad) == SHARE_FULL_PPM


@pytest.mark.parametrize("bad", ["0", "1000001", "-1", "0.5", "5e5", "99999999999999999999"])
def test_a_bad_ppm_share_is_no_share(kit: Kit, state: Path, tmp_path: Path, bad: str) -> None:
    assert _share_from_env(kit, state, tmp_path / "r", FGPU_SM_SHARE_PPM=bad) == SHARE_FULL_PPM


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(RegionNotFound):
        open_region(tmp_path / "missing")
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 200_000)
    with pytest.raises(RegionInvalid):
        open_region(junk)
    region = create_region(tmp_path / "r")
    region.close()
    with pytest.raises(RegionClosed):
        region.devices()


def test_the_slice_is_its_own_read_only_file_read_once(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with create_region(path, mem_limits=(4 << 30, 2 << 30), sm_shares_ppm=(500_000,)) as r:
        assert [(d.index, d.limit, d.sm_share_ppm) for d in r.devices()] == [
            (0, 4 << 30, 500_000),
            (1, 2 << 30, SHARE_FULL_PPM),
        ]
        assert r.slice_path == f"{path}.slice"
        assert stat.S_IMODE(os.stat(r.slice_path).st_mode) == 0o444
        # A new slice replaces the file whole; a region open already keeps what it read.
        with create_region(path, mem_limits=(1 << 30,), sm_shares_ppm=(250_000,)):
            pass
        assert r.device(0).limit == 4 << 30
    with open_region(path) as again:
        assert (again.device(0).limit, again.device(0).sm_share_ppm) == (1 << 30, 250_000)
        assert again.devices()[0].limited


def test_a_region_without_its_slice_or_of_version_1_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "r"
    create_region(path, mem_limits=(1 << 30,)).close()
    Path(f"{path}.slice").unlink()
    with pytest.raises(RegionNotFound):
        open_region(path)
    create_region(path, mem_limits=(1 << 30,)).close()
    with path.open("r+b") as f:  # the counters' version word, as version 1 wrote it
        f.seek(8)
        f.write((1).to_bytes(4, "little"))
    with pytest.raises(RegionInvalid):
        open_region(path)


def test_drain_ring_resumes_after_a_cursor(kit: Kit, state: Path, tmp_path: Path) -> None:
    path = tmp_path / "r"
    env = kit.env(state=state, region=path, mem_limit="64M")
    for _ in range(2):
        kit.run("exit", str(MIB), env=env)
    with open_region(path) as r:
        everything = r.drain_ring()
        assert [h.seq for h in everything] == [1, 2, 3, 4]  # start, exit, start, exit
        assert r.drain_ring(after=2) == everything[2:]
        assert r.drain_ring(after=everything[-1].seq) == []
        first = everything[0]
        assert first.kind is HappeningKind.PROCESS_STARTED and first.device is None


def test_a_lookup_the_shim_cannot_swap_is_reported(kit: Kit, state: Path, tmp_path: Path) -> None:
    path = tmp_path / "r"
    env = kit.env(state=state, region=path, mem_limit="1G", FAKE_CUDA_HIDDEN="cuMemAllocManaged")
    lines = kit.run("resolve", env=env)
    (managed,) = [r for r in lines if r.get("name") == "cuMemAllocManaged"]
    assert lines[-1]["symbol"] == "cuMemAlloc_v2"  # other look-ups still swap
    assert managed["library"] == str(kit.fake)  # not swappable: returned as is
    with open_region(path) as r:
        kinds = [h.kind for h in r.drain_ring()]
        assert kinds == [HappeningKind.UNHOOKED_ENTRY]


def test_the_first_process_creates_the_region_from_its_environment(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    path = tmp_path / "r"
    env = kit.env(state=state, region=path, mem_limit="1GiB,512M", sm_share="0.5,0.25")
    kit.run("exit", str(MIB), env=env)
    with open_region(path) as r:
        assert [(d.limit, d.sm_share_ppm) for d in r.devices()] == [
            (1 << 30, 500_000),
            (512 * MIB, 250_000),
        ]


def test_an_unparsable_slice_is_ignored(kit: Kit, state: Path, tmp_path: Path) -> None:
    env = kit.env(state=state, mem_limit="lots", sm_share="2.5")
    info = kit.run("used", str(MIB), env=env)[-1]
    assert info["total"] == 16 << 30  # no slice: the device as it is
