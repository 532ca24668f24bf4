"""The memory slice, driven the way the CUDA runtime drives the driver."""

from __future__ import annotations

import os
import signal
from contextlib import ExitStack
from pathlib import Path

import pytest

from gpu_shim import HappeningKind, create_region, open_region
from tests.support.shim_kit import GIB, MIB, FakeDevice, Kit, read_line, running

OOM = 2


def test_lookups_return_the_wrapper_of_exactly_the_real_function(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    lines = kit.run("resolve", env=kit.env(state=state, region=tmp_path / "r", mem_limit="1G"))
    shim = lines[0]["shim"]
    via_v1 = lines.pop()
    assert (via_v1["rc"], via_v1["symbol"], via_v1["library"]) == (0, "cuMemAlloc_v2", shim)
    got = {(r["name"], r["version"], r["flags"]): r for r in lines[1:]}
    expected = {
        ("cuGetProcAddress", 11030, 0): "cuGetProcAddress",
        ("cuGetProcAddress", 12000, 0): "cuGetProcAddress_v2",
        ("cuMemAlloc", 2000, 0): "cuMemAlloc",
        ("cuMemAlloc", 3020, 0): "cuMemAlloc_v2",
        ("cuMemAllocAsync", 11020, 0): "cuMemAllocAsync",
        ("cuMemAllocAsync", 11020, 2): "cuMemAllocAsync_ptsz",
        ("cuMemFreeAsync", 11020, 2): "cuMemFreeAsync_ptsz",
        ("cuMemGetInfo", 2000, 0): "cuMemGetInfo",
        ("cuMemGetInfo", 3020, 0): "cuMemGetInfo_v2",
        ("cuLaunchKernel", 4000, 0): "cuLaunchKernel",
        ("cuLaunchKernel", 7000, 2): "cuLaunchKernel_ptsz",
        ("cuLaunchKernelEx", 11060, 2): "cuLaunchKernelEx_ptsz",
        ("cuLaunchCooperativeKernel", 9000, 2): "cuLaunchCooperativeKernel_ptsz",
        ("cuGraphLaunch", 10000, 0): "cuGraphLaunch",
        ("cuGraphLaunch", 10000, 2): "cuGraphLaunch_ptsz",
        ("cuArray3DCreate", 3020, 0): "cuArray3DCreate_v2",
        ("cuCtxDestroy", 4000, 0): "cuCtxDestroy_v2",
    }
    for key, symbol in expected.items():
        assert (got[key]["symbol"], got[key]["library"]) == (symbol, shim), key
    # Entry points the shim does not hook come straight from the driver: no added cost.
    for key in [("cuInit", 2000, 0), ("cuCtxGetCurrent", 4000, 0), ("cuEventRecord", 7000, 2)]:
        assert got[key]["library"] == str(kit.fake), key
    assert (got[("cuEventRecord", 7000, 2)]["symbol"]) == "cuEventRecord_ptsz"
    missing = got[("cuNoSuchFunction", 13000, 0)]
    assert (missing["rc"], missing["status"], missing["symbol"]) == (500, 1, "")


def test_without_a_slice_lookups_return_the_drivers_own_functions(kit: Kit, state: Path) -> None:
    lines = kit.run("resolve", env=kit.env(state=state))
    assert all(r["library"] in (str(kit.fake), "") for r in lines[1:])
    assert lines[-1]["via_v1"] == "cuMemAlloc"


@pytest.mark.parametrize("mode", [[], ["--ptds"]], ids=["legacy-stream", "per-thread-stream"])
def test_every_allocation_path_refuses_over_the_limit_with_2(
    kit: Kit, state: Path, tmp_path: Path, mode: list[str]
) -> None:
    region = tmp_path / "region"
    lines = kit.run(*mode, "paths", env=kit.env(state=state, region=region, mem_limit="1G"))
    results = {(r["path"], r["phase"]): r["rc"] for r in lines if "path" in r}
    paths = {p for p, _ in results}
    assert paths == {
        "cuMemAlloc_v2", "cuMemAlloc", "cuMemAllocManaged", "cuMemAllocPitch_v2",
        "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate", "cuArrayCreate_v2",
        "cuArray3DCreate_v2", "cuMipmappedArrayCreate",
    }  # fmt: skip
    for p in paths:
        assert results[(p, "fit")] == 0, p
        assert results[(p, "over")] == OOM, p
    info = lines[-1]
    assert info["total"] == info["device_total"] == info["free"] == GIB  # everything freed
    assert FakeDevice.read(state).in_use[0] == 0
    with open_region(region) as r:
        (dev,) = r.devices()
        assert (dev.limit, dev.in_use, dev.refusals) == (GIB, 0, len(paths))
        assert dev.peak <= GIB


def test_meminfo_shows_the_slice(kit: Kit, state: Path) -> None:
    lines = kit.run("used", str(100 * MIB), env=kit.env(state=state, mem_limit="512MiB"))
    info = lines[-1]
    assert info["rc"] == [0, 0, 0]
    assert info["total"] == info["total_v1"] == info["device_total"] == 512 * MIB
    assert info["free"] == info["free_v1"] == 412 * MIB


def test_meminfo_total_is_never_above_the_real_device(kit: Kit, state: Path) -> None:
    env = kit.env(state=state, mem_limit="4G", total_mem=GIB)
    info = kit.run("used", str(MIB), env=env)[-1]
    assert (info["total"], info["device_total"]) == (GIB, GIB)
    assert info["free"] == GIB - MIB


def test_processes_of_a_container_share_one_budget(kit: Kit, state: Path, tmp_path: Path) -> None:
    """8 processes allocating at random never exceed the container's budget together."""
    region = tmp_path / "region"
    limit = 256 * MIB
    env = kit.env(state=state, region=region, mem_limit=str(limit))
    with ExitStack() as stack:
        procs = [
            stack.enter_context(running(kit, "random", "300000", str(seed), str(48 * MIB), env=env))
            for seed in range(8)
        ]
        results = [read_line(p) for p in procs]
        assert [p.wait(timeout=60) for p in procs] == [0] * 8
    assert all(r["other"] == 0 for r in results)
    assert sum(r["oom"] for r in results) > 0  # the budget was contended
    fake = FakeDevice.read(state)
    assert 0 < fake.peak[0] <= limit  # what the "GPU" really held at its worst
    with open_region(region) as r:
        dev = r.device(0)
        assert dev.in_use == 0 and 0 < dev.peak <= limit
        assert dev.refusals == sum(r["oom"] for r in results)
        assert r.processes() == []  # every process exited cleanly and gave its slot back


def test_forked_children_get_their_own_slots(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    limit = 128 * MIB
    env = kit.env(state=state, region=region, mem_limit=str(limit))
    lines = kit.run("forkrandom", "8", "3000", str(32 * MIB), env=env)
    assert lines[-1] == {"children": 8, "failed": 0}
    assert 0 < FakeDevice.read(state).peak[0] <= limit
    with open_region(region) as r:
        started = {h.pid for h in r.drain_ring() if h.kind is HappeningKind.PROCESS_STARTED}
        assert len(started) == 8  # one slot per child, none inherited from the parent
        r.reclaim_dead()  # children left with _exit: no destructor ran
        assert r.device(0).in_use == 0
        assert r.processes() == []


def test_bytes_of_a_killed_process_come_back(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    env = kit.env(state=state, region=region, mem_limit="1G")
    with (
        running(kit, "hold", str(300 * MIB), env=env) as victim,
        running(kit, "hold", str(200 * MIB), env=env) as survivor,
    ):
        held = [read_line(victim), read_line(survivor)]
        assert [h["rc"] for h in held] == [0, 0]
        with open_region(region) as r:
            assert r.device(0).in_use == 500 * MIB
            assert r.reclaim_dead() == 0  # both alive: nothing to take
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            assert r.reclaim_dead() == 300 * MIB
            assert r.reclaim_dead() == 0  # idempotent
            assert r.device(0).in_use == 200 * MIB
            (alive,) = r.processes()
            assert (alive.pid, alive.alive, alive.bytes[0]) == (survivor.pid, True, 200 * MIB)
            reclaimed = [h for h in r.drain_ring() if h.kind is HappeningKind.PROCESS_RECLAIMED]
            assert [(h.pid, h.value) for h in reclaimed] == [(victim.pid, 300 * MIB)]
            # The freed budget is usable again by a new process.
            info = kit.run("used", str(700 * MIB), env=env)
            assert info[0]["alloc"] == 0


def test_clean_exit_gives_back_and_reports(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    (r0,) = kit.run("exit", str(5 * MIB), env=kit.env(state=state, region=region, mem_limit="1G"))
    assert r0["alloc"] == 0
    with open_region(region) as r:
        assert r.device(0).in_use == 0
        kinds = [(h.kind, h.value) for h in r.drain_ring()]
        assert kinds[0][0] is HappeningKind.PROCESS_STARTED
        assert kinds[-1] == (HappeningKind.PROCESS_EXITED, 5 * MIB)


def test_ring_reports_the_out_of_memory_refusal(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    kit.run("used", str(2 * GIB), env=kit.env(state=state, region=region, mem_limit="1G"))
    with open_region(region) as r:
        (oom,) = [h for h in r.drain_ring() if h.kind is HappeningKind.OOM_REFUSED]
        assert (oom.device, oom.value, oom.value2) == (0, 2 * GIB, 0)
        assert oom.time_ns > 0 and oom.slot is not None


def test_destroyed_context_gives_its_memory_back(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    lines = kit.run(
        "ctxdestroy", str(64 * MIB), env=kit.env(state=state, region=region, mem_limit="1G")
    )
    assert lines[0] == {"alloc": 0, "destroy": 0}
    assert lines[1]["free"] == GIB


def test_the_agents_slice_wins_over_the_environment(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "region"
    create_region(region, mem_limits=(512 * MIB,)).close()
    info = kit.run("used", str(MIB), env=kit.env(state=state, region=region, mem_limit="8G"))
    assert info[-1]["total"] == 512 * MIB
