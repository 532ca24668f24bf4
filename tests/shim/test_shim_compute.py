"""The soft SM share: two containers on one fake GPU split its busy time by their shares.

Fake kernels hold the fake device for a fixed time, one at a time across all
processes.  Shares are measured on the device's own busy time over a window in
which both containers run, so a slow or loaded machine stretches the window but
does not change the split.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_shim import open_region
from tests.support.shim_kit import FakeDevice, Kit, read_line, running

pytestmark = pytest.mark.solo  # shares of the machine's time: alone (scripts/test)

KERNEL_NS = 3_000_000
RUN_S = 3.0
WINDOW = (0.3, 2.5)  # seconds after both containers started


@pytest.mark.parametrize(
    "mode",
    [(), ("--ptds", "graph")],
    ids=["cuLaunchKernel", "cuGraphLaunch_ptsz"],
)
def test_two_containers_split_the_gpu_by_their_shares(
    kit: Kit, state: Path, tmp_path: Path, mode: tuple[str, ...]
) -> None:
    shares = (0.3, 0.7)
    flags = [m for m in mode if m.startswith("--")]
    args = [*flags, "launch", str(RUN_S), str(KERNEL_NS), *[m for m in mode if m == "graph"]]
    envs = [
        kit.env(state=state, region=tmp_path / f"container{i}", sm_share=str(s), tenant=i)
        for i, s in enumerate(shares)
    ]
    with running(kit, *args, env=envs[0]) as a, running(kit, *args, env=envs[1]) as b:
        assert read_line(a) == read_line(b) == {"started": True}
        start = time.monotonic()
        time.sleep(WINDOW[0])
        first = FakeDevice.read(state)
        time.sleep(WINDOW[1] - (time.monotonic() - start))
        last = FakeDevice.read(state)
        done = [read_line(a), read_line(b)]
    busy = [last.busy_ns[i] - first.busy_ns[i] for i in range(2)]
    measured = [x / sum(busy) for x in busy]
    for got, want in zip(measured, shares, strict=True):
        assert abs(got - want) <= 0.1 * want, (measured, shares)
    assert all(d["launches"] > 0 for d in done)
    with open_region(tmp_path / "container0") as r:
        dev = r.device(0)
        assert dev.sm_share_ppm == 300_000
        assert dev.throttled_ns > 0 and dev.charged_ns > 0
        assert dev.launches >= done[0]["launches"] - 63  # batched per thread


def test_one_container_alone_stays_under_its_share(kit: Kit, state: Path, tmp_path: Path) -> None:
    env = kit.env(state=state, region=tmp_path / "c", sm_share="0.5")
    with running(kit, "launch", "2", str(KERNEL_NS), env=env) as p:
        assert read_line(p) == {"started": True}
        t0, first = time.monotonic(), FakeDevice.read(state)
        time.sleep(1.5)
        t1, last = time.monotonic(), FakeDevice.read(state)
        done = read_line(p)
    # A cap, not a speed: a loaded machine can only lower this (but kernels did run).
    assert done["launches"] > 0 and last.busy_ns[0] > first.busy_ns[0]
    assert (last.busy_ns[0] - first.busy_ns[0]) / ((t1 - t0) * 1e9) <= 0.5 * 1.1


def test_without_a_share_launches_are_only_counted(kit: Kit, state: Path, tmp_path: Path) -> None:
    region = tmp_path / "c"
    started, done = kit.run("launch", "0.3", "0", env=kit.env(state=state, region=region))
    assert started == {"started": True}
    with open_region(region) as r:
        dev = r.device(0)
        assert dev.throttled_ns == dev.charged_ns == 0
        assert dev.launches == done["launches"]  # flushed at exit


def test_the_fixed_cost_of_a_timed_launch_is_not_charged(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    """FGPU_LAUNCH_FLOOR_NS comes off every sample: a loop of short kernels is charged
    what its kernels take, so a launch-bound process is not paced by its launch cadence."""
    kernel_ns, floor_ns = 400_000, 300_000
    charged: dict[int, float] = {}
    for floor in (0, floor_ns):
        region = tmp_path / f"floor{floor}"
        env = kit.env(state=state, region=region, sm_share="0.5", FGPU_LAUNCH_FLOOR_NS=str(floor))
        kit.run("launch", "0.6", str(kernel_ns), env=env)
        with open_region(region) as r:
            dev = r.device(0)
            assert dev.launches > 0
            charged[floor] = dev.charged_ns / dev.launches
    # Every sample loses the floor; a sample is never charged less than nothing.
    assert charged[0] >= kernel_ns
    assert charged[floor_ns] <= charged[0] - floor_ns / 2, charged
    assert charged[floor_ns] >= 0


@pytest.mark.parametrize(
    ("null_launch", "fake_env"),
    [
        ("empty kernel", {"FAKE_CUDA_EMPTY_KERNEL_NS": "300000"}),
        ("memset", {"FAKE_CUDA_NO_JIT": "1", "FAKE_CUDA_MEMSET_NS": "300000"}),
    ],
)
def test_the_floor_is_learnt_from_null_launches(
    kit: Kit, state: Path, tmp_path: Path, null_launch: str, fake_env: dict[str, str]
) -> None:
    """FGPU_LAUNCH_FLOOR_NS=auto times a null launch now and then and takes the least of
    those times off every sample: an empty kernel the shim loads, or a 1-byte memset
    where the driver cannot load it. Here only that null launch holds the fake device
    (300 us, as a fixed floor of that size would), so the charge drops as with the
    fixed floor only if the shim times the right one."""
    kernel_ns, null_ns = 400_000, 300_000
    charged: dict[str, float] = {}
    for floor in ("0", "auto"):
        region = tmp_path / f"floor-{floor}"
        env = kit.env(
            state=state, region=region, sm_share="0.5", FGPU_LAUNCH_FLOOR_NS=floor, **fake_env
        )
        kit.run("launch", "0.6", str(kernel_ns), env=env)
        with open_region(region) as r:
            dev = r.device(0)
            charged[floor] = dev.charged_ns / dev.launches
    assert charged["0"] >= kernel_ns
    assert charged["auto"] <= charged["0"] - null_ns / 2, (null_launch, charged)
