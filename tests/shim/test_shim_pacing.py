"""The agent's pace files: a GPU that loses time switching between containers still
splits what it delivers by their shares.

The fake GPU here loses FAKE_CUDA_SWITCH_NS each time it passes from one container's
kernel to the other's, outside both kernels' events, as a time-sliced GPU loses
switching contexts. Each container is held to its share of GPU time; the one with the
small share keeps all of it while the other gets only what is left, unless a
``GpuPacer`` scales both shares by what the card delivers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from gpu_shim import open_region
from gpu_shim.pace import PaceFile, pace_path
from services.adapters.gpu_pacer import GpuPacer, PacedContainer
from services.domain.gpu_pacing import Counters
from tests.support.shim_kit import FakeDevice, Kit, read_line, running

pytestmark = pytest.mark.solo  # shares of the machine's time: alone (scripts/test)

KERNEL_NS = 2_000_000
SWITCH_NS = 400_000
RUN_S = 5.0
WINDOW = (2.0, 4.5)  # seconds after both containers started: the pacer has settled
TICK_S = 0.25


def _counters(region: Path) -> Callable[[], Counters | None]:
    def read() -> Counters | None:
        with open_region(region) as r:
            d = r.device(0)
        return Counters(
            share=d.sm_share_ppm / 1e6, charged_ns=d.charged_ns, slept_ns=d.throttled_ns
        )

    return read


def _launch(idle_ns: str) -> list[str]:
    """The harness's greedy loop of kernels, idling idle_ns after each unless "0"."""
    return ["launch", str(RUN_S), str(KERNEL_NS), *(["idle", idle_ns] if idle_ns != "0" else [])]


def _parts(busy: list[int]) -> list[float]:
    return [b / sum(busy) for b in busy]


@contextmanager
def _pacing(state: Path, regions: list[Path]) -> Iterator[GpuPacer]:
    """A pacer ticking in a thread; the GPU's busy part is the fake device's held time."""
    last = [time.monotonic(), FakeDevice.read(state).held_ns]

    def gpu_busy() -> float:
        now, held = time.monotonic(), FakeDevice.read(state).held_ns
        part = (held - last[1]) / max(1.0, (now - last[0]) * 1e9)
        last[:] = [now, held]
        return part

    pacer = GpuPacer([PacedContainer(r, 0, _counters(r)) for r in regions], gpu_busy)
    stop = threading.Event()
    th = threading.Thread(
        target=lambda: [pacer.tick() for _ in iter(lambda: stop.wait(TICK_S), True)]
    )
    th.start()
    try:
        yield pacer
    finally:
        stop.set()
        th.join()
        pacer.close()


def _pair(kit: Kit, state: Path, tmp: Path, shares: tuple[float, float], paced: bool,
          duty: tuple[str, str] = ("0", "0")) -> tuple[list[float], list[float]]:  # fmt: skip
    """Each container's part of the fake GPU's busy time over WINDOW, and of the
    window's wall time. ``duty``: each one's idle time after every kernel (ns)."""
    regions = [tmp / f"{'paced' if paced else 'plain'}{i}" for i in range(2)]
    envs = [
        kit.env(
            state=state, region=r, sm_share=str(s), tenant=i, FAKE_CUDA_SWITCH_NS=str(SWITCH_NS)
        )
        for i, (r, s) in enumerate(zip(regions, shares, strict=True))
    ]
    with ExitStack() as stack:
        if paced:  # the agent creates the pace files before the containers start
            for r in regions:
                PaceFile.create(r).close()
        procs = [
            stack.enter_context(running(kit, *_launch(idle), env=e))
            for e, idle in zip(envs, duty, strict=True)
        ]
        assert [read_line(p) for p in procs] == [{"started": True}] * 2
        if paced:
            stack.enter_context(_pacing(state, regions))
        start = time.monotonic()
        time.sleep(WINDOW[0])
        t0, first = time.monotonic(), FakeDevice.read(state)
        time.sleep(WINDOW[1] - (time.monotonic() - start))
        t1, last = time.monotonic(), FakeDevice.read(state)
        for p in procs:
            read_line(p)
    busy = [last.busy_ns[i] - first.busy_ns[i] for i in range(2)]
    return _parts(busy), [b / ((t1 - t0) * 1e9) for b in busy]


def test_a_pair_splits_what_the_gpu_delivers_by_share_when_paced(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    shares = (0.25, 0.75)
    plain, _ = _pair(kit, state, tmp_path, shares, paced=False)
    paced, _ = _pair(kit, state, tmp_path, shares, paced=True)
    # Unpaced, the small share keeps its whole share while switching eats the other's.
    assert plain[0] > 0.25 * 1.1, plain
    assert abs(paced[0] - 0.25) <= 0.25 * 0.1, (paced, plain)


def test_a_container_that_does_not_compete_leaves_the_others_their_shares(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    """The 0.75 container wants about a third of the GPU: the GPU is not saturated,
    so the pacer leaves the 0.25 one its whole share."""
    idle = str(4 * KERNEL_NS)
    _, of_wall = _pair(kit, state, tmp_path, (0.25, 0.75), paced=True, duty=("0", idle))
    assert of_wall[0] >= 0.25 * 0.9, of_wall


def test_the_shim_scales_its_share_by_the_pace_file_and_ignores_a_foreign_one(
    kit: Kit, state: Path, tmp_path: Path
) -> None:
    figures = {}
    for name, scale, corrupt in (("halved", 0.5, False), ("foreign", 0.5, True)):
        region = tmp_path / name
        with PaceFile.create(region) as pace:
            pace.set_scale(0, scale)
        if corrupt:  # not a pace file: the shim must not trust its scale
            with pace_path(region).open("r+b") as f:
                f.write(b"XXXX")
        env = kit.env(state=state, region=region, sm_share="0.5")
        with running(kit, "launch", "2", str(KERNEL_NS), env=env) as p:
            assert read_line(p) == {"started": True}
            read_line(p)
        with open_region(region) as r:
            dev = r.device(0)
        figures[name] = dev.charged_ns / max(1, dev.charged_ns + dev.throttled_ns)
    # Charged over charged plus slept: the part of its time the container ran.
    assert figures["halved"] <= 0.25 * 1.2, figures
    assert figures["foreign"] >= 0.5 * 0.8, figures
