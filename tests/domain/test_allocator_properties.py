"""Property tests of the scheduler's invariants over the fold.

A state machine registers agents, asks for sessions, lets the real ``SchedulerActor.decide``
place them, and ends them the ways sessions end (terminated, errored, cancelled, destroyed),
with late and duplicated records thrown in. Every step goes through ``evolve`` as a Record
with the next sequence, as it would come from the log. After every step:

- no GPU holds more than its capacity, no agent more cpu/mem/fGPU than it offers;
- a session holds at most one allocation, and only while its status says so;
- a share shape follows the rule: at most one device's worth takes one device, more takes
  whole devices plus at most one fraction, and the shares add up to the request;
- what GPUs and agents hold is exactly the sum of what live sessions hold (releases free);
- quota is held from admission until the end;
- after a scheduling round nothing still queued could be placed.

And the fold is deterministic: folding the same records into fresh states twice gives the
same state, which is also the state the live scheduler built with its own decisions.
"""

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from events import (
    AgentLost,
    AgentRegistered,
    AnyEvent,
    GpuInfo,
    Record,
    SessionAdmitted,
    SessionCancelled,
    SessionCpuSampled,
    SessionDestroyRequested,
    SessionErrored,
    SessionPreparing,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    Slots,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.group_shares import GroupShares, agent_capacity
from services.domain.fold.pending import admitted_at, queue_shape, user_of
from services.domain.fold.running_index import RunningIndex
from services.domain.fold.state import evolve, fold, running_at
from services.domain.resources import add
from services.domain.scheduling.allocator import never_fits, place
from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus
from services.ports import EventLog

S = SessionStatus
IMAGE = "fgpu/busybox:latest"
OTHER_IMAGE = "fgpu/other:1"
OWNERS = ("alice", "bob")
GIB = 1 << 30
T0 = datetime(2024, 1, 1, tzinfo=UTC)


class UnusedLog:
    """Stands in for the EventLog where a test only calls ``decide``: any use is a failure."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the scheduler used the log ({name}) in decide")


def new_scheduler() -> SchedulerActor:
    return SchedulerActor(
        cast(EventLog, UnusedLog()), VirtualClock(T0, step=1), monotonic=lambda: 0.0
    )


def gpus(n: int) -> tuple[GpuInfo, ...]:
    return tuple(
        GpuInfo(index=i, uuid=f"GPU-{i}", model="Mock", mem=16 * GIB, sm_count=80) for i in range(n)
    )


def registered(
    agent_id: str, n_gpus: int, per: int, cpu: int, mem: int, images: tuple[str, ...]
) -> AgentRegistered:
    return AgentRegistered(
        id=f"reg-{agent_id}-{n_gpus}-{per}-{cpu}-{mem}-{len(images)}",
        at=T0,
        actor=f"agent:{agent_id}",
        agent_id=agent_id,
        capacity=Slots(cpu=cpu, mem=mem, fgpu=n_gpus * per),
        gpus=gpus(n_gpus),
        fgpu_per_gpu=per,
        images=images,
    )


# ---- the invariants -----------------------------------------------------------------------


def check_shape(fgpu: int, per: int, devices: list[tuple[int, int]]) -> None:
    """The rule of shares: one device up to its worth; above, whole ones plus one fraction."""
    assert sum(q for _, q in devices) == fgpu
    assert len({i for i, _ in devices}) == len(devices), "a device twice"
    assert all(0 < q <= per for _, q in devices)
    if fgpu <= per:
        assert len(devices) == 1
    else:
        whole, rest = divmod(fgpu, per)
        assert sum(1 for _, q in devices if q == per) >= whole
        assert len(devices) == whole + (1 if rest else 0)


def check_invariants(s: ClusterState) -> None:
    holding: dict[str, set[str]] = {a: set() for a in s.agents}
    for sid, v in s.sessions.items():
        if v.status in HOLDS_ALLOCATION:
            assert v.agent_id is not None and v.agent_id in s.agents
            holding[v.agent_id].add(sid)
            a = s.agents[v.agent_id]
            assert v.image in a.images
            check_shape(v.slots.fgpu, a.fgpu_per_gpu, [(d.gpu_index, d.fgpu) for d in v.devices])
        if v.status in ENDED:
            assert all(sid not in a.sessions for a in s.agents.values())
        assert (v.status is S.REQUESTED) == (sid in s.undecided)
        assert (v.status is S.PENDING) == (sid in s.queue)
        if v.status is S.PENDING:  # filed by group and shape, and by user, told or not
            assert sid in s.queue.shapes(v.group)[queue_shape(v)]
            assert sid in s.queue.of_users(v.group)[(v.priority, user_of(v))][queue_shape(v)]
            assert (sid in s.queue.untold(v.group)) == (v.waiting is None)
        # Quota is held from admission until the end, and only then.
        assert v.quota_held == (v.status is S.PENDING or v.status in HOLDS_ALLOCATION)

    for group in s.queue.groups():  # each shape's queue in arrival order, nothing stale
        for queue in s.queue.shapes(group).values():
            assert list(queue.values()) == sorted(queue.values())
            assert all(s.sessions[sid].status is S.PENDING for sid in queue)
        # By admission, the longest waiting first: every queued session of the group.
        admitted = s.queue.admitted_by(group, datetime.max.replace(tzinfo=UTC))
        assert sorted(admitted) == sorted(s.queue.of_group(group))
        by_user = [
            sid for shapes in s.queue.of_users(group).values() for q in shapes.values() for sid in q
        ]
        assert sorted(by_user) == sorted(admitted)
        times = [admitted_at(s.sessions[sid]) for sid in admitted]
        assert times == sorted(times)
    # What DRF weighs, as the fold keeps it: a walk of the agents and their sessions.
    capacity: dict[str, Slots] = {}
    held_in: dict[str, dict[str, Slots]] = {}
    for a in s.agents.values():
        capacity[a.group] = add(capacity.get(a.group, Slots()), agent_capacity(a))
        for sid in a.sessions:
            v = s.sessions[sid]
            users = held_in.setdefault(a.group, {})
            users[user_of(v)] = add(users.get(user_of(v), Slots()), v.slots)
    # The running sessions, by when their time limits count from: as built from scratch.
    running = RunningIndex()
    for v in s.sessions.values():
        if v.status is S.RUNNING:
            running.add(v, running_at(v))
    assert s.running == running
    rebuilt = GroupShares()  # as a snapshot's decoding builds it: nothing stale kept
    for a in s.agents.values():
        rebuilt.agent(None, a, s.sessions)
        for sid in a.sessions:
            rebuilt.allocated(a.group, s.sessions[sid])
    assert s.shares == rebuilt
    for group in {*capacity, *held_in}:
        assert s.shares.capacity(group) == capacity.get(group, Slots())
        assert dict(s.shares.held(group)) == held_in.get(group, {})
    for agent_id, a in s.agents.items():
        # A session holds at most one allocation, on the agent its view names.
        assert set(a.sessions) == holding[agent_id]
        live = [s.sessions[sid] for sid in a.sessions]
        assert a.allocated == Slots(
            cpu=sum(v.slots.cpu for v in live),
            mem=sum(v.slots.mem for v in live),
            fgpu=sum(v.slots.fgpu for v in live),
        )
        assert a.allocated.cpu <= a.capacity.cpu
        assert a.allocated.mem <= a.capacity.mem
        assert a.allocated.fgpu <= a.capacity.fgpu
        for index, g in a.gpus.items():
            assert 0 <= g.allocated <= g.capacity == a.fgpu_per_gpu
            expected = {
                v.session_id: d.fgpu for v in live for d in v.devices if d.gpu_index == index
            }
            assert g.shares == expected, "a GPU's shares are not its live sessions' shares"

    owners = {v.owner for v in s.sessions.values()} | set(s.usage)
    for owner in owners:
        held = [v for v in s.sessions.values() if v.owner == owner and v.quota_held]
        u = s.usage.get(owner)
        sessions = 0 if u is None else u.sessions
        slots = Slots() if u is None else u.slots
        assert sessions == len(held)
        assert slots == Slots(
            cpu=sum(v.slots.cpu for v in held),
            mem=sum(v.slots.mem for v in held),
            fgpu=sum(v.slots.fgpu for v in held),
        )


def canonical(s: ClusterState, *, with_history_seqs: bool = True) -> dict[str, Any]:
    """Everything a reader can see of the state, in plain comparable values."""
    return {
        "last_seq": s.last_seq,
        "subject_seq": dict(sorted(s.subject_seq.items())),
        "sessions": {
            sid: (
                v.status,
                v.agent_id,
                tuple((d.gpu_index, d.fgpu) for d in v.devices),
                v.quota_held,
                v.waiting,
                v.reason,
                v.exit_code,
                v.container_id,
                v.invalid,
                v.arrival_seq,
                tuple(
                    (t.status, t.event_id, t.seq if with_history_seqs else None) for t in v.history
                ),
            )
            for sid, v in s.sessions.items()
        },
        "agents": {
            aid: (
                a.lost,
                a.capacity,
                a.allocated,
                tuple(a.sessions),
                {i: dict(g.shares) for i, g in a.gpus.items()},
            )
            for aid, a in s.agents.items()
        },
        "usage": {o: (u.sessions, u.slots) for o, u in s.usage.items()},
        "policies": dict(s.policies),
        "queue": list(s.queue),
        "undecided": list(s.undecided),
        "destroys": list(s.destroys),
        "destroy_answers": s.destroy_answers.ids.to_bytes(),
        "destroys_refused": s.destroy_answers.refused,
        "malformed": dict(s.malformed),
        "fit": (s.fit.largest(), list(s.fit.candidates(1))),
    }


# ---- the machine --------------------------------------------------------------------------

agent_shapes = st.tuples(
    st.integers(min_value=1, max_value=8),  # GPUs
    st.sampled_from([100, 200, 400, 500]),  # fGPU quanta per GPU
    st.integers(min_value=1, max_value=64).map(lambda c: c * 1000),  # cpu millis
    st.integers(min_value=1, max_value=256).map(lambda g: g * GIB),  # mem
    st.sampled_from([(IMAGE,), (IMAGE, OTHER_IMAGE)]),
)

requests = st.tuples(
    st.one_of(
        st.integers(min_value=1, max_value=100),  # fractions
        st.integers(min_value=101, max_value=1200),  # several GPUs' worth
        st.sampled_from([25, 50, 100, 150, 200, 250, 400, 500, 800]),
    ),
    st.integers(min_value=1, max_value=16).map(lambda c: c * 500),
    st.integers(min_value=1, max_value=32).map(lambda g: g * GIB),
    st.sampled_from([IMAGE, IMAGE, IMAGE, OTHER_IMAGE]),
    st.sampled_from(OWNERS),
    st.integers(min_value=0, max_value=3),  # priority
)


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState()
        self.records: list[Record] = []
        self.scheduler = new_scheduler()
        self.registrations: dict[str, AgentRegistered] = {}
        self.n = 0

    def _next_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"

    def _log(self, subject: str, e: AnyEvent) -> None:
        """Append ``e`` as the log would, and fold it into the live state."""
        r = Record(seq=len(self.records) + 1, subject=subject, event=e)
        self.records.append(r)
        evolve(self.state, r)

    def _sessions(self, *statuses: SessionStatus) -> list[str]:
        return sorted(sid for sid, v in self.state.sessions.items() if v.status in statuses)

    @initialize(shape=agent_shapes)
    def first_agent(self, shape: tuple[int, int, int, int, tuple[str, ...]]) -> None:
        self.add_agent(shape)

    @precondition(lambda self: len(self.registrations) < 4)
    @rule(shape=agent_shapes)
    def add_agent(self, shape: tuple[int, int, int, int, tuple[str, ...]]) -> None:
        agent_id = f"a{len(self.registrations)}"
        e = registered(agent_id, *shape)
        self.registrations[agent_id] = e
        self._log(subj.agent(agent_id), e)

    @rule(data=st.data())
    def agent_comes_back(self, data: st.DataObject) -> None:
        """A re-registration (a restart): allocations survive it, a lost agent is back."""
        agent_id = data.draw(st.sampled_from(sorted(self.registrations)))
        old = self.registrations[agent_id]
        e = AgentRegistered(
            id=self._next_id("rereg"),
            at=T0,
            actor=old.actor,
            agent_id=agent_id,
            capacity=old.capacity,
            gpus=old.gpus,
            fgpu_per_gpu=old.fgpu_per_gpu,
            images=old.images,
        )
        self._log(subj.agent(agent_id), e)

    @rule(data=st.data())
    def agent_lost(self, data: st.DataObject) -> None:
        agent_id = data.draw(st.sampled_from(sorted(self.registrations)))
        e = AgentLost(
            id=self._next_id("lost"), at=T0, actor="scheduler", agent_id=agent_id, reason="t"
        )
        self._log(subj.LEDGER, e)

    @rule(batch=st.lists(requests, min_size=1, max_size=3), then_schedule=st.booleans())
    def request_and_admit(
        self, batch: list[tuple[int, int, int, str, str, int]], then_schedule: bool
    ) -> None:
        for request in batch:
            self._request(*request)
        if then_schedule:
            self.schedule()

    def _request(
        self, fgpu: int, cpu: int, mem: int, image: str, owner: str, priority: int
    ) -> None:
        sid = self._next_id("s")
        req = SessionRequested(
            id=f"req-{sid}",
            at=T0,
            actor=owner,
            session_id=sid,
            owner=owner,
            image=image,
            slots=Slots(cpu=cpu, mem=mem, fgpu=fgpu),
            priority=priority,
            # Some batch, some interactive; some with a lifetime of their own (the running
            # index files each kind apart).
            command=("true",) if self.n % 2 else (),
            lifetime_s=60 * (self.n % 3) or None,
        )
        self._log(subj.request(owner, sid), req)
        admit = SessionAdmitted(
            id=f"adm-{sid}",
            at=T0,
            actor="quota",
            causation_id=req.id,
            session_id=sid,
            owner=owner,
        )
        self._log(subj.quota(owner), admit)

    @rule()
    def schedule(self) -> None:
        s = self.state
        pending_before = set(s.queue)
        decisions = self.scheduler.decide(s)
        placed = Counter(d.session_id for d in decisions if isinstance(d, SessionScheduled))
        assert all(n == 1 for n in placed.values()), "a session placed twice in one round"
        assert set(placed) <= pending_before
        for d in decisions:
            if isinstance(d, SessionScheduled):
                assert not s.agents[d.agent_id].lost, "placed on a lost agent"
            self._log(subj.LEDGER, d)
        # Backfill is complete: whatever still waits cannot be placed now.
        for sid in s.queue:
            v = s.sessions[sid]
            assert place(s, v.slots, v.image) is None, f"{sid} waits but fits"

    @precondition(lambda self: bool(self._sessions(*HOLDS_ALLOCATION)))
    @rule(data=st.data(), how=st.sampled_from(["preparing", "running", "terminated", "errored"]))
    def agent_reports(self, data: st.DataObject, how: str) -> None:
        sid = data.draw(st.sampled_from(self._sessions(*HOLDS_ALLOCATION)))
        agent_id = self.state.sessions[sid].agent_id
        assert agent_id is not None
        self._log(subj.agent_session(agent_id, sid), self._report(how, sid, agent_id))
        if data.draw(st.booleans(), label="then_schedule"):
            self.schedule()

    @precondition(
        lambda self: bool(self._sessions(*HOLDS_ALLOCATION)) and len(self.registrations) > 1
    )
    @rule(data=st.data(), how=st.sampled_from(["running", "terminated", "errored"]))
    def report_from_the_wrong_agent(self, data: st.DataObject, how: str) -> None:
        sid = data.draw(st.sampled_from(self._sessions(*HOLDS_ALLOCATION)))
        here = self.state.sessions[sid].agent_id
        other = data.draw(st.sampled_from(sorted(a for a in self.registrations if a != here)))
        before = canonical(self.state)
        self._log(subj.agent_session(other, sid), self._report(how, sid, other))
        after = canonical(self.state)
        # Only the bookkeeping of the sequence moved.
        for key in ("last_seq", "subject_seq"):
            before.pop(key)
            after.pop(key)
        assert before == after

    @precondition(lambda self: bool(self._sessions(S.RUNNING)))
    @rule(data=st.data(), later_s=st.integers(0, 3))
    def busy(self, data: st.DataObject, later_s: int) -> None:
        """A running session used CPU: active again, perhaps later than it last was."""
        sid = data.draw(st.sampled_from(self._sessions(S.RUNNING)))
        v = self.state.sessions[sid]
        assert v.agent_id is not None
        e = SessionCpuSampled(
            id=self._next_id("cpu"),
            at=T0 + timedelta(seconds=later_s),
            actor=f"agent:{v.agent_id}",
            session_id=sid,
            agent_id=v.agent_id,
            cpu_ns=v.cpu_ns + 1,
        )
        self._log(subj.usage(v.agent_id, sid), e)

    def _report(self, how: str, sid: str, agent_id: str) -> AnyEvent:
        common: dict[str, Any] = {
            "id": self._next_id(how),
            "at": T0,
            "actor": f"agent:{agent_id}",
            "session_id": sid,
            "agent_id": agent_id,
        }
        if how == "preparing":
            return SessionPreparing(**common)
        if how == "running":
            return SessionRunning(**common, container_id=f"c-{sid}")
        if how == "terminated":
            return SessionTerminated(**common, exit_code=0, reason="exited")
        return SessionErrored(**common, reason="could not start")

    @precondition(lambda self: bool(self._sessions(S.PENDING)))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(self._sessions(S.PENDING)))
        v = self.state.sessions[sid]
        e = SessionCancelled(
            id=self._next_id("cancel"),
            at=T0,
            actor="scheduler",
            session_id=sid,
            owner=v.owner,
            reason="t",
        )
        self._log(subj.LEDGER, e)

    @precondition(lambda self: bool(self.state.sessions))
    @rule(data=st.data(), by_owner=st.booleans())
    def destroy(self, data: st.DataObject, by_owner: bool) -> None:
        """A user's destroy; the next scheduling round answers it."""
        sid = data.draw(st.sampled_from(sorted(self.state.sessions)))
        owner = self.state.sessions[sid].owner
        requester = owner if by_owner else next(o for o in OWNERS if o != owner)
        e = SessionDestroyRequested(
            id=self._next_id("destroy"),
            at=T0,
            actor=requester,
            session_id=sid,
            requester=requester,
        )
        self._log(subj.request(requester, sid), e)

    @precondition(lambda self: bool(self.records))
    @rule(data=st.data())
    def redelivered(self, data: st.DataObject) -> None:
        """An event stored again under a new sequence (past the dedupe window) changes nothing
        of the sessions' allocations."""
        old = data.draw(st.sampled_from(self.records))
        if isinstance(old.event, SessionDestroyRequested):
            return  # a destroy is a request, not a fact; see test_fold
        self._log(old.subject, cast(AnyEvent, old.event))

    @invariant()
    def never_over_allocated(self) -> None:
        check_invariants(self.state)

    @invariant()
    def placed_at_most_once(self) -> None:
        # Redelivered copies share the original's id: one distinct placement per session.
        decisions: dict[str, set[str]] = {}
        for r in self.records:
            if isinstance(r.event, SessionScheduled):
                decisions.setdefault(r.event.session_id, set()).add(r.event.id)
        assert all(len(ids) == 1 for ids in decisions.values())

    def teardown(self) -> None:
        once = fold(list(self.records))
        twice = fold(list(self.records))
        assert canonical(once) == canonical(twice)
        check_invariants(once)
        # The live scheduler applied its own decisions before the log had them (at seq 0);
        # otherwise it holds the very state a replay gives.
        assert canonical(once, with_history_seqs=False) == canonical(
            self.state, with_history_seqs=False
        )


TestScheduler = SchedulerMachine.TestCase
TestScheduler.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# ---- never_fits ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(agent_shapes, st.booleans()), min_size=1, max_size=4),
    requests,
)
def test_never_fits_rejects_exactly_what_no_empty_agent_could_hold(
    agents: list[tuple[tuple[int, int, int, int, tuple[str, ...]], bool]],
    request: tuple[int, int, int, str, str, int],
) -> None:
    fgpu, cpu, mem, image, _, _ = request
    need = Slots(cpu=cpu, mem=mem, fgpu=fgpu)
    s = ClusterState()
    seq = 0
    for i, (shape, lost) in enumerate(agents):
        seq += 1
        evolve(s, Record(seq=seq, subject=subj.agent(f"a{i}"), event=registered(f"a{i}", *shape)))
        if lost:
            seq += 1
            e = AgentLost(id=f"lost-{i}", at=T0, actor="scheduler", agent_id=f"a{i}", reason="t")
            evolve(s, Record(seq=seq, subject=subj.LEDGER, event=e))
    # The oracle: place on each agent alone and empty. Lost agents count: they may be back.
    could = False
    for i, (shape, _) in enumerate(agents):
        alone = fold(
            [Record(seq=1, subject=subj.agent(f"a{i}"), event=registered(f"a{i}", *shape))]
        )
        if place(alone, need, image) is not None:
            could = True
    why = never_fits(s, need, image)
    assert (why is None) == could, why


def test_never_fits_knows_nothing_without_agents() -> None:
    assert never_fits(ClusterState(), Slots(cpu=1, mem=1, fgpu=10**9), IMAGE) is None


def test_two_and_a_half_gpus_take_two_whole_devices_and_half_of_a_third() -> None:
    e = registered("a", 4, 200, 8000, 8 * GIB, (IMAGE,))
    s = fold([Record(seq=1, subject=subj.agent("a"), event=e)])
    placement = place(s, Slots(cpu=1000, mem=GIB, fgpu=500), IMAGE)
    assert placement is not None
    agent_id, devices = placement
    assert agent_id == "a"
    assert sorted(d.fgpu for d in devices) == [100, 200, 200]
