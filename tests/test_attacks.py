"""The adversarial matrix over NATS, on a real server with real credentials: each role
tries each attack; the attempt is refused, nothing changes state, and the refusal is
visible where an administrator looks (the server's log names the identity and the
subject of a permission violation; the registrar's and the scheduler's refusals are
events on the log, with their reasons).

Roles: anonymous, a user of project lab/a (the victim's own project), a user of lab/b,
the admin of another domain, a revoked keypair, an agent's service keypair. The read
API's rows of the matrix (HTTP, the event stream, ``state?at``) are in
``tests/test_api_auth.py``; exceeding each policy level in ``tests/test_tenancy.py`` and
``tests/test_quota_properties.py``.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
import pytest
from tenancy_env import Secured, secured_cluster

from events import (
    AccessRefused,
    AdminApplied,
    AdminCommand,
    AdminRequested,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    DestroyRejected,
    PolicyLevel,
    ResourcePolicy,
    RevokeKeypair,
    Role,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionRequested,
    SessionScheduled,
    SetPolicy,
    Slots,
    encode,
)
from events import subjects as subj
from services.actors.agent import AgentActor
from services.actors.bootstrap import system_applied
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access_audit import AccessLimiter
from services.domain.keys import hash_secret, new_access_key, new_secret
from services.domain.permissions import inbox
from services.domain.provenance import Provenance, stamp
from services.domain.state import ClusterState
from services.domain.status import SessionStatus
from tests.cluster import agent_config

SERVICES = ("registrar", "quota", "scheduler", "agent:a1")
SLOTS = Slots(cpu=1000, mem=1 << 30, fgpu=50)
PEOPLE = {  # name: (domain, role, project); each with one keypair
    "ua": ("lab", Role.USER, "a"),
    "ub": ("lab", Role.USER, "b"),
    "oadmin": ("other", Role.DOMAIN_ADMIN, "x"),
    "rv": ("lab", Role.USER, "a"),  # revoked
}
ROLES = ("anonymous", "ua", "ub", "oadmin", "rv", "agent")


@dataclass
class World:
    c: Secured
    server_log: Path
    keys: dict[str, tuple[str, str]]  # role -> access key, secret
    victims: dict[str, str]  # user -> the id of its running session

    def victim_of(self, role: str) -> str:
        """The user whose session and subjects ``role`` attacks: ua, unless it is ua."""
        return "ub" if role == "ua" else "ua"

    async def state(self) -> ClusterState:
        return await Client(self.c.setup, SystemClock(), "observer").state()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def world() -> AsyncIterator[World]:
    # Every refusal written: the audit's flood limit is not what is tested here.
    limiter = AccessLimiter(per_key=10_000, total=100_000)
    async with secured_cluster(services=SERVICES, limiter=limiter) as c:
        keys = {name: (new_access_key(), new_secret()) for name in PEOPLE}
        commands: list[AdminCommand] = [CreateDomain(domain="lab"), CreateDomain(domain="other")]
        for d, p in (("lab", "a"), ("lab", "b"), ("other", "x")):
            commands.append(CreateProject(domain=d, project=p))
        for name, (domain, role, project) in PEOPLE.items():
            commands.append(CreateUser(user=name, domain=domain, role=role, projects=(project,)))
            key, secret = keys[name]
            commands.append(
                CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret))
            )
        for command in commands:
            await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))
        clock = SystemClock()
        logs = {kind: await c.log_as(*c.services[kind]) for kind in SERVICES}
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(RegistrarActor(logs["registrar"], clock).run)
                await tg.start(QuotaActor(logs["quota"], clock).run)
                await tg.start(SchedulerActor(logs["scheduler"], clock).run)
                agent = AgentActor(logs["agent:a1"], DummyRuntime(), clock, agent_config("a1"))
                await tg.start(agent.run)
                victims = {}
                for name in ("ua", "ub"):
                    user_log = await c.log_as(*keys[name])
                    [victims[name]] = await Client(user_log, clock, keys[name][0]).create(
                        image="fgpu/busybox:latest", slots=SLOTS
                    )
                    await user_log.close()
                w = World(c, Path(c.server_log), {**keys, "agent": c.services["agent:a1"]}, victims)
                await _until(w, lambda s: _running(s, list(victims.values())))
                revoke = system_applied(RevokeKeypair(access_key=keys["rv"][0]), clock)
                await c.setup.append(subj.TENANCY, revoke)
                yield w
                tg.cancel_scope.cancel()
        finally:
            for log in logs.values():
                await log.close()


def _running(s: ClusterState, ids: list[str]) -> bool:
    return all(i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING for i in ids)


async def _until(w: World, done: Callable[[ClusterState], bool]) -> ClusterState:
    with anyio.fail_after(20):
        return await Client(w.c.setup, SystemClock(), "observer").wait_until(done)


# ---- the attacks --------------------------------------------------------------------------
# Each returns the subjects the server must refuse (a violation told to the client and
# logged), and checks the refusals our actors make itself.

Attack = Callable[[World, str, nats.NATS], Awaitable[list[str]]]


def _forged(kind: type[Any], **fields: Any) -> bytes:
    return encode(stamp(kind, Provenance("scheduler", SystemClock().now()), **fields))


async def forge_decisions(w: World, role: str, nc: nats.NATS) -> list[str]:
    """A placement on the ledger, an admission, a tenancy change making itself superadmin."""
    sid = w.victims[w.victim_of(role)]
    me = CreateUser(user=f"x{role}", domain="lab", role=Role.SUPERADMIN)
    forged = {
        subj.LEDGER: _forged(
            SessionScheduled,
            session_id=sid,
            owner=w.keys[w.victim_of(role)][0],
            agent_id="a1",
            slots=SLOTS,
            devices=(),
        ),
        subj.ADMISSION: _forged(SessionAdmitted, session_id="s-forged", owner=w.keys[role][0]),
        subj.TENANCY: _forged(AdminApplied, requester="system", command=me),
    }
    for subject, payload in forged.items():
        await nc.publish(subject, payload)
    return list(forged)


async def request_as_another(w: World, role: str, nc: nats.NATS) -> list[str]:
    victim = w.keys[w.victim_of(role)][0]
    subject = subj.request(victim, "s-impostor")
    payload = _forged(
        SessionRequested,
        session_id="s-impostor",
        owner=victim,
        image="fgpu/busybox:latest",
        slots=SLOTS,
    )
    await nc.publish(subject, payload)
    return [subject]


async def manage_the_stream(w: World, role: str, nc: nats.NATS) -> list[str]:
    """Delete, purge, reconfigure the stream; read messages by direct get; make a consumer
    (a person reads through the read API; a service may read the log)."""
    stream = subj.STREAM
    asks = [
        f"$JS.API.STREAM.DELETE.{stream}",
        f"$JS.API.STREAM.PURGE.{stream}",
        f"$JS.API.STREAM.UPDATE.{stream}",
        f"$JS.API.STREAM.MSG.DELETE.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
    ]
    if role != "agent":
        asks.append(f"$JS.API.CONSUMER.CREATE.{stream}")
    for subject in asks:
        with pytest.raises(nats.errors.Error):  # denied: no answer comes
            await nc.request(subject, b"{}", timeout=0.25)
    return asks


async def read_others(w: World, role: str, nc: nats.NATS) -> list[str]:
    """Listen to the log's subjects and to another's inbox, without a consumer."""
    victim = w.keys[w.victim_of(role)][0]
    for subject in ("fgpu.>", f"_INBOX.{victim}.>"):
        await nc.subscribe(subject)
    return ["fgpu.>", f"_INBOX.{victim}.>"]


async def raise_a_policy(w: World, role: str, nc: nats.NATS) -> list[str]:
    """A limitless policy asked on one's own admin subject: a user's on its own keypair, a
    domain admin's on a keypair of another domain; the registrar refuses it. An agent may
    not even ask."""
    key = w.keys[role][0]
    target = w.keys["ua"][0] if role == "oadmin" else key
    plenty = Slots(cpu=10**9, mem=1 << 50, fgpu=10**6)
    command = SetPolicy(
        level=PolicyLevel.KEYPAIR, target=target, policy=ResourcePolicy(total_slots=plenty)
    )
    prov = Provenance(key, SystemClock().now())
    request = stamp(AdminRequested, prov, requester=key, command=command)
    subject = subj.admin(key, request.id)
    await nc.publish(subject, encode(request))
    if role == "agent":
        return [subject]
    await nc.flush()
    s = await _until(w, lambda s: request.id in s.admin_answered)
    _, _, refused = s.admin_answered[request.id]
    assert refused is not None and refused[0] == "forbidden", refused
    return []


async def destroy_anothers(w: World, role: str, nc: nats.NATS) -> list[str]:
    """A destroy on one's own subject naming another's running session: the scheduler
    refuses it with its reason; an agent may not ask at all."""
    key = w.keys[role][0]
    sid = w.victims[w.victim_of(role)]
    ask = stamp(
        SessionDestroyRequested,
        Provenance(key, SystemClock().now()),
        session_id=sid,
        requester=key,
    )
    subject = subj.request(key, sid)
    await nc.publish(subject, encode(ask))
    if role == "agent":
        return [subject]
    await nc.flush()
    refusals: list[DestroyRejected] = []

    async def refused() -> None:
        async for batch in w.c.setup.tail(0, subject=subj.LEDGER):
            refusals.extend(
                r.event
                for r in batch
                if isinstance(r.event, DestroyRejected) and r.event.causation_id == ask.id
            )
            if refusals:
                return

    with anyio.fail_after(20):
        await refused()
    assert refusals[0].reason == "the session belongs to another access key"
    return []


ATTACKS: dict[str, Attack] = {
    "forge-decisions": forge_decisions,
    "request-as-another": request_as_another,
    "manage-the-stream": manage_the_stream,
    "read-others": read_others,
    "raise-a-policy": raise_a_policy,
    "destroy-anothers": destroy_anothers,
}


class Told:
    """What the server told one client: its permission violations."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._more = anyio.Event()

    async def on_error(self, e: Exception) -> None:
        self.errors.append(str(e).lower())
        self._more.set()
        self._more = anyio.Event()

    async def violations(self, n: int) -> None:
        while sum("permissions violation" in e for e in self.errors) < n:
            await self._more.wait()


