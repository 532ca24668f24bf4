"""Heartbeats, lost agents, and an agent coming back: on the in-memory log and bus.

Time for liveness is the scheduler's ``monotonic``, a fake moved by the test; the watch
loop ticks every few milliseconds of real time, and the test waits for the ticks it needs.
"""

import functools
from collections.abc import Callable
from contextlib import aclosing
from typing import TypeVar

import anyio
import pytest

from events import AgentLost, AgentRegistered, Slots
from services.actors.agent import AgentActor
from services.actors.liveness import send_heartbeats, watch_heartbeats
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.state import ClusterState
from services.testing import MemoryBus, MemoryLog
from tests.cluster import GIB, agent_config

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


async def test_a_silent_agent_is_lost_gets_nothing_new_and_registers_again() -> None:
    log, bus, clock, mono = MemoryLog(), MemoryBus(), SystemClock(), FakeMonotonic()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, monotonic=mono)
    watcher = CountingWatcher(scheduler)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(scheduler.run)
        await tg.start(functools.partial(watch_heartbeats, bus, watcher, period_s=TICK_S))
        await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config("chatty")).run)
        await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config("quiet")).run)
        await until(client, lambda s: {"quiet", "chatty"} <= set(s.agents))

        mono.now += 10
        await bus.beat("chatty")
        await watcher.heard_at("chatty", mono.now)
        await watcher.wait_checks(3)  # 10 s of silence: not yet lost
        assert not any(a.lost for a in (await client.state()).agents.values())

        mono.now += 10
        seq, declared = await next_of(log, AgentLost)
        assert declared.agent_id == "quiet" and "no heartbeat for 20 s" in declared.reason
        # The lost agent, alive after all, hears of it on the log and registers again.
        _, again = await next_of(log, AgentRegistered, after=seq)
        assert again.agent_id == "quiet"
        s = await client.state()
        assert lost(s, "quiet") is False and lost(s, "chatty") is False
        tg.cancel_scope.cancel()


async def test_nothing_is_placed_on_a_lost_agent() -> None:
    log, bus, clock, mono = MemoryLog(), MemoryBus(), SystemClock(), FakeMonotonic()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, monotonic=mono)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(scheduler.run)
        await tg.start(functools.partial(watch_heartbeats, bus, scheduler, period_s=TICK_S))
        # An agent that registers and then dies: it never hears it was declared lost.
        await AgentActor(log, DummyRuntime(), clock, agent_config("gone")).register()
        await until(client, lambda s: "gone" in s.agents)
        mono.now += 20
        await until(client, lambda s: lost(s, "gone"))
        ids = await client.create(
            image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=50)
        )
        s = await until(
            client, lambda s: ids[0] in s.sessions and s.sessions[ids[0]].waiting is not None
        )
        assert s.sessions[ids[0]].status == "PENDING" and s.sessions[ids[0]].agent_id is None
        tg.cancel_scope.cancel()


async def test_an_agent_that_beats_is_never_lost() -> None:
    """send_heartbeats keeps an agent alive however long the scheduler watches."""
    log, bus, clock, mono = MemoryLog(), MemoryBus(), SystemClock(), FakeMonotonic()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, monotonic=mono)
    watcher = CountingWatcher(scheduler)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(scheduler.run)
        await tg.start(functools.partial(watch_heartbeats, bus, watcher, period_s=TICK_S))
        await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config("steady")).run)
        tg.start_soon(functools.partial(send_heartbeats, bus, ["steady"], period_s=TICK_S))
        await until(client, lambda s: "steady" in s.agents)
        for _ in range(5):  # 50 s in steps of 10, each heard before the next
            mono.now += 10
            await watcher.heard_at("steady", mono.now)
            await watcher.wait_checks(2)
        assert not (await client.state()).agents["steady"].lost
        assert bus.beats_sent >= 5
        tg.cancel_scope.cancel()
