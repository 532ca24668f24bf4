"""An end report that landed although its append seemed to fail starts nothing again.

The log stores the agent's SessionTerminated and then raises LogError, as a publish whose
acknowledgement was lost does. The agent retries; by then its fold shows the session
ended, and it must not run the session's container a second time.
"""

import anyio
import pytest

from events import AnyEvent, SessionTerminated, Slots
from services.actors.agent import AgentActor
from services.actors.common import SystemClock
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.client import Client
from services.ports import ContainerInfo, ContainerSpec, LogError
from services.testing import MemoryLog
from tests.cluster import GIB, agent_config, statuses

pytestmark = pytest.mark.anyio


class LostAck(MemoryLog):
    """Stores the first SessionTerminated, then says the append failed."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    async def append(
        self, subject: str, event: AnyEvent, *, expected_last_subject_seq: int | None = None
    ) -> int:
        seq = await super().append(
            subject, event, expected_last_subject_seq=expected_last_subject_seq
        )
        if isinstance(event, SessionTerminated) and not self.lost:
            self.lost += 1
            raise LogError("no acknowledgement (the append landed)")
        return seq


class CountingRuntime(DummyRuntime):
    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        self.runs += 1
        return await super().run(spec)


async def test_a_landed_end_report_is_not_followed_by_a_second_container() -> None:
    log, runtime, clock = LostAck(), CountingRuntime(), SystemClock()
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, runtime, clock, agent_config("a1")).run)
        (sid,) = await client.create(
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=GIB, fgpu=50),
            command=["sh", "-c", "exit 0"],
        )
        with anyio.fail_after(10):
            await client.wait_until(lambda s: statuses(s, [sid]) == ["TERMINATED"])
        await anyio.sleep(1.0)  # the agent's retries (backoff 0.2 s, 0.4 s, ...)
        tg.cancel_scope.cancel()
    assert log.lost == 1
    assert runtime.runs == 1
    assert await runtime.list({}) == []
