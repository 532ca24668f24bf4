"""An agent never destroys what it cannot account for: started on another log (a new
store, a stream made anew and empty) it keeps the containers of the log they were made
for, untouched, and says so; on its own log it still removes what ended while it was
down. The engine outlives the agents here as Docker does: one runtime for both."""

from collections.abc import Callable

import anyio
import pytest
import structlog

from events import Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import LABEL_AGENT, LABEL_LOG, LABEL_SESSION
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio
SLOTS = Slots(cpu=100, mem=GIB, fgpu=50)


def _running(ids: list[str]) -> Callable[[ClusterState], bool]:
    return lambda s: all(
        i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING for i in ids
    )


async def _run_one(log: MemoryLog, rt: DummyRuntime, *, until_running: int) -> list[str]:
    """Quota, scheduler and agent a1 on ``log`` until ``until_running`` new sessions run;
    their ids. The actors stop after; the containers stay, as Docker's would."""
    clock = SystemClock()
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, rt, clock, agent_config("a1")).run)
        ids = await client.create(image="fgpu/busybox:latest", slots=SLOTS, count=until_running)
        with anyio.fail_after(20):
            await client.wait_until(_running(ids))
        tg.cancel_scope.cancel()
    return ids


async def test_an_agent_on_another_log_keeps_the_containers_it_cannot_account_for() -> None:
    rt = DummyRuntime()
    first, second = MemoryLog(), MemoryLog()
    await _run_one(first, rt, until_running=2)
    made = {c.id for c in await rt.list({LABEL_AGENT: "a1"})}
    assert {c.labels[LABEL_LOG] for c in await rt.list({LABEL_AGENT: "a1"})} == {
        await first.identity()
    }
    with structlog.testing.capture_logs() as logged:
        # On a new, empty log: a session of its own runs there (so the agent has taken
        # stock and reacted), and the first log's containers are all still there.
        [new] = await _run_one(second, rt, until_running=1)
    now = {c.id: c for c in await rt.list({LABEL_AGENT: "a1"})}
    assert made < set(now)
    assert now.keys() - made == {c.id for c in now.values() if c.labels[LABEL_SESSION] == new}
    [said] = [e for e in logged if e["event"] == "agent.containers_of_another_log"]
    assert said["log_level"] == "error" and set(said["containers"]) == {i[:12] for i in made}


async def test_on_its_own_log_an_agent_still_removes_what_ended_while_it_was_down() -> None:
    rt = DummyRuntime()
    log = MemoryLog()
    clock = SystemClock()
    [gone, kept] = await _run_one(log, rt, until_running=2)
    await Client(log, clock, "alice").destroy(gone)  # nobody runs a1 now
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, rt, clock, agent_config("a1")).run)
        with anyio.fail_after(20):
            await Client(log, clock, "alice").wait_until(
                lambda s: gone in s.sessions and s.sessions[gone].status is SessionStatus.TERMINATED
            )
        # Removed before it was reported ended; the other re-adopted, untouched.
        left = {c.labels[LABEL_SESSION] for c in await rt.list({LABEL_AGENT: "a1"})}
        assert left == {kept}
        tg.cancel_scope.cancel()
