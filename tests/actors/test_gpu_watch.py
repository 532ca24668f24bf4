"""The agent holds each session to its slice by the driver's own figures (issue 19, item 2).

A process can skip the shim (the real driver loaded by path) or lie in the region's
counters; what the driver counts per process (NVML) it cannot change. Here the driver is
``FakeGpuWatch`` (what NVML would list) and the cgroups are ``FakeContainers``; both pass
the contract of the real adapters (tests/adapters/test_gpu_watch_adapters.py). Real actors over the
in-memory log and the dummy runtime; the watch is asked to look by the test (its interval
is an hour), so nothing depends on how fast this machine is.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import anyio
import pytest

from events import AnyEvent, GpuOverSlice, GpuShareExceeded, Malformed, SessionTerminated, Slots
from projections.story import story
from services.actors.agent import AgentActor
from services.actors.agent_watch import GpuWatch
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_watch import (
    MIB,
    Held,
    ShareWatch,
    Used,
    WatchSettings,
    held_by_session,
    over_slice,
    used_by_session,
)
from services.testing import FakeContainers, FakeGpuWatch
from tests.support.cluster import GIB, agent_config, statuses

pytestmark = pytest.mark.anyio

IMAGE = "fgpu/busybox:latest"
QUARTER = Slots(cpu=100, mem=GIB, fgpu=50)  # of a 16 GiB mock GPU at 2 fGPU each: 4 GiB
LIMIT = 4 * GIB
SETTINGS = WatchSettings(interval_s=3600.0)  # looks are the test's to ask for
ONE = SETTINGS.tolerance(1)  # what one process may hold beyond the slice


# ---- the judgement (pure) -----------------------------------------------------------------


def test_the_tolerance_is_slack_and_a_context_per_process() -> None:
    s = WatchSettings()
    assert (s.slack, s.per_process) == (256 * MIB, 512 * MIB)
    assert [s.tolerance(n) for n in (0, 1, 2)] == [256 * MIB, 768 * MIB, 1280 * MIB]


def test_a_session_is_over_its_slice_only_past_the_tolerance() -> None:
    limits = {("s1", 0): LIMIT}
    at = Held(session_id="s1", gpu_index=0, bytes=LIMIT + ONE, pids=(7,))
    past = replace(at, bytes=LIMIT + ONE + 1)
    assert over_slice([at], limits, SETTINGS) == []
    (over,) = over_slice([past], limits, SETTINGS)
    assert (over.mem_limit, over.tolerance) == (LIMIT, ONE)
    # A GPU it was given none of: anything beyond the tolerance is over.
    (elsewhere,) = over_slice([replace(past, gpu_index=1, bytes=ONE + 1)], limits, SETTINGS)
    assert elsewhere.mem_limit == 0


def test_each_sessions_processes_are_summed_per_gpu_and_strangers_ignored() -> None:
    listed = [(0, 7, GIB), (0, 8, 2 * GIB), (1, 7, GIB), (0, 99, 60 * GIB)]
    held = held_by_session(listed, {7: "s1", 8: "s1"})  # pid 99: the host's, or another's
    assert held == [
        Held(session_id="s1", gpu_index=0, bytes=3 * GIB, pids=(7, 8)),
        Held(session_id="s1", gpu_index=1, bytes=GIB, pids=(7,)),
    ]


def test_sm_use_averages_a_process_and_sums_a_session() -> None:
    samples = [(0, 7, 40), (0, 7, 60), (0, 8, 30), (0, 99, 100)]
    assert used_by_session(samples, {7: "s1", 8: "s1"}) == {
        ("s1", 0): Used(ppm=800_000, pids=(7, 8))
    }


def test_sm_use_over_the_share_is_reported_once_a_whole_window_shows_it() -> None:
    watch = ShareWatch(WatchSettings(share_window_s=30.0, share_margin_ppm=100_000))
    shares = {("s1", 0): 250_000, ("s2", 0): 1_000_000}
    busy = {("s1", 0): Used(ppm=600_000, pids=(7,)), ("s2", 0): Used(ppm=1_000_000, pids=(9,))}
    seen = [watch.look(float(t), shares, busy) for t in range(0, 30, 5)]
    assert seen == [[]] * 6  # not a whole window yet
    (report,) = watch.look(30.0, shares, busy)  # s2 has the whole device: nothing to exceed
    assert (report.session_id, report.used_ppm, report.pids) == ("s1", 600_000, (7,))
    # A new window begins after a report. At the share and its margin exactly (or idle):
    # nothing, however long.
    near = {("s1", 0): Used(ppm=350_000, pids=(7,))}
    assert [watch.look(float(t), shares, near) for t in range(35, 200, 5)] == [[]] * 33
    assert watch.look(200.0, shares, {}) == []


# ---- the watch in an agent ----------------------------------------------------------------


@dataclass
class Cluster:
    log: MemoryLog
    client: Client
    agent: AgentActor
    driver: FakeGpuWatch
    containers: FakeContainers
    removed: list[tuple[str, float]]  # (container id, grace) of each removal


class RecordingRuntime(DummyRuntime):
    def __init__(self, removed: list[tuple[str, float]]) -> None:
        super().__init__()
        self.removed = removed

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        self.removed.append((container_id, stop_timeout_s))
        await super().remove(container_id, stop_timeout_s=stop_timeout_s)


@asynccontextmanager
async def cluster(*, watched: bool = True) -> AsyncIterator[Cluster]:
    """Quota, scheduler and an agent whose watch (``watched``: else none) reads ``driver``."""
    log, clock = MemoryLog(), SystemClock()
    removed: list[tuple[str, float]] = []
    driver, containers = FakeGpuWatch(), FakeContainers()
    config = replace(agent_config("watcher"), watch=SETTINGS)
    agent = AgentActor(
        log,
        RecordingRuntime(removed),
        clock,
        config,
        gpu_watch=driver if watched else None,
        containers=containers,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(agent.run)
        yield Cluster(log, Client(log, clock, "alice"), agent, driver, containers, removed)
        tg.cancel_scope.cancel()


async def running(c: Cluster, *, pid: int) -> tuple[str, str]:
    """A new session, RUNNING, with ``pid`` one of its container's processes."""
    (sid,) = await c.client.create(image=IMAGE, slots=QUARTER, command=["sleep", "infinity"])
    with anyio.fail_after(10):
        s = await c.client.wait_until(lambda s: statuses(s, [sid]) == ["RUNNING"])
    container = s.sessions[sid].container_id
    assert container is not None
    c.containers.of[pid] = (container,)
    return sid, container


