"""An end report that landed although its append seemed to fail is not acted on again.

The log stores the agent's first end report (SessionTerminated, or SessionErrored after an
engine error) and then raises LogError, as a publish whose acknowledgement was lost does.
The agent retries; by then its fold shows the session ended, and it must neither run the
session's container a second time nor report the end again.
"""

import anyio
import pytest

from events import AnyEvent, SessionErrored, SessionTerminated, Slots
from services.actors.agent import AgentActor, _Supervised
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import ContainerSpec
from services.ports import ContainerError, ContainerInfo, LogError
from tests.support.cluster import GIB, agent_config, statuses

pytestmark = pytest.mark.anyio

ENDS = (SessionTerminated, SessionErrored)


class LostAck(MemoryLog):
    """Stores the first end report, then says the append failed."""

    def __init__(self) -> None:
        super().__init__()
        self.ends = 0

    async def append(
        self, subject: str, event: AnyEvent, *, expected_last_subject_seq: int | None = None
    ) -> int:
        seq = await super().append(
            subject, event, expected_last_subject_seq=expected_last_subject_seq
        )
        if isinstance(event, ENDS):
            self.ends += 1
            if self.ends == 1:
                raise LogError("no acknowledgement (the append landed)")
        return seq


class CountingRuntime(DummyRuntime):
    """Counts the containers it is asked to run; with ``error``, every run fails so."""

    def __init__(self, error: ContainerError | None) -> None:
        super().__init__()
        self.error = error
        self.runs = 0

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        self.runs += 1
        if self.error is not None:
            raise self.error
        return await super().run(spec)


class Watched(AgentActor):
    """The agent, telling when it stops supervising a session."""

    finished: dict[str, anyio.Event]

    async def _supervise(self, session_id: str, sup: _Supervised) -> None:
        await super()._supervise(session_id, sup)
        self.finished.setdefault(session_id, anyio.Event()).set()


@pytest.mark.parametrize(
    ("error", "status"),
    [(None, "TERMINATED"), (ContainerError("disk full"), "ERROR")],
    ids=["exited", "engine-error"],
)
async def test_a_landed_end_report_is_neither_run_again_nor_repeated(
    error: ContainerError | None, status: str
) -> None:
    log, runtime, clock = LostAck(), CountingRuntime(error), SystemClock()
    client = Client(log, clock, "alice")
    agent = Watched(log, runtime, clock, agent_config("a1"))
    agent.finished = {}
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(agent.run)
        (sid,) = await client.create(
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=GIB, fgpu=50),
            command=["sh", "-c", "exit 0"],
        )
        done = agent.finished.setdefault(sid, anyio.Event())
        with anyio.fail_after(10):
            await client.wait_until(lambda s: statuses(s, [sid]) == [status])
            await done.wait()  # the supervisor has retried and stopped
        tg.cancel_scope.cancel()
    assert log.ends == 1  # the lost one only: the retry saw it on the log
    assert runtime.runs == 1
    assert await runtime.list({}) == []
