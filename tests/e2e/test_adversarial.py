"""The adversarial matrix over NATS, on a real server with real credentials: each role
tries each attack (``MATRIX``: one case per role and attack, ``<role>-<attack>``).

Every case checks three things:

- Refused: the server tells the client of a permissions violation (a publish or a
  subscription its grant does not hold), or does not let it in at all (anonymous, a
  revoked keypair: every attack of theirs is a connection refused), or one of our actors
  answers with a refusal event and its reason (the registrar's ``admin.refused``, the
  scheduler's ``session.destroy-rejected``, the quota actor's ``session.rejected`` and
  ``payload.rejected``).
- Nothing changed: after the attack a fence, a legitimate request whose answer is
  awaited (sent on the attacker's own connection when it may send one), proves that every
  actor has read whatever the attack got onto the log. Up to the fence the log holds
  exactly the attack's own requests and their refusals, nothing else (on a decision
  subject: only refusals), and the fold of the log (live sessions, allocations, quota
  held, tenancy) is what it was; the victim's session still runs.
- Seen where an administrator looks: the refusal event with its reason, on the log; a
  permissions violation in the server's log (identity and subject) and in the access
  audit (``access.refused``); a refused connection in the access audit and as the
  server's ``$SYS.SERVER.<id>.CLIENT.AUTH.ERR`` advisory. nats-server (2.15) sends no
  advisory for a permissions violation: only its log has it.

Roles: anonymous; ``ua``, a user of lab/a (the victim's own project); ``ub``, a user of
lab/b; ``oadmin``, the domain admin of another domain; a revoked keypair; the agent a1's
service keypair. The victim: ``vic``, a user of lab/a, with a session RUNNING on a1.

The read API's rows of the matrix (another tenant's sessions and events read over HTTP,
the SSE stream and ``state?at=``) are not here yet: where they join is marked in ``ATTACKS``.
"""

import base64
import copy
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
import nats
import nats.errors
import pytest

from events import (
    AccessRefused,
    AdminApplied,
    AdminCommand,
    AdminRefused,
    AdminRequested,
    AgentImagesReported,
    CreateDomain,
    CreateKeypair,
    CreateUser,
    CreateVfolder,
    DestroyRejected,
    EndpointCreated,
    Event,
    PayloadRejected,
    PipelineTaskRequested,
    PolicyLevel,
    Record,
    ReplicaHealthReported,
    RequestsDropped,
    ResourcePolicy,
    RevokeKeypair,
    Role,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionRejected,
    SessionRequested,
    SessionTerminated,
    SessionTerminating,
    SetPolicy,
    Slots,
    VfolderMount,
    VfolderScanned,
    encode,
    encode_many,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.nats_auth import SYS_USER
from services.adapters.system_clock import SystemClock
from services.cli.home import fgpu_home
from services.client import Client
from services.domain.access.access_audit import AccessLimiter
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.access.permissions import inbox, reader_names
from services.domain.channels import Data, encode_frame
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold
from services.domain.provenance import Provenance, stamp
from services.domain.resources import UNLIMITED, format_fgpu
from services.domain.status import ENDED, SessionStatus
from services.ports import (
    AgentReply,
    ChannelReply,
    ExecReply,
    ExecRequest,
    FollowRequest,
    LogsReply,
    LogsRequest,
    ShellRequest,
)
from services.wiring.identity import Identity
from services.wiring.parts import (
    connected,
    run_agent,
    run_intake,
    run_quota,
    run_registrar,
    run_scheduler,
)
from tests.support.attack_roles import AT_THE_DOOR, PEOPLE, PERSON_ROLES, tenancy
from tests.support.cluster import agent_config
from tests.support.tenancy_env import Secured, secured_cluster

CLOCK = SystemClock()
SERVICES = ("intake", "registrar", "quota", "scheduler", "agent:a1")
IMAGE = "fgpu/busybox:latest"
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)
ROLES = {**PERSON_ROLES, "agent-key": "agent:a1"}  # the matrix's role: who plays it
ATTACKERS = ("ua", "ub", "oadmin")
# Policies on fGPU (quanta; cpu and memory unlimited) of each attacker's keypair, user,
# project and domain. Each level leaves less room than the one before (the victim holds
# 0.5 fGPU in lab/a), so that asking EXCEED[level] passes the levels checked before it
# and oversteps that one.
LIMITS: dict[PolicyLevel, dict[str, int]] = {
    PolicyLevel.KEYPAIR: dict.fromkeys(ATTACKERS, 400),
    PolicyLevel.USER: dict.fromkeys(ATTACKERS, 300),
    PolicyLevel.PROJECT: {"lab/a": 250, "lab/b": 200, "other/x": 200},
    PolicyLevel.DOMAIN: {"lab": 150, "other": 100},
}
EXCEED = {
    PolicyLevel.KEYPAIR: 450,
    PolicyLevel.USER: 350,
    PolicyLevel.PROJECT: 250,
    PolicyLevel.DOMAIN: 150,
}
# A durable consumer for attacks on consumers: a second quota actor's cursor, made by a
# quota keypair (a kind's durables are its own), which no actor here follows.
DECOY = "quota-2"


