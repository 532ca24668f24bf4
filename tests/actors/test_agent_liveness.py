"""Heartbeats, lost agents, and an agent coming back: on the in-memory log and bus.

Time for liveness is the scheduler's ``monotonic``, a fake moved by the test; the watch
loop ticks every few milliseconds of real time, and the test waits for the ticks it needs.
"""

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import anyio
import pytest
from anyio.abc import TaskGroup

from events import (
    AgentFenced,
    AgentHeard,
    AgentLost,
    AgentRegistered,
    SessionLost,
    SessionScheduled,
    SessionUnplaced,
    Slots,
)
from services.actors.agent import AgentActor
from services.actors.liveness import send_heartbeats, watch_heartbeats
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.adapters.virtual_clock import VirtualClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.ports import Clock
from services.testing import MemoryBus
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio
TICK_S = 0.005
E = TypeVar("E")


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingWatcher:
    """The scheduler, with its liveness checks counted, so a test can wait for some."""

    def __init__(self, scheduler: SchedulerActor) -> None:
        self.scheduler = scheduler
        self.checks = 0
        self._checked = anyio.Event()
        self._beat = anyio.Event()

    def heard(self, agent_id: str) -> None:
        self.scheduler.heard(agent_id)
        self._beat.set()
        self._beat = anyio.Event()

    async def heard_at(self, agent_id: str, when: float) -> None:
        """Wait until the scheduler has heard ``agent_id`` at the fake time ``when``."""
        with anyio.fail_after(10):
            while self.scheduler.last_heard.get(agent_id) != when:
                await self._beat.wait()

    async def check_liveness(self) -> None:
        await self.scheduler.check_liveness()
        self.checks += 1
        self._checked.set()
        self._checked = anyio.Event()

    async def wait_checks(self, n: int) -> None:
        with anyio.fail_after(10):
            target = self.checks + n
            while self.checks < target:
                await self._checked.wait()


async def until(client: Client, done: Callable[[ClusterState], bool]) -> ClusterState:
    with anyio.fail_after(10):
        return await client.wait_until(done)


def lost(s: ClusterState, agent_id: str) -> bool | None:
    """Whether the agent is lost; None while the fold has not met it yet."""
    a = s.agents.get(agent_id)
    return None if a is None else a.lost


async def next_of(log: MemoryLog, kind: type[E], *, after: int = 0) -> tuple[int, E]:
    """The first event of ``kind`` on the log after ``after``, once there is one."""
    with anyio.fail_after(10):
        async with aclosing(log.tail(after)) as batches:
            async for batch in batches:
                for r in batch:
                    if isinstance(r.event, kind):
                        return r.seq, r.event
    raise AssertionError("the log ended")


@dataclass
class Watched:
    """A scheduler whose liveness checks run on a fake clock, watching heartbeats on an
    in-memory bus, over an in-memory log; the quota actor beside it."""

    log: MemoryLog
    bus: MemoryBus
    mono: FakeMonotonic
    scheduler: SchedulerActor
    watcher: CountingWatcher
    client: Client
    tg: TaskGroup

    async def agent(self, agent_id: str) -> AgentActor:
        actor = AgentActor(self.log, DummyRuntime(), SystemClock(), agent_config(agent_id))
        await self.tg.start(actor.run)
        return actor


@asynccontextmanager
async def watched(
    log: MemoryLog | None = None, clock: Clock | None = None
) -> AsyncIterator[Watched]:
    """The scheduler and quota on ``log`` (a new one if None), the scheduler's events
    stamped by ``clock``."""
    log, bus, mono = log or MemoryLog(), MemoryBus(), FakeMonotonic()
    clock = clock or SystemClock()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, lost_grace_s=600, monotonic=mono)
    watcher = CountingWatcher(scheduler)
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(scheduler.run)
        await tg.start(functools.partial(watch_heartbeats, bus, watcher, period_s=TICK_S))
        yield Watched(log, bus, mono, scheduler, watcher, Client(log, clock, "alice"), tg)
        tg.cancel_scope.cancel()


async def test_a_silent_agent_is_lost_gets_nothing_new_and_registers_again() -> None:
    async with watched() as w:
        await w.agent("chatty")
        await w.agent("quiet")
        await until(w.client, lambda s: {"quiet", "chatty"} <= set(s.agents))

        w.mono.now += 10
        await w.bus.beat("chatty")
        await w.watcher.heard_at("chatty", w.mono.now)
        await w.watcher.wait_checks(3)  # 10 s of silence: not yet lost
        assert not any(a.lost for a in (await w.client.state()).agents.values())

        w.mono.now += 10
        seq, declared = await next_of(w.log, AgentLost)
        assert declared.agent_id == "quiet" and "no heartbeat for 20 s" in declared.reason
        # The lost agent, alive after all, hears of it on the log and registers again.
        _, again = await next_of(w.log, AgentRegistered, after=seq)
        assert again.agent_id == "quiet"
        s = await w.client.state()
        assert lost(s, "quiet") is False and lost(s, "chatty") is False


