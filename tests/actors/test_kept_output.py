"""A batch session's output outlives its container: the agent keeps its last lines when it
removes the container, and `fgpu session logs` reads them once the session has ended."""

from pathlib import Path

import anyio
import pytest

from events import Role, SessionTerminated, Slots
from services.actors.agent import AgentActor
from services.actors.agent_requests import answering
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.output_files import OutputFiles
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.session_access import may_not_read_kept
from services.domain.fold.cluster import ClusterState
from services.domain.tenancy.model import Keypair, Tenancy, User
from services.ports import KeptOutput, LogsReply, LogsRequest, OutputStore
from services.testing import MemoryOutput
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio
CLOCK = SystemClock()


@pytest.fixture(params=["memory", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> OutputStore:
    return MemoryOutput() if request.param == "memory" else OutputFiles(tmp_path / "out")


async def test_what_is_kept_comes_back_and_a_second_keep_replaces_it(store: OutputStore) -> None:
    assert await store.kept("s1") is None
    await store.keep("s1", KeptOutput("alice", "lab", "one\ntwo\n"))
    await store.keep("s1", KeptOutput("alice", "lab", "three\n"))
    assert await store.kept("s1") == KeptOutput("alice", "lab", "three\n")
    assert await store.kept("s2") is None


async def test_files_refuse_a_name_that_is_no_session_id_and_skip_a_broken_file(
    tmp_path: Path,
) -> None:
    files = OutputFiles(tmp_path)
    with pytest.raises(OSError, match="not a session id"):
        await files.keep("../etc/passwd", KeptOutput("a", "b", "c"))
    (tmp_path / "s9.json").write_text("{not json")
    assert await files.kept("s9") is None


async def _printed(runtime: DummyRuntime, sid: str, text: str) -> None:
    """Back once the container of ``sid`` has printed ``text``. A runtime tells of no line
    printed, so its logs are looked at until they hold it, within a deadline."""
    with anyio.fail_after(10):
        while True:
            [info] = await runtime.list({"fgpu.session": sid})
            if text in await runtime.logs(info.id):
                return
            await anyio.sleep(0.01)  # a look's pause; what is awaited is the line


async def _ended_with_output(
    output: MemoryOutput, script: str = "echo first; echo second; exit 3", destroy: bool = False
) -> tuple[MemoryLog, str, AgentActor, DummyRuntime]:
    log, runtime = MemoryLog(), DummyRuntime()
    client = Client(log, CLOCK, "alice")
    agent = AgentActor(log, runtime, CLOCK, agent_config("a1"), output=output)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(QuotaActor(log, CLOCK).run)
            await tg.start(SchedulerActor(log, CLOCK).run)
            await tg.start(agent.run)
            [sid] = await client.create(
                image="fgpu/busybox:latest",
                slots=Slots(cpu=100, mem=GIB, fgpu=25),
                command=["sh", "-c", script],
            )
            if destroy:
                await client.wait_until(
                    lambda s: sid in s.sessions and s.sessions[sid].status.value == "RUNNING"
                )
                await _printed(runtime, sid, "working\n")
                await client.destroy(sid)
            await client.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status.value == "TERMINATED"
            )
            tg.cancel_scope.cancel()
    return log, sid, agent, runtime


async def test_an_ended_sessions_logs_are_what_its_agent_kept() -> None:
    output = MemoryOutput()
    log, sid, agent, runtime = await _ended_with_output(output)
    assert await runtime.list({"fgpu.session": sid}) == []  # the container is gone
    answer = answering("a1", runtime, lambda: agent.state, log, CLOCK, output=output)
    reply = await answer("alice", LogsRequest(session_id=sid, tail=1))
    assert reply == LogsReply(ok=True, logs="second\n")
    reply = await answer("alice", LogsRequest(session_id=sid))
    assert reply == LogsReply(ok=True, logs="first\nsecond\n")
    assert (await answer("alice", LogsRequest(session_id="s-none"))).ok is False


async def test_a_destroyed_sessions_output_is_kept_before_its_container_goes() -> None:
    output = MemoryOutput()
    log, sid, agent, runtime = await _ended_with_output(output, "echo working; sleep 60", True)
    answer = answering("a1", runtime, lambda: agent.state, log, CLOCK, output=output)
    assert await answer("alice", LogsRequest(session_id=sid)) == LogsReply(
        ok=True, logs="working\n"
    )


async def test_the_end_is_reported_when_the_output_cannot_be_kept() -> None:
    output = MemoryOutput()
    output.fail = True
    log, sid, _, _ = await _ended_with_output(output)
    ended = [
        r.event
        async for batch in log.read(0)
        for r in batch
        if isinstance(r.event, SessionTerminated) and r.event.session_id == sid
    ]
    assert [e.exit_code for e in ended] == [3]
    assert output.outputs == {}


def test_kept_output_is_its_owners_and_its_domain_admins() -> None:
    s = ClusterState()
    assert may_not_read_kept(s, "mallory", "alice", "lab") is None  # no tenancy: open
    admin = {"role": Role.DOMAIN_ADMIN, "projects": {}, "default_project": None}
    s.tenancy = Tenancy(
        domains={"lab": {"a": None}, "other": {"x": None}},
        users={
            "ann": User(user="ann", domain="lab", **admin),  # type: ignore[arg-type]
            "oa": User(user="oa", domain="other", **admin),  # type: ignore[arg-type]
        },
        keypairs={
            "AKann": Keypair(access_key="AKann", secret_hash="h", user="ann"),
            "AKoa": Keypair(access_key="AKoa", secret_hash="h", user="oa"),
        },
    )
    assert may_not_read_kept(s, "alice", "alice", "lab") is None
    assert may_not_read_kept(s, "AKann", "alice", "lab") is None  # its domain's admin
    assert may_not_read_kept(s, "AKoa", "alice", "lab") == "AKoa may not see that session"
    assert may_not_read_kept(s, "mallory", "alice", "lab") == "mallory may not see that session"
