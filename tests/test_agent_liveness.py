"""Heartbeats, lost agents, and an agent coming back."""

from collections.abc import Callable

import anyio
import pytest

from events import Slots
from services.actors.agent import AgentActor
from services.actors.common import SystemClock
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.client import Client
from services.domain.state import ClusterState
from tests.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio


async def tick_until(
    scheduler: SchedulerActor, client: Client, done: Callable[[ClusterState], bool]
) -> ClusterState:
    """Run the scheduler's liveness check the way its ticker does, until ``done``."""
    with anyio.fail_after(10):
        while True:
            await scheduler.check_liveness()
            s = await client.state()
            if done(s):
                return s
            await anyio.sleep(0.05)  # the ticker's period, shortened


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_silent_agent_is_lost_gets_nothing_new_and_registers_again(
    log: JetStreamLog,
) -> None:
    clock = SystemClock()
    mono = FakeMonotonic()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, monotonic=mono)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(scheduler.run)
        quiet = AgentActor(log, DummyRuntime(), clock, agent_config("quiet"))
        await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config("chatty")).run)
        await tg.start(quiet.run)
        with anyio.fail_after(10):
            await client.wait_until(lambda s: {"quiet", "chatty"} <= set(s.agents))
        mono.now += 10
        scheduler.heard("chatty")
        await scheduler.check_liveness()  # 10 s of silence: not yet lost
        assert not any(a.lost for a in (await client.state()).agents.values())
        mono.now += 10
        scheduler.heard("chatty")
        s = await tick_until(scheduler, client, lambda s: s.agents["quiet"].lost)
        assert not s.agents["chatty"].lost
        # The lost agent, alive after all, hears of it on the log and registers again.
        with anyio.fail_after(10):
            s = await client.wait_until(lambda s: not s.agents["quiet"].lost, s)
        tg.cancel_scope.cancel()


async def test_nothing_is_placed_on_a_lost_agent(log: JetStreamLog) -> None:
    clock = SystemClock()
    mono = FakeMonotonic()
    scheduler = SchedulerActor(log, clock, lost_after_s=15, monotonic=mono)
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(scheduler.run)
        # An agent that registers and then dies: it never hears it was declared lost.
        gone = AgentActor(log, DummyRuntime(), clock, agent_config("gone"))
        await gone.register()
        with anyio.fail_after(10):
            await client.wait_until(lambda s: "gone" in s.agents)
        mono.now += 20
        await tick_until(scheduler, client, lambda s: s.agents["gone"].lost)
        ids = await client.create(
            image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=50)
        )
        with anyio.fail_after(10):
            s = await client.wait_until(
                lambda s: (
                    s.sessions.get(ids[0]) is not None and s.sessions[ids[0]].waiting is not None
                )
            )
        assert s.sessions[ids[0]].status == "PENDING" and s.sessions[ids[0]].agent_id is None
        tg.cancel_scope.cancel()