async def test_nothing_is_placed_on_a_lost_agent() -> None:
    async with watched() as w:
        # An agent that registers and then dies: it never hears it was declared lost.
        clock = SystemClock()
        await AgentActor(w.log, DummyRuntime(), clock, agent_config("gone")).register()
        await until(w.client, lambda s: "gone" in s.agents)
        w.mono.now += 20
        await until(w.client, lambda s: lost(s, "gone"))
        ids = await w.client.create(
            image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=50)
        )
        s = await until(
            w.client, lambda s: ids[0] in s.sessions and s.sessions[ids[0]].waiting is not None
        )
        assert s.sessions[ids[0]].status == "PENDING" and s.sessions[ids[0]].agent_id is None


async def test_an_agent_that_beats_is_never_lost() -> None:
    """send_heartbeats keeps an agent alive however long the scheduler watches."""
    async with watched() as w:
        await w.agent("steady")
        w.tg.start_soon(functools.partial(send_heartbeats, w.bus, ["steady"], period_s=TICK_S))
        await until(w.client, lambda s: "steady" in s.agents)
        for _ in range(5):  # 50 s in steps of 10, each heard before the next
            w.mono.now += 10
            await w.watcher.heard_at("steady", w.mono.now)
            await w.watcher.wait_checks(2)
        assert not (await w.client.state()).agents["steady"].lost
        assert w.bus.beats_sent >= 5


SLOTS = Slots(cpu=100, mem=GIB, fgpu=50)


def status(s: ClusterState, session_id: str) -> str | None:
    v = s.sessions.get(session_id)
    return None if v is None else v.status.value


async def test_after_a_restart_an_agent_gone_long_ago_gets_nothing() -> None:
    """Registered on the log, never heard from since the scheduler started: nothing is
    placed there, not even before it could be declared lost."""
    log = MemoryLog()
    await AgentActor(log, DummyRuntime(), SystemClock(), agent_config("ghost")).register()
    async with watched(log) as w:
        [sid] = await w.client.create(image="fgpu/busybox:latest", slots=SLOTS)
        s = await until(w.client, lambda s: sid in s.sessions and s.sessions[sid].waiting)
        assert status(s, sid) == "PENDING" and not s.agents["ghost"].lost
        await w.agent("fresh")  # registers after the scheduler started: heard
        s = await until(w.client, lambda s: status(s, sid) == "RUNNING")
        assert s.sessions[sid].agent_id == "fresh"
        placed = [r.event for b in [x async for x in log.read(0)] for r in b]
        assert [e.agent_id for e in placed if isinstance(e, SessionScheduled)] == ["fresh"]


async def test_an_agent_known_from_before_the_start_gets_sessions_once_heard() -> None:
    log = MemoryLog()
    await AgentActor(log, DummyRuntime(), SystemClock(), agent_config("old")).register()
    async with watched(log) as w:
        [sid] = await w.client.create(image="fgpu/busybox:latest", slots=SLOTS)
        await until(w.client, lambda s: sid in s.sessions and s.sessions[sid].waiting)
        await w.bus.beat("old")  # alive after all: said on the log, and placed there
        _, heard = await next_of(w.log, AgentHeard)
        assert heard.agent_id == "old"
        s = await until(w.client, lambda s: status(s, sid) == "SCHEDULED")
        assert s.sessions[sid].agent_id == "old"


async def test_a_lost_agents_sessions_are_placed_again_or_end_after_the_grace() -> None:
    clock = VirtualClock()
    async with watched(clock=clock) as w:
        rt = DummyRuntime()  # the node's engine: it outlives the agent process
        with anyio.CancelScope() as agent_scope:
            async with anyio.create_task_group() as agent_tg:
                await agent_tg.start(AgentActor(w.log, rt, SystemClock(), agent_config("a1")).run)
                [ran] = await w.client.create(image="fgpu/busybox:latest", slots=SLOTS)
                await until(w.client, lambda s: status(s, ran) == "RUNNING")
                agent_scope.cancel()  # the agent dies; its container runs on
        [waits] = await w.client.create(image="fgpu/busybox:latest", slots=SLOTS)
        await until(w.client, lambda s: status(s, waits) == "SCHEDULED")

        w.mono.now += 20  # silent: lost; what it never started is placed again
        _, declared = await next_of(w.log, AgentLost)
        _, back = await next_of(w.log, SessionUnplaced)
        assert (back.session_id, back.agent_id) == (waits, "a1")
        assert back.reason == "agent a1 was lost before it started the session"
        s = await until(w.client, lambda s: status(s, waits) == "PENDING")
        assert status(s, ran) == "RUNNING"  # within the grace: it may come back
        await w.agent("a2")
        s = await until(w.client, lambda s: status(s, waits) == "RUNNING")
        assert s.sessions[waits].agent_id == "a2"

        clock.at = declared.at + timedelta(seconds=601)  # the grace is over
        _, ended = await next_of(w.log, SessionLost)
        assert ended.session_id == ran and ended.reason == "agent lost: a1 not heard from for 600 s"
        s = await until(w.client, lambda s: status(s, ran) == "ERROR")
        assert s.agents["a1"].sessions == {} and s.agents["a1"].allocated == Slots()
        assert len(await rt.list({})) == 1  # its container still runs on the node

        # Back at last: it removes what ended meanwhile, and says so.
        await w.tg.start(AgentActor(w.log, rt, SystemClock(), agent_config("a1")).run)
        _, fenced = await next_of(w.log, AgentFenced)
        assert (fenced.agent_id, fenced.session_ids) == ("a1", (ran,))
        assert await rt.list({}) == []
        s = await until(w.client, lambda s: lost(s, "a1") is False)
        assert status(s, ran) == "ERROR"