class Told:
    """What the server told one client: its errors, lowercased by nats-py."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._more = anyio.Event()

    async def on_error(self, e: Exception) -> None:
        self.errors.append(str(e))
        self._more.set()
        self._more = anyio.Event()

    async def violations(self, denied: list[str]) -> None:
        """Wait, briefly, until the server has told a violation of each of ``denied``;
        fail naming those it did not tell."""

        def missing() -> list[str]:
            return [d for d in denied if not any(_told(d) in e for e in self.errors)]

        with anyio.move_on_after(5):
            while missing():
                await self._more.wait()
        assert not missing(), f"not refused: {missing()}; the server told {self.errors}"


def _told(denied: str) -> str:
    """What nats-py says of the violation ``denied`` (it lowercases the server's text)."""
    kind, subject = _split(denied)
    return f'permissions violation for {kind} to "{subject.lower()}"'


def _split(denied: str) -> tuple[str, str]:
    kind, _, subject = denied.partition(" ")
    return kind, subject


class Advisories:
    """The server's advisories of refused connections, as the system account hears them."""

    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []
        self._more = anyio.Event()

    async def on_msg(self, msg: Any) -> None:
        self.heard.append(json.loads(msg.data))
        self._more.set()
        self._more = anyio.Event()

    async def of(self, user: str, after: int) -> dict[str, Any]:
        """The first advisory from the ``after``-th on of a connection as ``user``."""
        while not (found := [a for a in self.heard[after:] if a["client"].get("user", "") == user]):
            await self._more.wait()
        return found[0]


@dataclass
class Attacker:
    role: str
    who: str  # the user, or the service kind
    key: str
    nc: nats.NATS
    told: Told

    @property
    def person(self) -> bool:
        return not self.who.startswith("agent:")


@dataclass
class Outcome:
    """What an attack must leave: ``denied`` the server refuses (``publish <subject>``,
    ``subscription <subject>``); ``stored`` (subject, event type) the log holds after it,
    the attacker's own requests and the refusals they got, and nothing else."""

    denied: list[str] = field(default_factory=list)
    stored: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class World:
    c: Secured
    keys: dict[str, tuple[str, str]]  # person or service -> access key, secret
    victim: str  # vic's running session
    advisories: Advisories  # the server's CLIENT.AUTH.ERR advisories
    root: nats.NATS  # the superadmin's connection, for the fences of services
    decoys: nats.NATS  # the quota's keypair's connection: the decoy is its to look at
    state: ClusterState = field(default_factory=ClusterState)  # the log, folded
    records: list[Record] = field(default_factory=list)
    fences: int = 0

    async def until(self, done: Callable[[ClusterState], bool]) -> ClusterState:
        """Fold what the log gets until ``done``, within a deadline."""
        with anyio.fail_after(10):
            if done(self.state):
                return self.state
            async with aclosing(self.c.setup.tail(self.state.last_seq)) as batches:
                async for batch in batches:
                    fold(batch, self.state)
                    self.records += batch
                    if done(self.state):
                        return self.state
        raise AssertionError("the log ended")

    async def caught_up(self) -> ClusterState:
        last = await self.c.setup.last_seq()
        return await self.until(lambda s: s.last_seq >= last)

    def stored_since(self, seq: int) -> list[tuple[str, str]]:
        """What the log stored after ``seq``, but the access audit (the doors write it as
        connections come)."""
        return [
            (r.subject, type(r.event).__name__)
            for r in self.records
            if r.seq > seq and not r.subject.startswith("fgpu.access.")
        ]

    async def fence(self, me: Attacker) -> list[tuple[str, str]]:
        """A destroy of no session, by ``me`` when it may ask (else by the superadmin), and
        the scheduler's answer: every actor has read what came before it."""
        self.fences += 1
        key, nc = (me.key, me.nc) if me.person else (self.keys["admin"][0], self.root)
        sid = f"fence{self.fences}"
        ask = _event(SessionDestroyRequested, key, session_id=sid, requester=key)
        await _hand_in(nc, key, ask)
        s = await self.until(lambda s: ask.id in s.destroy_answers)
        assert s.destroy_answers[ask.id] == "no such session"
        return [
            (subj.request(key, sid), "SessionDestroyRequested"),
            (subj.LEDGER, "DestroyRejected"),
        ]

    async def answer(self, kind: type[Event], cause: str) -> Any:
        """The event of ``kind`` that answers the request ``cause``, once on the log."""

        def found() -> Event | None:
            return next((r.event for r in reversed(self.records) if _answers(r, kind, cause)), None)

        await self.until(lambda s: found() is not None)
        return found()


def _answers(r: Record, kind: type[Event], cause: str) -> bool:
    return isinstance(r.event, kind) and r.event.causation_id == cause


def _event(kind: type[Any], actor: str, **fields: Any) -> Any:
    return stamp(kind, Provenance(actor, CLOCK.now()), **fields)


def _live(s: ClusterState) -> tuple[object, ...]:
    """What an attack must not change: live sessions, allocations, quota held, tenancy."""
    sessions = {
        i: (v.status, v.owner, v.agent_id, v.devices)
        for i, v in s.sessions.items()
        if v.status not in ENDED
    }
    agents = {
        i: (a.allocated, a.lost, {g: dict(d.shares) for g, d in a.gpus.items()})
        for i, a in s.agents.items()
    }
    held = {
        (where, k): (u.sessions, u.slots)
        for where, usage in (("key", s.usage), ("level", s.held), ("pending", s.pending))
        for k, u in usage.items()
        if u.sessions or u.slots != Slots()
    }
    return sessions, agents, held, copy.deepcopy(s.tenancy)


# ---- the world: tenancy, actors with their own keypairs, a victim ---------------------------


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _tenancy(keys: dict[str, tuple[str, str]]) -> list[AdminCommand]:
    # The victim's folder, shared with nobody.
    return [*tenancy(keys), CreateVfolder(vfolder_id="vf-vic", name="vic-data", user="vic")]


def _policies(keys: dict[str, tuple[str, str]]) -> list[AdminCommand]:
    """LIMITS as policies (a keypair's named by its access key)."""

    def total(fgpu: int) -> ResourcePolicy:
        return ResourcePolicy(total_slots=Slots(cpu=UNLIMITED, mem=UNLIMITED, fgpu=fgpu))

    return [
        SetPolicy(
            level=level,
            target=keys[target][0] if level is PolicyLevel.KEYPAIR else target,
            policy=total(fgpu),
        )
        for level, limits in LIMITS.items()
        for target, fgpu in limits.items()
    ]


@asynccontextmanager
async def _actors(c: Secured) -> AsyncIterator[None]:
    """Registrar, quota, scheduler and agent a1, each on a connection of its own keypair."""
    async with AsyncExitStack() as stack:
        conns = {
            kind: await stack.enter_async_context(
                connected(c.url, f"fgpu-{kind}", Identity(*c.services[kind]))
            )
            for kind in SERVICES
        }
        tg = await stack.enter_async_context(anyio.create_task_group())
        # Drops said at once: each attack's are told before its fence.
        await tg.start(functools.partial(run_intake, window_s=0.0), conns["intake"])
        await tg.start(run_registrar, conns["registrar"].log)
        await tg.start(run_quota, conns["quota"].log)
        await tg.start(run_scheduler, conns["scheduler"].log, conns["scheduler"].bus)
        # As ``fgpu agent`` keeps ended sessions' output: under $FGPU_HOME.
        agent_ = functools.partial(run_agent, output_root=fgpu_home() / "output")
        await tg.start(agent_, conns["agent:a1"], DummyRuntime(), agent_config("a1"))
        yield
        tg.cancel_scope.cancel()


async def _advisories(c: Secured, into: Advisories) -> nats.NATS:
    """The system account's connection, listening to the server's refused connections."""
    nc = await c.connect(user=SYS_USER, password=c.auth.sys_password)
    await nc.subscribe("$SYS.SERVER.*.CLIENT.AUTH.ERR", cb=into.on_msg)
    await nc.flush()
    return nc


@pytest.fixture(scope="module")
async def world() -> AsyncIterator[World]:
    # Every refusal written: the access audit's flood limit is not what is tested here.
    limiter = AccessLimiter(per_key=100_000, total=1_000_000)
    async with secured_cluster(services=SERVICES, limiter=limiter) as c, AsyncExitStack() as on:
        keys = {name: (new_access_key(), new_secret()) for name in PEOPLE}
        for command in _tenancy(keys):
            await c.setup.append(subj.TENANCY, system_applied(command, CLOCK))
        keys |= {"admin": (c.root.access_key, c.root.secret), **c.services}
        decoys = await c.client(*c.services["quota"])
        on.push_async_callback(decoys.close)
        decoy = {"durable_name": DECOY, "ack_policy": "explicit", "filter_subject": "fgpu.>"}
        body = json.dumps({"stream_name": subj.STREAM, "config": decoy}).encode()
        made = await decoys.request(f"$JS.API.CONSUMER.CREATE.FGPU.{DECOY}.fgpu.>", body, timeout=5)
        assert "error" not in json.loads(made.data), made.data
        await on.enter_async_context(_actors(c))
        vic = await c.log_as(*keys["vic"])
        on.push_async_callback(vic.close)
        sender = JetStreamSender(vic.client, keys["vic"][0])
        [victim] = await Client(vic, CLOCK, keys["vic"][0], sender=sender).create(
            image=IMAGE, slots=SMALL
        )
        root = await c.client(*keys["admin"])
        on.push_async_callback(root.close)
        advisories = Advisories()
        on.push_async_callback((await _advisories(c, advisories)).close)
        w = World(c, keys, victim, advisories, root, decoys)
        await w.until(lambda s: _status(s, victim) is SessionStatus.RUNNING)
        for command in [*_policies(keys), RevokeKeypair(access_key=keys["rv"][0])]:
            await c.setup.append(subj.TENANCY, system_applied(command, CLOCK))
        await w.caught_up()
        yield w


def _status(s: ClusterState, sid: str) -> SessionStatus | None:
    v = s.sessions.get(sid)
    return None if v is None else v.status


# ---- the attacks ----------------------------------------------------------------------------
# Each publishes on ``me``'s connection and returns what it must leave (Outcome); it waits
# for the refusals our actors write itself, and checks their reasons.

Attack = Callable[[World, Attacker], Awaitable[Outcome]]


async def _publish(me: Attacker, subject: str, event: Event, **kw: Any) -> str:
    """``event`` published on ``subject``; a person's on its own request subjects is handed
    to the intake instead (a person may publish there alone), which writes it there."""
    if me.person and subject.startswith((f"fgpu.req.{me.key}.", f"fgpu.admin.{me.key}.")):
        await _hand_in(me.nc, me.key, event, **kw)
    else:
        await me.nc.publish(subject, encode(event), **kw)
    return subject


async def _hand_in(nc: nats.NATS, key: str, event: Event, **kw: Any) -> None:
    await nc.publish(subj.intake(key), encode_many([event]), **kw)


async def forge_placement(w: World, me: Attacker) -> Outcome:
    """A stop order for the victim's session on the scheduler's ledger."""
    order = _event(SessionTerminating, "scheduler", session_id=w.victim, agent_id="a1", reason="x")
    return Outcome(denied=[f"publish {await _publish(me, subj.LEDGER, order)}"])


async def forge_admission(w: World, me: Attacker) -> Outcome:
    yes = _event(SessionAdmitted, "quota", session_id="s-forged", owner=me.key)
    return Outcome(denied=[f"publish {await _publish(me, subj.ADMISSION, yes)}"])


async def forge_pipeline_answer(w: World, me: Attacker) -> Outcome:
    """A run's task asked for, as the pipeline actor, on the run's own subject."""
    asked = _event(
        PipelineTaskRequested,
        "pipeline",
        run_id="p-forged",
        task="t",
        round=0,
        attempt=1,
        session_id="s-forged",
    )
    return Outcome(denied=[f"publish {await _publish(me, subj.pipeline_run('p-forged'), asked)}"])


async def forge_tenancy(w: World, me: Attacker) -> Outcome:
    """A tenancy change, applied as the system's: a new superadmin."""
    me_too = CreateUser(user=f"forged-{me.role}", domain="lab", role=Role.SUPERADMIN)
    applied = _event(AdminApplied, "registrar", requester="system", command=me_too)
    return Outcome(denied=[f"publish {await _publish(me, subj.TENANCY, applied)}"])


async def forge_agent_report(w: World, me: Attacker) -> Outcome:
    """The victim's session ended, reported on its agent's subject (by agent a1: on
    another agent's)."""
    agent = "a1" if me.person else "a2"
    ended = _event(
        SessionTerminated, agent, session_id=w.victim, agent_id=agent, exit_code=0, reason="x"
    )
    subject = await _publish(me, subj.agent_session(agent, w.victim), ended)
    return Outcome(denied=[f"publish {subject}"])


async def request_as_another(w: World, me: Attacker) -> Outcome:
    """A session and a destroy of the victim's, on the victim's own subjects (the log's,
    which people may not publish on at all, and the victim's intake)."""
    vic = w.keys["vic"][0]
    ask = _event(
        SessionRequested, vic, session_id="s-impostor", owner=vic, image=IMAGE, slots=SMALL
    )
    end = _event(SessionDestroyRequested, vic, session_id=w.victim, requester=vic)
    subjects = [
        await _publish(me, subj.request(vic, "s-impostor"), ask),
        await _publish(me, subj.request(vic, w.victim), end),
    ]
    await me.nc.publish(subj.intake(vic), encode_many([ask, end]))  # the victim's intake
    subjects.append(subj.intake(vic))
    return Outcome(denied=[f"publish {s}" for s in subjects])


def _unlimited(level: PolicyLevel, target: str) -> SetPolicy:
    plenty = Slots(cpu=UNLIMITED, mem=UNLIMITED, fgpu=UNLIMITED)
    return SetPolicy(level=level, target=target, policy=ResourcePolicy(total_slots=plenty))


async def admin_as_another(w: World, me: Attacker) -> Outcome:
    """The superadmin's request to lift one's own limit, on the superadmin's subject."""
    root = w.keys["admin"][0]
    ask = _event(
        AdminRequested, root, requester=root, command=_unlimited(PolicyLevel.KEYPAIR, me.key)
    )
    return Outcome(denied=[f"publish {await _publish(me, subj.admin(root, ask.id), ask)}"])


async def another_named_inside(w: World, me: Attacker) -> Outcome:
    """On one's own subjects, another's name in the payload: a destroy of the victim's
    session as the victim, an admin request as the superadmin (agent a1: a report as agent
    a2). A person's are handed to the intake, which writes neither: one record says what
    it dropped of the key, and why. An agent's are stored, but each stands on a subject
    not its own: refused as a bad payload."""
    if me.person:
        return await _named_inside_by_a_person(w, me)
    else:
        as_a2 = _event(
            SessionTerminated, "a2", session_id=w.victim, agent_id="a2", exit_code=0, reason="x"
        )
        sent = [(subj.agent_session("a1", w.victim), as_a2)]
    before = w.state.last_seq
    stored = []
    for subject, e in sent:
        await _publish(me, subject, e)
        stored += [(subject, type(e).__name__), (subj.SYS, "PayloadRejected")]
    found = await w.until(
        lambda s: sum(isinstance(r.event, PayloadRejected) for r in _after(w, before)) == len(sent)
    )
    rejected = [r.event for r in _after(w, before) if isinstance(r.event, PayloadRejected)]
    assert {r.subject for r in rejected} == {s for s, _ in sent}
    assert all("may not stand on subject" in r.error for r in rejected), rejected
    assert _status(found, w.victim) is SessionStatus.RUNNING
    return Outcome(stored=stored)


async def _named_inside_by_a_person(w: World, me: Attacker) -> Outcome:
    vic, root = w.keys["vic"][0], w.keys["admin"][0]
    end = _event(SessionDestroyRequested, vic, session_id=w.victim, requester=vic)
    ask = _event(
        AdminRequested, root, requester=root, command=_unlimited(PolicyLevel.KEYPAIR, me.key)
    )
    as_vic = _event(SessionDestroyRequested, me.key, session_id=w.victim, requester=vic)
    before = w.state.last_seq
    for e in (end, ask, as_vic):
        await _hand_in(me.nc, me.key, e)

    def dropped() -> list[RequestsDropped]:
        return [
            r.event
            for r in _after(w, before)
            if isinstance(r.event, RequestsDropped) and r.event.owner == me.key
        ]

    await w.until(lambda s: sum(d.refused for d in dropped()) == 3)
    assert dropped()[0].reason == f"a request of {me.key} in the name of {vic}"
    assert sum(d.rate_limited for d in dropped()) == 0
    return Outcome()


def _after(w: World, seq: int) -> list[Record]:
    return [r for r in w.records if r.seq > seq]


async def _admin_asks(
    w: World, me: Attacker, commands: list[AdminCommand]
) -> tuple[Outcome, list[AdminRefused]]:
    """Each of ``commands`` asked by ``me`` on its own admin subject, and the registrar's
    refusals; an agent may not even ask (the server refuses the first)."""
    if not me.person:
        ask = _event(AdminRequested, me.key, requester=me.key, command=commands[0])
        subject = await _publish(me, subj.admin(me.key, ask.id), ask)
        return Outcome(denied=[f"publish {subject}"]), []
    outcome, refusals = Outcome(), []
    for command in commands:
        ask = _event(AdminRequested, me.key, requester=me.key, command=command)
        subject = await _publish(me, subj.admin(me.key, ask.id), ask)
        refusals.append(await w.answer(AdminRefused, ask.id))
        outcome.stored += [(subject, "AdminRequested"), (subj.TENANCY, "AdminRefused")]
    return outcome, refusals


async def set_policy(w: World, me: Attacker) -> Outcome:
    """Lift one's own keypair's limit; a domain admin: its own domain's (above its role)
    and a keypair's of another domain."""
    if me.who == "oadmin":
        commands = [
            _unlimited(PolicyLevel.DOMAIN, "other"),
            _unlimited(PolicyLevel.KEYPAIR, w.keys["vic"][0]),
        ]
    else:
        commands = [_unlimited(PolicyLevel.KEYPAIR, me.key)]
    outcome, refusals = await _admin_asks(w, me, commands)
    role = "user" if me.who != "oadmin" else "domain-admin"
    for refused in refusals:
        assert (refused.code, refused.reason) == (
            "forbidden",
            f"{role} {me.who} may not set policy",
        )
    return outcome


async def revoke_anothers_keypair(w: World, me: Attacker) -> Outcome:
    outcome, refusals = await _admin_asks(w, me, [RevokeKeypair(access_key=w.keys["vic"][0])])
    role = "user" if me.who != "oadmin" else "domain-admin"
    for refused in refusals:
        assert (refused.code, refused.reason) == (
            "forbidden",
            f"{role} {me.who} may not revoke keypair",
        )
    return outcome


async def revive_revoked_key(w: World, me: Attacker) -> Outcome:
    """Make the revoked access key one's own again, with a secret one knows (a user may
    make keypairs of its own); then connect with it."""
    rv, secret = w.keys["rv"][0], new_secret()
    revive = CreateKeypair(
        access_key=rv, user=me.who if me.person else "ua", secret_hash=hash_secret(secret)
    )
    outcome, refusals = await _admin_asks(w, me, [revive])
    for refused in refusals:
        assert (refused.code, refused.reason) == ("conflict", f"access key {rv} exists")
    for tried in (secret, w.keys["rv"][1]):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await w.c.connect(user=rv, password=tried, inbox_prefix=inbox(rv))
    return outcome


async def _unanswered(me: Attacker, asks: dict[str, bytes]) -> tuple[list[str], list[bytes]]:
    """``asks`` published with a reply subject of ``me``'s own; what came back there."""
    answers: list[bytes] = []

    async def heard(msg: Any) -> None:
        answers.append(msg.data)

    reply = f"{inbox(me.key)}.asks"
    await me.nc.subscribe(reply, cb=heard)
    for subject, body in asks.items():
        await me.nc.publish(subject, body, reply=reply)
    return [f"publish {s}" for s in asks], answers


async def manage_the_stream(w: World, me: Attacker) -> Outcome:
    """Delete, purge, reconfigure the stream or a message of it; read a message by
    sequence or the victim's last by subject; copy the stream into a mirror of one's own."""
    stream, js = subj.STREAM, "$JS.API"
    before = await w.c.setup.stream_info()
    mirror = {"name": "SPY", "mirror": {"name": stream}}
    asks = {
        f"{js}.STREAM.DELETE.{stream}": b"",
        f"{js}.STREAM.PURGE.{stream}": b"{}",
        f"{js}.STREAM.UPDATE.{stream}": json.dumps({"name": stream, "max_msgs": 1}).encode(),
        f"{js}.STREAM.MSG.DELETE.{stream}": b'{"seq": 1}',
        f"{js}.STREAM.MSG.GET.{stream}": b'{"seq": 1}',
        f"{js}.DIRECT.GET.{stream}": b'{"seq": 1}',
        f"{js}.DIRECT.GET.{stream}.{subj.request(w.keys['vic'][0], w.victim)}": b"",
        f"{js}.STREAM.CREATE.SPY": json.dumps(mirror).encode(),
    }
    denied, answers = await _unanswered(me, asks)
    await me.told.violations(denied)
    after = await w.c.setup.stream_info()
    assert (after.subjects, after.first_seq, after.created) == (
        before.subjects,
        before.first_seq,
        before.created,
    )
    assert answers == []
    return Outcome(denied=denied)


async def _decoy(w: World) -> dict[str, Any]:
    reply = await w.decoys.request(f"$JS.API.CONSUMER.INFO.FGPU.{DECOY}", b"", timeout=5)
    config: dict[str, Any] = json.loads(reply.data)["config"]
    return config


async def manage_consumers(w: World, me: Attacker) -> Outcome:
    """Make a consumer of a name not one's own (to read the log: a person has none, a
    service reads through its own), or change, delete, pull from, acknowledge or look at
    another's: the decoy, the scheduler's durable, another keypair's reader. Changed to
    hear nothing, an actor's durable would stall it."""
    before = await _decoy(w)
    js = f"$JS.API.CONSUMER.{{}}.{subj.STREAM}"
    changed = {**before, "filter_subject": "fgpu.nothing"}
    update = json.dumps({"stream_name": subj.STREAM, "config": changed}).encode()
    spy = json.dumps({"stream_name": subj.STREAM, "config": {"name": "spy"}}).encode()
    readers = reader_names(w.keys["scheduler"][0])
    asks = {
        # Unnamed (nats-py's ordered consumers): the server names the consumer from the
        # body, here the decoy's, so this one would change it.
        js.format("CREATE"): update,
        f"{js.format('CREATE')}.{DECOY}": update,
        f"{js.format('CREATE')}.{DECOY}.fgpu.>": update,
        f"{js.format('DURABLE.CREATE')}.{DECOY}": update,
        f"{js.format('CREATE')}.spy.fgpu.>": spy,
        f"{js.format('CREATE')}.{readers[0]}.fgpu.>": spy,
        f"{js.format('DELETE')}.{DECOY}": b"",
        f"{js.format('MSG.NEXT')}.{DECOY}": b'{"batch": 10}',
        f"{js.format('MSG.NEXT')}.{readers[1]}": b'{"batch": 10}',
        f"{js.format('INFO')}.{DECOY}": b"",
        f"{js.format('INFO')}.scheduler": b"",
        f"$JS.ACK.{subj.STREAM}.{DECOY}.1.1.1.1.0": b"+ACK",
    }
    denied, answers = await _unanswered(me, asks)
    await me.told.violations(denied)
    assert await _decoy(w) == before
    assert answers == []
    return Outcome(denied=denied)


async def read_others(w: World, me: Attacker) -> Outcome:
    """Listen to the log's subjects, the victim's requests and inbox, everything; ask agent
    a1 for the victim's session's output, or to follow it (on one's own subject: the agent
    refuses; on the victim's: the server does). Services read the log, through consumers (above)."""
    vic = w.keys["vic"][0]
    listened = ["fgpu.>", f"fgpu.req.{vic}.>", f"{inbox(vic)}.>", ">"]
    for subject in listened:
        await me.nc.subscribe(subject)
    logs = msgspec.json.encode(LogsRequest(session_id=w.victim, tail=10))
    follow = msgspec.json.encode(FollowRequest(session_id=w.victim, channel="c1", tail=10))
    if me.person:
        refused = f"{me.key} may not see session {w.victim}"
        reply = await me.nc.request(subj.agent_request("a1", me.key), logs, timeout=5)
        answer = msgspec.json.decode(reply.data, type=AgentReply)
        assert answer == LogsReply(ok=False, error=refused)
        reply = await me.nc.request(subj.agent_request("a1", me.key), follow, timeout=5)
        answer = msgspec.json.decode(reply.data, type=AgentReply)
        assert answer == ChannelReply(ok=False, error=refused)
    await me.nc.publish(subj.agent_request("a1", vic), logs)
    rpc = f"publish {subj.agent_request('a1', vic)}"
    return Outcome(denied=[f"subscription {s}" for s in listened] + [rpc])


async def exec_in_anothers(w: World, me: Attacker) -> Outcome:
    """Run a command in the victim's session through agent a1: on one's own subject the
    agent refuses, and writes nothing (only a command that runs is audited); on the
    victim's the server does."""
    vic = w.keys["vic"][0]
    run = msgspec.json.encode(ExecRequest(session_id=w.victim, argv=("id",)))
    if me.person:
        reply = await me.nc.request(subj.agent_request("a1", me.key), run, timeout=5)
        answer = msgspec.json.decode(reply.data, type=AgentReply)
        refused = f"{me.key} may not run commands in session {w.victim}"
        assert answer == ExecReply(ok=False, error=refused)
    await me.nc.publish(subj.agent_request("a1", vic), run)
    return Outcome(denied=[f"publish {subj.agent_request('a1', vic)}"])


async def channel_into_anothers(w: World, me: Attacker) -> Outcome:
    """Open a terminal in the victim's session through agent a1 (on one's own subject the
    agent refuses, and writes nothing: only a channel that opens is audited), hear the
    victim's channels, send into one, or ask on the victim's subject: the server refuses."""
    vic = w.keys["vic"][0]
    shell = msgspec.json.encode(ShellRequest(session_id=w.victim, channel="c1"))
    if me.person:
        reply = await me.nc.request(subj.agent_request("a1", me.key), shell, timeout=5)
        answer = msgspec.json.decode(reply.data, type=AgentReply)
        refused = f"{me.key} may not run commands in session {w.victim}"
        assert answer == ChannelReply(ok=False, error=refused)
    up, _ = subj.channel("a1", vic, "c1")
    listened = f"{subj.CHANNEL_PREFIX}.*.{vic}.*.down"
    await me.nc.subscribe(listened)
    await me.nc.publish(up, encode_frame(Data(b"id\n")))
    await me.nc.publish(subj.agent_request("a1", vic), shell)
    return Outcome(
        denied=[
            f"subscription {listened}",
            f"publish {up}",
            f"publish {subj.agent_request('a1', vic)}",
        ]
    )


async def destroy_anothers(w: World, me: Attacker) -> Outcome:
    """A destroy of the victim's session, on one's own subject: the scheduler refuses."""
    end = _event(SessionDestroyRequested, me.key, session_id=w.victim, requester=me.key)
    subject = await _publish(me, subj.request(me.key, w.victim), end)
    if not me.person:
        return Outcome(denied=[f"publish {subject}"])
    refused: DestroyRejected = await w.answer(DestroyRejected, end.id)
    assert refused.reason == "the session belongs to another access key"
    assert w.state.destroy_answers[end.id] == refused.reason
    return Outcome(stored=[(subject, "SessionDestroyRequested"), (subj.LEDGER, "DestroyRejected")])


async def forge_a_scan(w: World, me: Attacker) -> Outcome:
    """What the victim's folder holds, said as the storage service (its quota checks scan
    anew; the scan shows in ``fgpu vfolder ls``)."""
    scan = _event(
        VfolderScanned, "storage:local", host="local", vfolder_id="vf-vic", bytes=0, files=0
    )
    return Outcome(denied=[f"publish {await _publish(me, subj.storage('local'), scan)}"])


async def forge_serving(w: World, me: Attacker) -> Outcome:
    """An endpoint of one's own, created as the serving actor's decision (its replicas
    would be asked for in one's name, and would run)."""
    made = _event(
        EndpointCreated,
        "serving",
        endpoint_id=f"ep-{me.who}",
        name=f"forged-{me.who}",
        owner=me.key,
        domain="lab",
        project="p",
        group="default",
        public=True,
    )
    return Outcome(denied=[f"publish {await _publish(me, subj.SERVING, made)}"])


async def forge_health(w: World, me: Attacker) -> Outcome:
    """A replica found healthy, said as a router: it would take traffic."""
    report = _event(
        ReplicaHealthReported,
        "router:r1",
        router="r1",
        endpoint_id="ep-x",
        session_id=w.victim,
        healthy=True,
    )
    return Outcome(denied=[f"publish {await _publish(me, subj.route('r1'), report)}"])


async def mount_anothers_folder(w: World, me: Attacker) -> Outcome:
    """A session of one's own mounting the victim's folder: the quota actor refuses."""
    sid = f"s-mount-{me.who}"
    ask = _event(
        SessionRequested,
        me.key,
        session_id=sid,
        owner=me.key,
        image=IMAGE,
        slots=SMALL,
        mounts=(VfolderMount(name="vf-vic"),),
    )
    subject = await _publish(me, subj.request(me.key, sid), ask)
    if not me.person:
        return Outcome(denied=[f"publish {subject}"])
    rejected: SessionRejected = await w.answer(SessionRejected, ask.id)
    assert rejected.code == "vfolder"
    assert rejected.reason == f"user {me.who} has no folder 'vf-vic' (or may not use it)"
    return Outcome(stored=[(subject, "SessionRequested"), (subj.ADMISSION, "SessionRejected")])


def exceed(level: PolicyLevel) -> Attack:
    """A session over the attacker's ``level`` policy (and within the levels before)."""

    async def attack(w: World, me: Attacker) -> Outcome:
        sid = f"s-over-{level}-{me.who}"
        big = Slots(cpu=1000, mem=1 << 30, fgpu=EXCEED[level])
        ask = _event(SessionRequested, me.key, session_id=sid, owner=me.key, image=IMAGE, slots=big)
        subject = await _publish(me, subj.request(me.key, sid), ask)
        if not me.person:
            return Outcome(denied=[f"publish {subject}"])
        rejected: SessionRejected = await w.answer(SessionRejected, ask.id)
        assert rejected.code == "quota"
        assert rejected.reason.startswith(_policy_refusal(me.who, level)), rejected.reason
        assert _status(w.state, sid) is SessionStatus.REJECTED
        return Outcome(stored=[(subject, "SessionRequested"), (subj.ADMISSION, "SessionRejected")])

    return attack


def _policy_refusal(who: str, level: PolicyLevel) -> str:
    domain, project, _ = PEOPLE[who]
    target = {
        PolicyLevel.KEYPAIR: who,
        PolicyLevel.USER: who,
        PolicyLevel.PROJECT: f"{domain}/{project}",
        PolicyLevel.DOMAIN: domain,
    }[level]
    named = "" if level is PolicyLevel.KEYPAIR else f" ({target})"
    return f"{level} policy{named} allows {format_fgpu(LIMITS[level][target])} fGPU,"


async def hide_a_refusal(w: World, me: Attacker) -> Outcome:
    """Take, beforehand, the message ids one would guess for the quota actor's answers to
    bad payloads (``payload-rejected-<sequence>``, as they once were; the stream's dedupe
    window is stream-wide), then send a bad payload: its refusal must still reach the log."""
    if me.person:
        return await _bad_payload_of_a_person(w, me)
    holders = 20
    # Messages the fold ignores, so that nobody answers them: a report of a session the
    # agent does not hold.
    subject = subj.agent_session("a1", "ghost")
    holder = _event(
        SessionTerminated, "a1", session_id="ghost", agent_id="a1", exit_code=0, reason="x"
    )
    base = await w.c.setup.last_seq()
    js = me.nc.jetstream()
    for i in range(holders):
        taken = f"payload-rejected-{base + holders + 1 + i}"
        await js.publish(subject, encode(holder), headers={"Nats-Msg-Id": taken})
    bad = (await js.publish(subject, b"not an event")).seq
    if not base + holders < bad <= base + 2 * holders:
        pytest.fail(f"the ids taken ({base + holders + 1}-{base + 2 * holders}) missed {bad}")
    # Past the ids taken, so that no later case's bad payload lands on one of them.
    fillers = 0
    while (await js.publish(subject, encode(holder))).seq < base + 2 * holders:
        fillers += 1
    # The quota actor answers bad payloads before it decides on requests: once it has
    # refused the superadmin a session, it has answered the bad payload (or not at all).
    root = w.keys["admin"][0]
    ask = _event(
        SessionRequested,
        root,
        session_id=f"s-nowhere-{me.role}",
        owner=root,
        image=IMAGE,
        slots=SMALL,
        project="nowhere",
    )
    await _hand_in(w.root, root, ask)
    await w.answer(SessionRejected, ask.id)
    answered = [r.event for r in w.records if isinstance(r.event, PayloadRejected)]
    assert any(e.stream_seq == bad for e in answered), "the refusal was suppressed"
    return Outcome(
        stored=[(subject, type(holder).__name__)] * (holders + fillers + 1)
        + [(subject, "Malformed"), (subj.SYS, "PayloadRejected")]
        + [(subj.request(root, ask.session_id), "SessionRequested")]
        + [(subj.ADMISSION, "SessionRejected")]
    )


async def _bad_payload_of_a_person(w: World, me: Attacker) -> Outcome:
    """A person's bad payload never reaches the log (people hand requests to the intake):
    there is no answer to hide. The intake drops it, and says so."""
    before = w.state.last_seq
    await me.nc.publish(subj.intake(me.key), b"not an event")

    def dropped() -> list[RequestsDropped]:
        return [
            r.event
            for r in _after(w, before)
            if isinstance(r.event, RequestsDropped) and r.event.owner == me.key
        ]

    await w.until(lambda s: bool(dropped()))
    [said] = dropped()
    assert said.refused == 1 and (said.reason or "").startswith("not requests"), said
    return Outcome()


async def forge_a_snapshot(w: World, me: Attacker) -> Outcome:
    """Write the scheduler's snapshot (a chunk, the meta naming it) or purge it: a
    scheduler or agent started from a forged state would act on it. A person may not read
    it either (it holds the whole cluster's state); an agent may, as it starts from it."""
    bucket, stream = subj.snapshot_bucket("scheduler"), subj.snapshot_stream("scheduler")
    js = w.c.setup.nc.jetstream()
    before = (await js.stream_info(stream)).state
    meta = f"$O.{bucket}.M.{base64.urlsafe_b64encode(b'state').decode()}"
    forged = {"name": "state", "bucket": bucket, "nuid": "forged", "size": 1, "chunks": 1}
    asks = {
        f"$O.{bucket}.C.forged": b"x",
        meta: json.dumps(forged).encode(),
        f"$JS.API.STREAM.PURGE.{stream}": b"{}",
    }
    if me.person:
        asks[f"$JS.API.STREAM.MSG.GET.{stream}"] = json.dumps({"last_by_subj": meta}).encode()
        asks[f"$JS.API.STREAM.INFO.{stream}"] = b""
    denied, answers = await _unanswered(me, asks)
    await me.told.violations(denied)
    after = (await js.stream_info(stream)).state
    assert (after.messages, after.last_seq) == (before.messages, before.last_seq)
    assert answers == []
    return Outcome(denied=denied)


async def _captured(w: World) -> dict[str, tuple[int, int]]:
    """What each snapshot bucket's stream holds: (messages, last sequence)."""
    js = w.c.setup.nc.jetstream()
    held = {}
    for kind in subj.SNAPSHOT_KINDS:
        state = (await js.stream_info(subj.snapshot_stream(kind))).state
        held[kind] = (state.messages, state.last_seq)
    return held


async def aim_replies_at_the_log(w: World, me: Attacker) -> Outcome:
    """Requests of one's own (a destroy, an administrator's command, a question to agent
    a1), each with its reply subject set to a subject the stream or a snapshot bucket
    captures: the stream's acknowledgement and the agent's answer would be stored there
    (junk on the ledger; a bucket's meta replaced). A person's replies stay in people's
    account, so nothing lands: the log holds the requests and their refusals, no more."""
    meta = f"$O.{subj.snapshot_bucket('scheduler')}.M.{base64.urlsafe_b64encode(b'state').decode()}"
    targets = [subj.LEDGER, subj.TENANCY, subj.ADMISSION, subj.agent("a1"), meta]
    before = await _captured(w)
    stored: list[tuple[str, str]] = []
    if not me.person:
        return await _aim_a_services_replies(w, me)
    for i, target in enumerate(targets):
        end = _event(SessionDestroyRequested, me.key, session_id=f"gone{i}", requester=me.key)
        subject = subj.request(me.key, end.session_id)
        await _publish(me, subject, end, reply=target)
        stored += [(subject, "SessionDestroyRequested"), (subj.LEDGER, "DestroyRejected")]
        await w.answer(DestroyRejected, end.id)
    ask = _event(AdminRequested, me.key, requester=me.key, command=CreateDomain(domain="evil"))
    await _publish(me, subj.admin(me.key, ask.id), ask, reply=subj.TENANCY)
    refused: AdminRefused = await w.answer(AdminRefused, ask.id)
    stored += [(subj.admin(me.key, ask.id), "AdminRequested"), (subj.TENANCY, "AdminRefused")]
    logs = msgspec.json.encode(LogsRequest(session_id=w.victim, tail=10))
    for target in (subj.LEDGER, meta):
        await me.nc.publish(subj.agent_request("a1", me.key), logs, reply=target)
    # The agent's answers, had they landed, came before the fence's answer.
    assert refused.code == "forbidden"
    assert await _captured(w) == before
    return Outcome(stored=stored)


async def _aim_a_services_replies(w: World, me: Attacker) -> Outcome:
    """A service shares the log's account: the acknowledgement of its own report, aimed at
    a decision subject, is stored there. It is not an event, let alone one of that
    subject's: every fold takes it for a malformed payload, which the quota actor answers,
    and nothing else."""
    a1, start = w.state.agents["a1"], w.state.last_seq
    report = _event(AgentImagesReported, "a1", agent_id="a1", images=a1.image_details)
    stored = [(subj.agent("a1"), "AgentImagesReported")] * 2
    for target in (subj.LEDGER, subj.TENANCY):
        await _publish(me, subj.agent("a1"), report, reply=target)
        stored += [(target, "Malformed"), (subj.SYS, "PayloadRejected")]

    def answered(s: ClusterState) -> bool:
        rejected = [r for r in w.records if r.seq > start and r.subject == subj.SYS]
        return len(rejected) == 2 and not s.malformed

    await w.until(answered)
    return Outcome(stored=stored)


ATTACKS: dict[str, Attack] = {
    "publish-sched": forge_placement,
    "publish-admission": forge_admission,
    "publish-pipeline-answer": forge_pipeline_answer,
    "publish-tenancy": forge_tenancy,
    "publish-agent-report": forge_agent_report,
    "request-on-anothers-subject": request_as_another,
    "admin-on-anothers-subject": admin_as_another,
    "anothers-name-on-own-subject": another_named_inside,
    "set-policy-above-role": set_policy,
    "revoke-anothers-keypair": revoke_anothers_keypair,
    "revive-revoked-key": revive_revoked_key,
    "manage-stream": manage_the_stream,
    "manage-consumers": manage_consumers,
    "forge-snapshot": forge_a_snapshot,
    "aim-replies-at-the-log": aim_replies_at_the_log,
    "read-others": read_others,
    "exec-in-anothers-session": exec_in_anothers,
    "channel-into-anothers-session": channel_into_anothers,
    "destroy-anothers-session": destroy_anothers,
    "publish-storage-scan": forge_a_scan,
    "publish-serving": forge_serving,
    "publish-route": forge_health,
    "mount-anothers-folder": mount_anothers_folder,
    **{f"exceed-{level}-policy": exceed(level) for level in PolicyLevel},
    "hide-a-refusal": hide_a_refusal,
    # The read API's rows join here, as attacks of the same roles with the same checks:
    # another tenant's sessions and events through HTTP, the SSE stream and state?at=.
}
# Known holes, each a finding with its repro: the case fails, as said, until the product
# is fixed (then, being strict, it fails for passing: take it out of here). None now.
_HOLES: dict[tuple[str, str], tuple[str, type[BaseException]]] = {}


def _case(role: str, attack: str) -> Any:
    hole = _HOLES.get((role, attack))
    marks = [] if hole is None else [pytest.mark.xfail(strict=True, reason=hole[0], raises=hole[1])]
    return pytest.param(role, attack, id=f"{role}-{attack}", marks=marks)


MATRIX = [_case(role, attack) for role in ROLES for attack in ATTACKS]


# ---- the matrix -----------------------------------------------------------------------------


@asynccontextmanager
async def _attacker(w: World, role: str) -> AsyncIterator[Attacker]:
    who = ROLES[role]
    key, secret = w.keys[who]
    told = Told()
    nc = await w.c.connect(
        user=key, password=secret, inbox_prefix=inbox(key), error_cb=told.on_error
    )
    try:
        yield Attacker(role, who, key, nc, told)
    finally:
        await nc.close()


@pytest.mark.anyio
@pytest.mark.parametrize(("role", "attack"), MATRIX)
async def test_an_attack_is_refused_changes_nothing_and_is_seen(
    world: World, role: str, attack: str
) -> None:
    w = world
    state = await w.caught_up()
    seq, live = state.last_seq, _live(state)
    audit_from = await w.c.setup.last_seq()
    if role in AT_THE_DOOR:
        await _turned_away(w, role, audit_from)
        return
    async with _attacker(w, role) as me:
        outcome = await ATTACKS[attack](w, me)
        with anyio.fail_after(10):
            await me.told.violations(outcome.denied)
        fenced = await w.fence(me)
    # Nothing changed: up to the fence the log holds the attack's requests and their
    # refusals only, and the fold of it is as it was.
    assert sorted(w.stored_since(seq)) == sorted(outcome.stored + fenced)
    assert _live(w.state) == live
    assert _status(w.state, w.victim) is SessionStatus.RUNNING
    # Seen: the server's log names who tried what (by the access key, the name it knows
    # each connection by), and so does the access audit.
    logged = (await anyio.Path(w.c.server_log).read_text(errors="replace")).splitlines()
    for kind, subject in map(_split, outcome.denied):
        lines = [
            line for line in logged if f'{kind.title()} Violation - Subject "{subject}"' in line
        ]
        assert any(f'/user:{me.key}"' in line for line in lines), (kind, subject, lines[-3:])
    await _audited(w, audit_from, me.key, outcome.denied)


async def _turned_away(w: World, role: str, audit_from: int) -> None:
    """Not let in (anonymous; a revoked keypair, with its secret), which the access audit
    and the server's advisories tell."""
    key, secret = w.keys[ROLES[role]] if role != "anonymous" else ("", "")
    given = {"user": key, "password": secret, "inbox_prefix": inbox(key)} if key else {}
    heard = len(w.advisories.heard)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await w.c.connect(**given)
    with anyio.fail_after(10):
        refused = await _audit(w, audit_from, lambda e: e.owner == key and e.what == "connect")
        advisory = await w.advisories.of(key, heard)
    assert refused.reason == f"access key {key!r} is unknown or revoked"
    assert advisory["reason"] == "Authentication Failure"


async def _audit(w: World, after: int, wanted: Callable[[AccessRefused], bool]) -> AccessRefused:
    """The first refusal in the access audit after ``after`` that is ``wanted``."""
    async with aclosing(w.c.setup.tail(after, subject=subj.access("nats"))) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, AccessRefused) and wanted(r.event):
                    return r.event
    raise AssertionError("the log ended")


async def _audited(w: World, after: int, key: str, denied: list[str]) -> None:
    """Until the access audit holds a refusal of ``key`` for each of ``denied``."""
    wanted = set(denied)

    def one_of_them(e: AccessRefused) -> bool:
        wanted.discard(e.what if e.owner == key else "")
        return not wanted

    if wanted:
        with anyio.fail_after(10):
            await _audit(w, after, one_of_them)