async def logged(log: MemoryLog) -> list[tuple[int, AnyEvent]]:
    """Every event on the log now, with its sequence."""
    return [
        (r.seq, r.event)
        async for batch in log.read()
        for r in batch
        if not isinstance(r.event, Malformed)
    ]


def ended(sid: str) -> Callable[[ClusterState], bool]:
    return lambda s: statuses(s, [sid])[0] == "TERMINATED"


async def test_a_process_that_bypasses_the_shim_gets_its_session_stopped() -> None:
    async with cluster() as c:
        sid, container = await running(c, pid=4242)
        # What the shim never saw: the real driver, loaded by path, holds 5 GiB + more.
        c.driver.hold(0, 4242, LIMIT + ONE + 1)
        c.driver.hold(0, 777, 60 * GIB)  # a process of no session of ours: not judged
        assert c.agent.watch is not None
        await c.agent.watch.look()
        with anyio.fail_after(10):
            s = await c.client.wait_until(ended(sid))
    v = s.sessions[sid]
    assert (v.reason or "").startswith("stopped by the agent: its processes held 4.75G")
    assert "over its slice of 4G (+768M allowed)" in (v.reason or "")
    assert (container, 0.0) in c.removed  # killed, no grace
    events = [(seq, e) for seq, e in await logged(c.log) if getattr(e, "session_id", "") == sid]
    (over,) = [e for _, e in events if isinstance(e, GpuOverSlice)]
    assert (over.gpu_index, over.held, over.mem_limit, over.tolerance, over.pids) == (
        0,
        LIMIT + ONE + 1,
        LIMIT,
        ONE,
        (4242,),
    )
    assert [e for _, e in events if isinstance(e, SessionTerminated)][-1].reason == v.reason
    told = [line.text for line in story(events, set())]
    assert "watcher stopped it: its processes (pid 4242) held 4.75G on gpu0, over its slice of" in (
        "\n".join(told)
    )


async def test_at_the_tolerance_a_session_runs_on_one_byte_past_it_is_stopped() -> None:
    async with cluster() as c:
        sid, _ = await running(c, pid=4242)
        watch = c.agent.watch
        assert watch is not None
        c.driver.hold(0, 4242, LIMIT + ONE)
        await watch.look()
        assert not c.agent.local.supervised[sid].stop_requested
        assert not [e for _, e in await logged(c.log) if isinstance(e, GpuOverSlice)]
        c.driver.hold(0, 4242, LIMIT + ONE + 1)
        await watch.look()
        assert c.agent.local.supervised[sid].stop_requested
        with anyio.fail_after(10):
            await c.client.wait_until(ended(sid))
        # Looked at again while it ends: one stop, one event.
        await watch.look()
    assert len([e for _, e in await logged(c.log) if isinstance(e, GpuOverSlice)]) == 1


async def test_a_driver_that_cannot_be_asked_stops_nothing_and_the_next_look_acts() -> None:
    async with cluster() as c:
        sid, _ = await running(c, pid=4242)
        watch = c.agent.watch
        assert watch is not None
        c.driver.hold(0, 4242, 16 * GIB)
        c.driver.unavailable = "GPU is lost"
        await watch.look()
        assert not c.agent.local.supervised[sid].stop_requested
        c.driver.unavailable = None
        await watch.look()
        with anyio.fail_after(10):
            await c.client.wait_until(ended(sid))


async def test_sustained_sm_use_over_the_share_is_recorded_and_the_session_runs_on() -> None:
    now = 0.0
    stopped: list[str] = []
    async with cluster(watched=False) as c:  # the test's watch, on a clock of its own
        sid, _ = await running(c, pid=4242)
        watch = GpuWatch(
            c.agent.config,
            c.driver,
            c.containers,
            state=lambda: c.agent.state,
            running=lambda: {sid: c.containers.of[4242][0]},
            stop=lambda session_id, reason: stopped.append(session_id),
            publish=c.agent.meter.publish_measured,
            now=lambda: now,
        )
        window = SETTINGS.share_window_s
        while now <= window:
            c.driver.sample(0, 4242, 90)  # 90% of the SMs on a 25% share
            await watch.look()
            exceeded = [e for _, e in await logged(c.log) if isinstance(e, GpuShareExceeded)]
            assert len(exceeded) == (1 if now >= window else 0), now
            now += 5.0
        assert statuses(c.agent.state, [sid]) == ["RUNNING"]
    assert stopped == []
    (e,) = exceeded
    assert (e.session_id, e.gpu_index, e.sm_share_ppm, e.used_ppm, e.pids) == (
        sid,
        0,
        250_000,
        900_000,
        (4242,),
    )
    (line,) = story([(1, e)], set())
    assert line.text == (
        "its processes (pid 4242) kept gpu0's SMs busy 90% of 30 s, over its share of 25%"
    )
