"""Property: across random tenancy histories, no admission takes a keypair, user, project
or domain past the policy it has at that moment, every request that fits them all (from a
member of its project) is admitted, and the quota held at each level is always exactly
what its admitted sessions hold (no counter drifts).

The fold and the quota rule (``services.domain.scheduling.quota.admission_refusal``) are
driven as the quota actor drives them: each request folded, judged, and its decision folded.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime

import hypothesis.strategies as st
from hypothesis import given, settings

from events import (
    AdminApplied,
    AgentRegistered,
    AnyEvent,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    DevicePlacement,
    GpuInfo,
    PolicyLevel,
    Record,
    ResourcePolicy,
    SessionAdmitted,
    SessionCancelled,
    SessionRejected,
    SessionRequested,
    SessionScheduled,
    SessionTerminated,
    SetPolicy,
    Slots,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.records import OwnerUsage, SessionView
from services.domain.resources import add, fits
from services.domain.scheduling.quota import admission_refusal, keypair_policy
from services.domain.status import SessionStatus

AT = datetime(2025, 1, 1, tzinfo=UTC)
# Two domains; users of one or two projects; u1 with two keypairs.
KEYS = {"k1": "u1", "k1b": "u1", "k2": "u2", "k3": "u3"}
USERS = {"u1": ("d1", ("p1", "p2")), "u2": ("d1", ("p1",)), "u3": ("d2", ("p3",))}
PROJECTS = {"d1": ("p1", "p2"), "d2": ("p3",)}
TARGETS = {
    PolicyLevel.KEYPAIR: tuple(KEYS),
    PolicyLevel.USER: tuple(USERS),
    PolicyLevel.PROJECT: ("d1/p1", "d1/p2", "d2/p3"),
    PolicyLevel.DOMAIN: tuple(PROJECTS),
}
LIMITS = {
    PolicyLevel.KEYPAIR: (
        "max_sessions",
        "max_pending_sessions",
        "max_pending_slots",
        "total_slots",
        "max_priority",
    ),
    PolicyLevel.USER: ("total_slots", "max_sessions"),
    PolicyLevel.PROJECT: ("total_slots",),
    PolicyLevel.DOMAIN: ("total_slots",),
}
BIG = 1 << 40

slots = st.builds(
    Slots,
    cpu=st.integers(1, 4).map(lambda n: n * 1000),
    mem=st.integers(1, 4).map(lambda n: n << 30),
    fgpu=st.integers(1, 300),
)


@st.composite
def policies(draw: st.DrawFn) -> tuple[PolicyLevel, str, ResourcePolicy]:
    level = draw(st.sampled_from(list(PolicyLevel)))
    target = draw(st.sampled_from(TARGETS[level]))
    fields: dict[str, object] = {}
    for name in draw(st.sets(st.sampled_from(LIMITS[level]))):
        if name in ("max_sessions", "max_pending_sessions"):
            fields[name] = draw(st.integers(0, 3))
        elif name == "max_priority":
            fields[name] = draw(st.integers(0, 100))
        else:
            fields[name] = Slots(
                cpu=draw(st.integers(0, 8)) * 1000,
                mem=draw(st.integers(0, 8)) << 30,
                fgpu=draw(st.integers(0, 600)),
            )
    return level, target, ResourcePolicy(**fields)  # type: ignore[arg-type]


requests = st.tuples(
    st.sampled_from(tuple(KEYS)),
    st.sampled_from(("p1", "p2", "p3", None)),
    slots,
    st.integers(0, 100),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("policy"), policies()),
        st.tuples(st.just("request"), requests),
        st.tuples(st.just("place"), st.integers(0, 50)),
        st.tuples(st.just("end"), st.integers(0, 50)),
    ),
    max_size=60,
)


@dataclass
class History:
    """A log written as the actors would write it, folded as it grows."""

    s: ClusterState = field(default_factory=ClusterState)
    n: int = 0

    def add(self, subject: str, e: AnyEvent) -> None:
        self.n += 1
        evolve(self.s, Record(seq=self.n, subject=subject, event=e))

    def common(self, actor: str) -> dict[str, object]:
        return {"id": f"e{self.n + 1}", "at": AT, "actor": actor}

    def admin(self, command: object) -> None:
        e = AdminApplied(**self.common("system"), requester="system", command=command)  # type: ignore[arg-type]
        self.add(subj.TENANCY, e)

    def request(self, key: str, sid: str, project: str | None, need: Slots, prio: int) -> None:
        e = SessionRequested(
            **self.common(key),  # type: ignore[arg-type]
            session_id=sid,
            owner=key,
            image="img",
            slots=need,
            priority=prio,
            project=project,
        )
        self.add(subj.request(key, sid), e)

    def decide(self, v: SessionView) -> bool:
        """The quota actor's decision on ``v``, folded; whether it admitted."""
        why = v.invalid or admission_refusal(self.s, v)
        who = {"session_id": v.session_id, "owner": v.owner}
        decision: AnyEvent = (
            SessionAdmitted(**self.common("quota"), **who)  # type: ignore[arg-type]
            if why is None
            else SessionRejected(**self.common("quota"), **who, code="quota", reason=why)  # type: ignore[arg-type]
        )
        self.add(subj.ADMISSION, decision)
        return why is None

    def place(self, v: SessionView) -> None:
        placed = (DevicePlacement(gpu_index=int(v.session_id[1:]) % 64, fgpu=v.slots.fgpu),)
        e = SessionScheduled(
            **self.common("scheduler"),  # type: ignore[arg-type]
            session_id=v.session_id,
            owner=v.owner,
            agent_id="a1",
            slots=v.slots,
            devices=placed,
        )
        self.add(subj.LEDGER, e)

    def end(self, v: SessionView) -> None:
        sid = v.session_id
        if v.status is SessionStatus.PENDING:
            e: AnyEvent = SessionCancelled(
                **self.common("scheduler"),
                session_id=sid,
                owner=v.owner,
                reason="gone",  # type: ignore[arg-type]
            )
            self.add(subj.LEDGER, e)
        else:
            e = SessionTerminated(
                **self.common("agent:a1"),  # type: ignore[arg-type]
                session_id=sid,
                agent_id="a1",
                exit_code=0,
                reason="done",
            )
            self.add(subj.agent_session("a1", sid), e)


