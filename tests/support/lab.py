"""A session of one agent on a real log, reached as its owner would reach it."""

import functools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio

from events import (
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    Role,
    Slots,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters import nats_server
from services.adapters.nats_connection import NatsConnection, nats_connection
from services.adapters.system_clock import SystemClock
from services.cli.home import fgpu_home
from services.client import Client
from services.domain.access.keys import hash_secret
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from services.ports import (
    ContainerRuntime,
)
from services.wiring.parts import run_agent
from tests.support.cluster import GIB, agent_config, running_cluster

DEADLINE_S = 20.0


CLOCK = SystemClock()


PEOPLE = {  # access key: user, domain, role
    "AKana": ("ana", "lab", Role.USER),  # owns the session
    "AKeve": ("eve", "lab", Role.USER),  # same project, not hers
    "AKadm": ("adm", "lab", Role.DOMAIN_ADMIN),
    "AKoadm": ("oadm", "other", Role.DOMAIN_ADMIN),
}


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


def _status(s: ClusterState, sid: str) -> SessionStatus | None:
    v = s.sessions.get(sid)
    return None if v is None else v.status