async def _connect(w: World, role: str, told: Told) -> nats.NATS:
    if role == "anonymous":
        return await w.c.connect(error_cb=told.on_error)
    key, secret = w.keys[role]
    return await w.c.connect(
        user=key, password=secret, inbox_prefix=inbox(key), error_cb=told.on_error
    )


@pytest.mark.anyio
@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("role", ROLES)
async def test_an_attack_is_refused_changes_nothing_and_is_seen(
    world: World, role: str, attack: str
) -> None:
    w = world
    ledger = await w.c.setup.count(subj.LEDGER)
    admission = await w.c.setup.count(subj.ADMISSION)
    tenancy = await w.c.setup.count(subj.TENANCY)
    told = Told()
    if role in ("anonymous", "rv"):
        with pytest.raises((nats.errors.Error, OSError)):
            await _connect(w, role, told)
        return
    nc = await _connect(w, role, told)
    try:
        denied = await ATTACKS[attack](w, role, nc)
        await nc.flush()
        with anyio.fail_after(10):
            await told.violations(len(denied))
    finally:
        await nc.close()
    # Nothing changed: no decision stored (a refusal by the registrar is its only write),
    # the victims' sessions still run.
    grew = {attack: 1} if attack == "raise-a-policy" and role != "agent" else {}
    assert await w.c.setup.count(subj.LEDGER) == ledger + (
        1 if attack == "destroy-anothers" and role != "agent" else 0
    )
    assert await w.c.setup.count(subj.ADMISSION) == admission
    assert await w.c.setup.count(subj.TENANCY) == tenancy + grew.get(attack, 0)
    assert await w.c.setup.count(subj.request(w.keys[w.victim_of(role)][0], "s-impostor")) == 0
    s = await w.state()
    assert _running(s, list(w.victims.values()))
    forged_users = [u for u in s.tenancy.users.values() if u.user.startswith("x")]
    assert forged_users == []
    # Seen: the server's log names who tried what, and so does the audit log.
    who = "service:agent:a1" if role == "agent" else f"user:{role}"
    logged = w.server_log.read_text(errors="replace").splitlines()
    for subject in denied:
        lines = [line for line in logged if f'Violation - Subject "{subject}"' in line]
        assert any(who in line for line in lines), (subject, lines[-3:])
    await _audited(w, w.keys[role][0], denied)


async def _audited(w: World, key: str, subjects: list[str]) -> None:
    """Wait until the access audit holds a refusal of ``key`` for each of ``subjects``."""
    wanted = set(subjects)
    with anyio.fail_after(10):
        async for batch in w.c.setup.tail(0, subject=subj.access("nats")):
            for r in batch:
                e = r.event
                if isinstance(e, AccessRefused) and e.owner == key:
                    wanted.discard(e.what.partition(" ")[2])
            if not wanted:
                return