def _tenancy(h: History) -> None:
    for d, projects in PROJECTS.items():
        h.admin(CreateDomain(domain=d))
        for p in projects:
            h.admin(CreateProject(domain=d, project=p))
    for u, (d, projects) in USERS.items():
        h.admin(CreateUser(user=u, domain=d, projects=projects))
    for k, u in KEYS.items():
        h.admin(CreateKeypair(access_key=k, user=u, secret_hash="-"))
    gpus = tuple(
        GpuInfo(index=i, uuid=f"g{i}", model="m", mem=80 << 30, sm_count=132) for i in range(64)
    )
    h.add(
        subj.agent("a1"),
        AgentRegistered(
            **h.common("agent:a1"),  # type: ignore[arg-type]
            agent_id="a1",
            capacity=Slots(cpu=BIG, mem=BIG, fgpu=64 * 100),
            gpus=gpus,
            fgpu_per_gpu=100,
        ),
    )


def _admissible(v: SessionView, h: History) -> bool:
    """The policy as a reference, before ``v`` is decided: its owner's user is a member
    of its project (as the tenancy above made them), and admitting it takes no level past
    a limit of its policy."""
    s, t = h.s, h.s.tenancy
    user = KEYS[v.owner]
    domain, projects = USERS[user]
    if v.invalid is not None or v.project not in {f"{domain}/{p}" for p in projects}:
        return False
    none = OwnerUsage()
    levels = [
        (keypair_policy(s, v.owner), s.usage.get(v.owner, none), s.pending.get(v.owner, none)),
        (t.policies.get((PolicyLevel.USER, user)), s.held.get(f"user:{user}", none), None),
        (
            t.policies.get((PolicyLevel.PROJECT, v.project)),
            s.held.get(f"project:{v.project}", none),
            None,
        ),
        (t.policies.get((PolicyLevel.DOMAIN, domain)), s.held.get(f"domain:{domain}", none), None),
    ]
    for policy, held, pending in levels:
        if policy is None:
            continue
        if policy.max_sessions is not None and held.sessions >= policy.max_sessions:
            return False
        if policy.total_slots is not None and not fits(
            add(held.slots, v.slots), policy.total_slots
        ):
            return False
        if policy.max_priority is not None and v.priority > policy.max_priority:
            return False
        if pending is None:
            continue
        n, most = policy.max_pending_sessions, policy.max_pending_slots
        if n is not None and pending.sessions >= n:
            return False
        if most is not None and not fits(add(pending.slots, v.slots), most):
            return False
    return True


