"""An end report that landed although its append seemed to fail is not acted on again.

The log stores the agent's first end report (SessionTerminated, or SessionErrored after an
engine error) and then raises LogError, as a publish whose acknowledgement was lost does.
The agent retries; by then its fold shows the session ended, and it must neither run the
session's container a second time nor report the end again.
"""

import anyio
import pytest

from events import AnyEvent, SessionErrored, SessionTerminated, Slots
from events import subjects as subj
from services.actors.agent import AgentActor, _Supervised
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import ContainerSpec
from services.domain.fold.cluster import ClusterState
from services.domain.provenance import Provenance, stamp
from services.domain.status import ENDED
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


class HeldRun(DummyRuntime):
    """Creates each container only once ``go`` is set; ``asked`` says a run began."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.go = anyio.Event(), anyio.Event()

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        self.asked.set()
        await self.go.wait()
        return await super().run(spec)


class LetGo(Watched):
    """The agent, telling when its fold lets go of ``watched``: right after the reaction
    that saw it ended (``follow_log`` lets go then, before it awaits anything)."""

    watched = ""
    let_go: anyio.Event

    async def react(self, s: ClusterState) -> None:
        await super().react(s)
        v = s.sessions.get(self.watched)
        if v is not None and v.status in ENDED:
            self.let_go.set()


async def test_a_session_let_go_of_while_its_container_starts_is_stopped() -> None:
    """Its end lands while the engine creates its container, and the agent's fold lets go
    of it (an ended session is only an id there). The supervisor, back from the engine,
    finds no session: it stops the container it got and finishes; the agent goes on."""
    log, runtime, clock = MemoryLog(), HeldRun(), SystemClock()
    client = Client(log, clock, "alice")
    agent = LetGo(log, runtime, clock, agent_config("a1"))
    agent.finished, agent.let_go = {}, anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(agent.run)
        (sid,) = await client.create(
            image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=50), command=["true"]
        )
        agent.watched = sid
        done = agent.finished.setdefault(sid, anyio.Event())
        prov = Provenance("agent:a1", clock.now())
        with anyio.fail_after(10):
            await runtime.asked.wait()
            gone = stamp(SessionErrored, prov, session_id=sid, agent_id="a1", reason="gone")
            await log.append(subj.agent_session("a1", sid), gone)
            await agent.let_go.wait()
            assert sid not in agent.state.sessions and sid in agent.state.ended
            runtime.go.set()
            await done.wait()
        tg.cancel_scope.cancel()
    assert await runtime.list({}) == []  # what it started is stopped
