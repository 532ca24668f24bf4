"""``fgpu session exec`` below the CLI: a command run in a session's container by its agent,
asked over a real nats-server, with the agent as ``fgpu agent`` runs it (``run_agent``) on
the dummy runtime. Who may ask, what comes back, and the audit on the log.

(The server's own refusal, a user asking in another key's name, is a row of
``test_adversarial.py``; the Docker engine's exec is in the runtime contract.)
"""

import functools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from events import (
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    RemoveUser,
    RevokeKeypair,
    Role,
    SessionExecFinished,
    SessionExecStarted,
    Slots,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.nats_bus import NatsBus
from services.adapters.nats_connection import NatsConnection, nats_connection
from services.adapters.system_clock import SystemClock
from services.cli.home import fgpu_home
from services.client import Client
from services.domain.keys import hash_secret
from services.domain.state import ClusterState
from services.domain.status import SessionStatus
from services.ports import (
    AgentReply,
    AgentRequest,
    AppRequest,
    ChannelReply,
    ContainerRuntime,
    ExecReply,
    ExecRequest,
    LogsReply,
    LogsRequest,
    ShellRequest,
)
from services.wiring.parts import run_agent
from tests.cluster import GIB, agent_config, running_cluster

pytestmark = pytest.mark.anyio

DEADLINE_S = 20.0
IMAGE = "fgpu/busybox:latest"
CLOCK = SystemClock()
PEOPLE = {  # access key: user, domain, role
    "AKana": ("ana", "lab", Role.USER),  # owns the session
    "AKeve": ("eve", "lab", Role.USER),  # same project, not hers
    "AKadm": ("adm", "lab", Role.DOMAIN_ADMIN),
    "AKoadm": ("oadm", "other", Role.DOMAIN_ADMIN),
}


@dataclass
class World:
    conn: NatsConnection
    session: str

    async def ask(self, key: str, argv: tuple[str, ...], timeout_s: float = 10) -> ExecReply:
        bus = NatsBus(self.conn.client, key)  # asking in ``key``'s name, as its user would
        request = ExecRequest(session_id=self.session, argv=argv, timeout_s=timeout_s)
        with anyio.fail_after(DEADLINE_S):
            reply = await bus.ask("a1", request, timeout_s=timeout_s + 5)
        assert isinstance(reply, ExecReply), reply
        return reply

    async def told(self, key: str, request: AgentRequest) -> AgentReply:
        """The agent's answer to ``request``, asked in ``key``'s name."""
        with anyio.fail_after(DEADLINE_S):
            return await NatsBus(self.conn.client, key).ask("a1", request, timeout_s=10)

    async def logs_refused(self, key: str) -> str:
        """Why the agent refuses ``key`` the session's logs, once it does (the agent folds
        the log in its own time: asked again until then, a read changing nothing)."""
        with anyio.fail_after(DEADLINE_S):
            while True:
                reply = await self.told(key, LogsRequest(session_id=self.session))
                assert isinstance(reply, LogsReply), reply
                if not reply.ok:
                    assert reply.error is not None
                    return reply.error

    async def audit(self, n: int) -> list[SessionExecStarted | SessionExecFinished]:
        """The first ``n`` events on the session's exec subject, once there."""
        found: list[SessionExecStarted | SessionExecFinished] = []
        with anyio.fail_after(DEADLINE_S):
            async for batch in self.conn.log.tail(0, subject=subj.agent_exec("a1", self.session)):
                found += [r.event for r in batch]  # type: ignore[misc]
                if len(found) >= n:
                    return found
        raise AssertionError("the log ended")


def _tenancy() -> list[AdminCommand]:
    secret_hash = hash_secret("not-used-here")
    commands: list[AdminCommand] = [CreateDomain(domain="lab"), CreateDomain(domain="other")]
    commands += [
        CreateProject(domain="lab", project="p"),
        CreateProject(domain="other", project="x"),
    ]
    for key, (user, domain, role) in PEOPLE.items():
        project = "p" if domain == "lab" else "x"
        commands.append(CreateUser(user=user, domain=domain, role=role, projects=(project,)))
        commands.append(CreateKeypair(access_key=key, user=user, secret_hash=secret_hash))
    return commands


@asynccontextmanager
async def lab_session(
    runtime: ContainerRuntime, agent_id: str, image: str, command: tuple[str, ...]
) -> AsyncIterator[tuple[NatsConnection, str]]:
    """Ana's session of ``image`` running ``command``, RUNNING on ``agent_id`` (as ``fgpu
    agent`` runs it, over ``runtime``), on a cluster with tenancy: the connection and the
    session's id."""
    with nats_server.nats_server() as server:
        async with AsyncExitStack() as stack:
            conn = await stack.enter_async_context(nats_connection(server.url))
            await conn.log.create_or_update_stream()
            for command_ in _tenancy():
                await conn.log.append(subj.TENANCY, system_applied(command_, CLOCK))
            await stack.enter_async_context(running_cluster(conn.log, []))
            tg = await stack.enter_async_context(anyio.create_task_group())
            # As ``fgpu agent`` keeps ended sessions' output: under $FGPU_HOME.
            agent_ = functools.partial(run_agent, output_root=fgpu_home() / "output")
            await tg.start(agent_, conn, runtime, agent_config(agent_id))
            ana = Client(conn.log, CLOCK, "AKana")
            slots = Slots(cpu=500, mem=GIB, fgpu=50)
            [sid] = await ana.create(image=image, slots=slots, command=command)
            with anyio.fail_after(DEADLINE_S):
                await ana.wait_until(lambda s: _status(s, sid) is SessionStatus.RUNNING)
            yield conn, sid
            tg.cancel_scope.cancel()


@pytest.fixture
async def world() -> AsyncIterator[World]:
    """Ana's session RUNNING on agent a1, on a cluster with tenancy."""
    async with lab_session(DummyRuntime(), "a1", IMAGE, ("sleep", "infinity")) as (conn, sid):
        yield World(conn, sid)


async def test_the_owner_gets_each_stream_and_the_exit_code_and_it_is_audited(
    world: World,
) -> None:
    argv = ("sh", "-c", "echo out; echo err >&2; exit 3")
    reply = await world.ask("AKana", argv)
    assert reply == ExecReply(
        ok=True, exit_code=3, stdout=b"out\n", stderr=b"err\n", stdout_bytes=4, stderr_bytes=4
    )
    started, finished = await world.audit(2)
    assert isinstance(started, SessionExecStarted) and isinstance(finished, SessionExecFinished)
    assert (started.session_id, started.agent_id, started.requester, started.argv) == (
        world.session,
        "a1",
        "AKana",
        argv,
    )
    assert started.actor == finished.actor == "agent:a1"
    assert finished.causation_id == started.id
    assert (finished.requester, finished.exit_code, finished.error) == ("AKana", 3, None)
    assert (finished.stdout_bytes, finished.stderr_bytes) == (4, 4)


async def test_an_admin_of_the_domain_may_others_may_not(world: World) -> None:
    assert (await world.ask("AKadm", ("echo", "hi"))).stdout == b"hi\n"
    for key in ("AKeve", "AKoadm", "AKnobody"):
        reply = await world.ask(key, ("echo", "hi"))
        assert reply == ExecReply(
            ok=False, error=f"{key} may not run commands in session {world.session}"
        )
    # Only the command that ran is on the log: refusals are answered, not written.
    started, finished = await world.audit(2)
    assert isinstance(started, SessionExecStarted) and started.requester == "AKadm"
    assert isinstance(finished, SessionExecFinished) and finished.exit_code == 0
    seq = await world.conn.log.last_seq()
    assert await world.conn.log.count(subj.agent_exec("a1", world.session)) == 2
    assert seq == await world.conn.log.last_seq()


async def test_a_command_over_its_time_is_answered_and_closed_with_why(world: World) -> None:
    reply = await world.ask("AKana", ("sleep", "600"), timeout_s=0.2)
    assert reply == ExecReply(
        ok=False, error="timed out after 0.2 s: it may still run in the container"
    )
    started, finished = await world.audit(2)
    assert isinstance(finished, SessionExecFinished) and finished.causation_id == started.id
    assert (finished.exit_code, finished.error) == (None, reply.error)


@pytest.mark.parametrize(
    ("ended", "why"),
    [
        (RevokeKeypair(access_key="AKana"), "access key AKana was revoked"),
        (RemoveUser(user="ana"), "the user of access key AKana was removed"),
    ],
)
async def test_a_revoked_key_is_refused_logs_commands_and_channels_with_why(
    world: World, ended: AdminCommand, why: str
) -> None:
    """The agent's own check, over a server that cuts no connection (no authentication
    here): what it folds of the tenancy is enough."""
    assert (await world.ask("AKana", ("echo", "hi"))).stdout == b"hi\n"
    await world.conn.log.append(subj.TENANCY, system_applied(ended, CLOCK))
    assert await world.logs_refused("AKana") == why
    assert await world.ask("AKana", ("echo", "hi")) == ExecReply(ok=False, error=why)
    sid = world.session
    for request in (
        ShellRequest(session_id=sid, channel="c1"),
        AppRequest(session_id=sid, channel="c2", target="8080"),
    ):
        assert await world.told("AKana", request) == ChannelReply(ok=False, error=why)
    # The domain's admin still may; only what ran before is on the log.
    assert (await world.ask("AKadm", ("echo", "hi"))).stdout == b"hi\n"
    assert [e.requester for e in await world.audit(4)] == ["AKana", "AKana", "AKadm", "AKadm"]


async def test_a_command_that_cannot_be_run_is_refused_before_it_starts(world: World) -> None:
    assert (await world.ask("AKana", ())).error == "the command is empty"
    long = ("echo", "x" * (20 << 10))
    assert "bytes long" in str((await world.ask("AKana", long)).error)
    assert await world.conn.log.count(subj.agent_exec("a1", world.session)) == 0


def _status(s: ClusterState, sid: str) -> SessionStatus | None:
    v = s.sessions.get(sid)
    return None if v is None else v.status