def _within(v: SessionView, h: History) -> None:
    """Right after ``v`` was admitted: every level it counts against is within its policy."""
    s, t = h.s, h.s.tenancy
    levels = [
        (keypair_policy(s, v.owner), s.usage[v.owner], s.pending[v.owner]),
        (t.policies.get((PolicyLevel.USER, v.user or "")), s.held[f"user:{v.user}"], None),
        (t.policies.get((PolicyLevel.PROJECT, v.project)), s.held[f"project:{v.project}"], None),
        (t.policies.get((PolicyLevel.DOMAIN, v.domain)), s.held[f"domain:{v.domain}"], None),
    ]
    for policy, held, pending in levels:
        if policy is None:
            continue
        assert policy.max_sessions is None or held.sessions <= policy.max_sessions
        assert policy.total_slots is None or fits(held.slots, policy.total_slots)
        assert policy.max_priority is None or v.priority <= policy.max_priority
        if pending is not None:
            n = policy.max_pending_sessions
            assert n is None or pending.sessions <= n
            most = policy.max_pending_slots
            assert most is None or fits(pending.slots, most)


def _counted(s: ClusterState) -> None:
    """What each level holds is exactly the sum over the sessions that hold quota."""
    want: dict[str, OwnerUsage] = {}
    pending: dict[str, OwnerUsage] = {}

    def count(table: dict[str, OwnerUsage], key: str, v: SessionView) -> None:
        u = table.setdefault(key, OwnerUsage())
        u.sessions += 1
        u.slots = add(u.slots, v.slots)

    for v in s.sessions.values():
        if v.quota_held:
            for key in (f"key:{v.owner}", f"user:{v.user}", f"project:{v.project}"):
                count(want, key, v)
            count(want, f"domain:{v.domain}", v)
            if v.status is SessionStatus.PENDING:
                count(pending, v.owner, v)
    have = {f"key:{k}": u for k, u in s.usage.items()} | s.held
    nonzero = {
        k: (u.sessions, u.slots) for k, u in have.items() if u.sessions or u.slots != Slots()
    }
    assert nonzero == {k: (u.sessions, u.slots) for k, u in want.items()}
    waiting = {k: (u.sessions, u.slots) for k, u in s.pending.items() if u.sessions}
    assert waiting == {k: (u.sessions, u.slots) for k, u in pending.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(policies(), min_size=1, max_size=6), steps)
def test_admissions_never_exceed_a_level_s_policy(
    first: list[tuple[PolicyLevel, str, ResourcePolicy]], plan: list[tuple[str, object]]
) -> None:
    """Policies are set first (so that they bind the requests that follow), and again
    among the requests, lowered or raised while sessions hold quota."""
    h = History()
    _tenancy(h)
    for level, target, policy in first:
        h.admin(SetPolicy(level=level, target=target, policy=policy))
    ids: list[str] = []
    for what, arg in plan:
        if what == "policy":
            level, target, policy = arg  # type: ignore[misc]
            h.admin(SetPolicy(level=level, target=target, policy=policy))
        elif what == "request":
            key, project, need, priority = arg  # type: ignore[misc]
            ids.append(f"s{len(ids)}")
            h.request(key, ids[-1], project, need, priority)
            v = h.s.sessions[ids[-1]]
            admissible = _admissible(v, h)
            admitted = h.decide(v)
            assert admitted == admissible, h.s.sessions[v.session_id]
            if admitted:
                _within(v, h)
        elif ids:
            v = h.s.sessions[ids[int(arg) % len(ids)]]  # type: ignore[call-overload]
            if what == "place" and v.status is SessionStatus.PENDING:
                h.place(v)
            elif what == "end" and v.status in (SessionStatus.PENDING, SessionStatus.SCHEDULED):
                h.end(v)
        _counted(h.s)
