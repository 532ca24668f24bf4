"""Resource groups in the scheduler: each group's sessions go to its agents only, in its
queue order, under its placement policy and time limits (folded states, no bus)."""

import heapq
import random
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import (
    AgentLost,
    AgentRegistered,
    AnyEvent,
    CreateGroup,
    GpuUsageSampled,
    GroupSettings,
    QueueOrder,
    SessionCancelled,
    SessionCpuSampled,
    SessionRejected,
    SessionRequested,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    SessionType,
    SessionUnplaced,
    Slots,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.virtual_clock import VirtualClock
from services.domain.durations import LONGEST_S
from services.domain.fold.cluster import ClusterState
from services.domain.fold.running_index import RunningIndex
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.fold.validation import invalid_request
from services.domain.resources import add
from services.domain.scheduling.allocator import place
from services.domain.scheduling.queue_order import dominant_share, group_capacity, held_by_user
from services.domain.status import HOLDS_ALLOCATION
from services.domain.tenancy.groups import invalid_group_command
from services.ports.log import check_batch
from tests.support.doubles import NoLog
from tests.support.folded_cluster import GIB, IMAGE, T0, Cluster


def _scheduler(at: datetime = T0, **kwargs: object) -> SchedulerActor:
    return SchedulerActor(NoLog(), VirtualClock(at), **kwargs)  # type: ignore[arg-type]


def _placed(decisions: Sequence[AnyEvent]) -> dict[str, str]:
    return {d.session_id: d.agent_id for d in decisions if isinstance(d, SessionScheduled)}


def test_a_group_s_sessions_go_to_its_agents_only() -> None:
    c = Cluster()
    c.agent("plain")
    c.agent("fast1", group="fast")
    c.group("fast", GroupSettings())
    fast = [c.ask("u", 100, group="fast") for _ in range(2)]
    plain = c.ask("u", 50)
    placed = _placed(_scheduler().decide(c.s))
    # fast has one device: its second session waits though "plain" has room.
    assert placed == {fast[0]: "fast1", plain: "plain"}
    assert c.s.sessions[fast[1]].waiting is not None


def test_a_group_with_no_agent_of_its_own_holds_its_sessions() -> None:
    c = Cluster()
    c.agent("plain")
    c.group("empty", GroupSettings())
    sid = c.ask("u", 50, group="empty")
    assert _placed(_scheduler().decide(c.s)) == {}
    assert c.s.sessions[sid].status.value == "PENDING"


def test_each_group_places_with_its_own_policy() -> None:
    c = Cluster()
    for name in ("p1", "p2"):
        c.agent(name, group="packed")
    for name in ("s1", "s2"):
        c.agent(name, group="spread")
    c.group("packed", GroupSettings(policy="pack"))
    c.group("spread", GroupSettings(policy="spread"))
    packed = [c.ask("u", 30, group="packed") for _ in range(2)]
    spread = [c.ask("u", 30, group="spread") for _ in range(2)]
    placed = _placed(_scheduler().decide(c.s))
    assert len({placed[sid] for sid in packed}) == 1
    assert len({placed[sid] for sid in spread}) == 2


def test_lifo_takes_the_latest_first() -> None:
    c = Cluster()
    c.agent("a", group="stack")
    c.group("stack", GroupSettings(queue=QueueOrder.LIFO))
    first = c.ask("u", 100, group="stack")
    last = c.ask("u", 100, group="stack")
    assert _placed(_scheduler().decide(c.s)) == {last: "a"}
    assert c.s.sessions[first].status.value == "PENDING"


def test_a_group_s_pending_timeout_of_zero_cancels_at_once() -> None:
    c = Cluster()
    c.agent("a", group="now")
    c.agent("b")
    c.group("now", GroupSettings(pending_timeout_s=0))
    c.ask("u", 100, group="now")
    late = c.ask("u", 100, group="now")
    waits = [c.ask("u", 100), c.ask("u", 100)]
    decisions = _scheduler().decide(c.s)
    cancelled = [d for d in decisions if isinstance(d, SessionCancelled)]
    assert [d.session_id for d in cancelled] == [late]
    assert "pending timeout of 0 s" in cancelled[0].reason
    assert c.s.sessions[waits[1]].status.value == "PENDING"  # the default group waits


# ---- time limits, looked at as time passes (check_liveness) -------------------------------


def _limits(c: Cluster, at: datetime) -> list[AnyEvent]:
    actor = _scheduler(at)
    return actor._over_time(c.s)


def test_a_session_past_its_lifetime_is_stopped_with_the_reason() -> None:
    c = Cluster()
    c.agent("a", group="short", gpus=2)
    c.group("short", GroupSettings(default_lifetime_s=60, max_lifetime_s=600))
    default = c.ask("u", 100, group="short")
    longer = c.ask("u", 100, group="short", lifetime_s=300)
    c.run_placed(_scheduler().decide(c.s))
    assert _limits(c, T0 + timedelta(seconds=59)) == []
    [stop] = _limits(c, T0 + timedelta(seconds=60))
    assert isinstance(stop, SessionTerminating) and stop.session_id == default
    assert stop.reason == "lifetime of 60 s reached"
    later = [e.session_id for e in _limits(c, T0 + timedelta(seconds=300))]
    assert later == [default, longer]


def test_an_idle_session_is_stopped_and_activity_keeps_one_alive() -> None:
    c = Cluster()
    c.agent("a", group="lab", gpus=3)
    c.group("lab", GroupSettings(idle_timeout_s=600))
    idle, gpu_busy, cpu_busy = (c.ask("u", 100, group="lab") for _ in range(3))
    c.run_placed(_scheduler().decide(c.s))
    at = T0 + timedelta(seconds=500)
    launches = GpuUsageSampled(
        id="u1",
        at=at,
        actor="agent:a",
        session_id=gpu_busy,
        agent_id="a",
        gpu_index=0,
        mem_used=0,
        mem_peak=0,
        mem_limit=GIB,
        launches=10,
        throttled_ns=0,
        oom_refusals=0,
    )
    c.add(subj.usage("a", gpu_busy), launches)
    cpu = SessionCpuSampled(
        id="c1", at=at, actor="agent:a", session_id=cpu_busy, agent_id="a", cpu_ns=10**9
    )
    c.add(subj.usage("a", cpu_busy), cpu)
    stops = _limits(c, T0 + timedelta(seconds=600))
    assert [e.session_id for e in stops] == [idle]
    assert isinstance(stops[0], SessionTerminating) and "idle for 600 s" in stops[0].reason
    # The same launch total again is no new activity.
    again = GpuUsageSampled(**{**_fields(launches), "id": "u2", "at": T0 + timedelta(seconds=900)})
    c.add(subj.usage("a", gpu_busy), again)
    stopped = {e.session_id for e in _limits(c, T0 + timedelta(seconds=1100))}
    assert stopped == {idle, gpu_busy, cpu_busy}
    # The fold keeps them by their last activity, so a check takes only those past the
    # timeout; a session that ends leaves the index, whenever it was last active.
    running = c.s.running
    assert running.idle_since("lab", T0 + timedelta(seconds=499)) == [idle]
    assert running.idle_since("lab", T0 + timedelta(seconds=500)) == [idle, gpu_busy, cpu_busy]
    for sid in (gpu_busy, cpu_busy, idle):
        ended = SessionTerminated(
            id=f"end-{sid}", at=at, actor="agent:a", session_id=sid, agent_id="a",
            exit_code=0, reason="exited",
        )  # fmt: skip
        c.add(subj.agent_session("a", sid), ended)
    assert running == RunningIndex() and running.groups() == []


def test_idleness_ends_interactive_sessions_only() -> None:
    c = Cluster()
    c.agent("a", group="lab", gpus=2)
    c.group("lab", GroupSettings(idle_timeout_s=60))
    shell = c.ask("u", 100, group="lab")  # no command: interactive
    job = c.ask("u", 100, group="lab", command=("python", "train.py"))  # batch
    c.run_placed(_scheduler().decide(c.s))
    assert c.s.sessions[job].session_type is SessionType.BATCH
    stops = _limits(c, T0 + timedelta(hours=5))
    assert [e.session_id for e in stops] == [shell]


def _fields(e: GpuUsageSampled) -> dict[str, object]:
    return {name: getattr(e, name) for name in e.__struct_fields__}


def test_a_positive_pending_timeout_cancels_as_time_passes() -> None:
    c = Cluster()
    c.agent("a", group="q")
    c.group("q", GroupSettings(pending_timeout_s=120))
    c.ask("u", 100, group="q")
    waiting = c.ask("u", 100, group="q")
    c.run_placed(_scheduler().decide(c.s))
    assert _limits(c, T0 + timedelta(seconds=119)) == []
    [cancel] = _limits(c, T0 + timedelta(seconds=120))
    assert isinstance(cancel, SessionCancelled) and cancel.session_id == waiting
    assert "pending timeout of 120 s" in cancel.reason


def test_without_limits_nothing_is_looked_at() -> None:
    c = Cluster()
    c.agent("a")
    c.ask("u", 100)
    c.run_placed(_scheduler().decide(c.s))
    assert _limits(c, T0 + timedelta(days=365)) == []


# ---- DRF -------------------------------------------------------------------------------


def _drf_cluster(agents: int) -> Cluster:
    c = Cluster()
    for i in range(agents):
        c.agent(f"a{i}", group="fair", gpus=4, cpu=16_000)
    c.group("fair", GroupSettings(queue=QueueOrder.DRF))
    return c


def test_drf_serves_the_user_with_the_least_dominant_share_first() -> None:
    # 4 fGPU in all; "big" holds 3 (share 3/4); "small" holds none and asks later.
    c = _drf_cluster(1)
    for _ in range(3):
        c.ask("big", 100, group="fair", cpu=1000)
    c.run_placed(_scheduler().decide(c.s))
    big = [c.ask("big", 100, group="fair", cpu=1000) for _ in range(2)]
    small = [c.ask("small", 100, group="fair", cpu=1000) for _ in range(2)]
    placed = _placed(_scheduler().decide(c.s))
    # One device left: it goes to "small", though "big" asked first.
    assert set(placed) == {small[0]}
    assert not set(big) & set(placed)


_SESSION = st.tuples(st.sampled_from([25, 50, 100, 200]), st.sampled_from([500, 1000, 4000]))


@settings(max_examples=80, deadline=None)
@given(
    agents=st.integers(min_value=1, max_value=3),
    demands=st.dictionaries(
        st.sampled_from(["ann", "bob", "cy"]),
        st.lists(_SESSION, min_size=1, max_size=25),
        min_size=2,
        max_size=3,
    ),
    order=st.randoms(use_true_random=False),
    burst=st.booleans(),
)
def test_drf_places_for_a_user_only_while_no_one_below_it_could_be_served(
    agents: int, demands: dict[str, list[tuple[int, int]]], order: random.Random, burst: bool
) -> None:
    """Equal weights: each placement goes to a user whose dominant share is no more than
    that of any other user with a waiting session that fits at that moment. So users with
    demand end within one session of each other's share, unless the one behind could not
    be served. Requests arrive interleaved, or each user's all at once (a burst, which
    FIFO would serve whole)."""
    asks = [(user, f, cpu) for user, sessions in demands.items() for f, cpu in sessions]
    if not burst:
        order.shuffle(asks)
    c, ref = _drf_cluster(agents), _drf_cluster(agents)
    for built in (c, ref):
        for user, f, cpu in asks:
            built.ask(user, f, group="fair", cpu=cpu)
    decisions = _scheduler().decide(c.s)
    placed_users: set[str] = set()
    for d in decisions:
        if isinstance(d, SessionScheduled):
            capacity = group_capacity(ref.s, "fair")
            held = held_by_user(ref.s, "fair")
            mine = dominant_share(held.get(d.owner, Slots()), capacity)
            for other in demands.keys() - {d.owner}:
                if _could_be_served(ref.s, other):
                    theirs = dominant_share(held.get(other, Slots()), capacity)
                    assert mine <= theirs, (d.owner, mine, other, theirs)
            placed_users.add(d.owner)
        ref.add(subj.LEDGER, d)
    assert placed_users  # the cluster has room for the first session of anyone


def _could_be_served(s: ClusterState, user: str) -> bool:
    """Whether a waiting session of ``user`` fits somewhere now."""
    return any(
        place(s, v.slots, v.image, frozenset(), v.gpu_models) is not None
        for v in (s.sessions[sid] for sid in s.queue)
        if v.owner == user
    )


# ---- a round by shape heads places as a walk of the whole queue does ---------------------


def _in_order(c: Cluster, lifo: bool) -> list[str]:
    s = c.s
    sign = -1 if lifo else 1
    return sorted(
        s.queue, key=lambda sid: (-s.sessions[sid].priority, sign * s.sessions[sid].arrival_seq)
    )


def _in_drf_order(c: Cluster, group: str) -> Iterator[str]:
    """Every pending session in DRF order, lazily (each placement the walk makes counts
    before the next is chosen): priority first, then the user whose dominant share is
    least, its earliest session first."""
    s = c.s
    capacity = group_capacity(s, group)
    held = held_by_user(s, group)
    levels: dict[int, dict[str, deque[str]]] = {}
    for sid in sorted(s.queue, key=lambda sid: s.sessions[sid].arrival_seq):
        v = s.sessions[sid]
        levels.setdefault(v.priority, {}).setdefault(v.owner, deque()).append(sid)

    def entry(user: str, waiting: deque[str]) -> tuple[Fraction, int, str]:
        share = dominant_share(held.get(user, Slots()), capacity)
        return (share, s.sessions[waiting[0]].arrival_seq, user)

    for priority in sorted(levels, reverse=True):
        users = levels[priority]
        heap = [entry(user, waiting) for user, waiting in users.items()]
        heapq.heapify(heap)
        while heap:
            user = heapq.heappop(heap)[2]
            sid = users[user].popleft()
            yield sid
            v = s.sessions[sid]
            if v.status in HOLDS_ALLOCATION:
                held[user] = add(held.get(user, Slots()), v.slots)
            if users[user]:
                heapq.heappush(heap, entry(user, users[user]))


def _walk(c: Cluster, order: Iterable[str]) -> list[tuple[str, str]]:
    """The reference: every pending session in queue ``order`` (taken lazily), a shape
    skipped once it failed, each placement applied before the next (what a round
    decides)."""
    s = c.s
    failed: set[tuple[object, ...]] = set()
    placed: list[tuple[str, str]] = []
    policy = _scheduler()._policy("q", "best-fit")
    for sid in order:
        v = s.sessions[sid]
        shape = (v.priority, v.slots, v.image, v.gpu_models)
        if shape in failed:
            continue
        found = policy(s, v.slots, v.image, frozenset(), v.gpu_models)
        if found is None:
            failed.add(shape)
            continue
        agent_id, devices = found
        e = SessionScheduled(
            id=f"ref-{sid}",
            at=T0,
            actor="scheduler",
            session_id=sid,
            owner=v.owner,
            agent_id=agent_id,
            slots=v.slots,
            devices=devices,
        )
        c.add(subj.LEDGER, e)
        placed.append((sid, agent_id))
    return placed


@settings(max_examples=60, deadline=None)
@given(
    agents=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    asks=st.lists(
        st.tuples(st.sampled_from([25, 50, 100, 200, 300]), st.integers(0, 2)),
        min_size=1,
        max_size=40,
    ),
    lifo=st.booleans(),
)
def test_a_round_by_shape_heads_places_as_a_walk_of_the_whole_queue(
    agents: list[int], asks: list[tuple[int, int]], lifo: bool
) -> None:
    built = []
    for _ in range(2):
        c = Cluster()
        for i, gpus in enumerate(agents):
            c.agent(f"a{i}", group="q", gpus=gpus)
        order = QueueOrder.LIFO if lifo else QueueOrder.FIFO
        c.group("q", GroupSettings(queue=order, policy="best-fit"))
        for n, (fgpu, priority) in enumerate(asks):
            c.ask(f"u{n % 3}", fgpu, group="q", priority=priority)
        built.append(c)
    decided = [
        (d.session_id, d.agent_id)
        for d in _scheduler().decide(built[0].s)
        if isinstance(d, SessionScheduled)
    ]
    assert decided == _walk(built[1], _in_order(built[1], lifo))


@settings(max_examples=60, deadline=None)
@given(
    agents=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    held=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([25, 50, 100])), max_size=6),
    asks=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([25, 50, 100, 200, 300]), st.integers(0, 1)),
        min_size=1,
        max_size=40,
    ),
)
def test_a_drf_round_by_users_heads_places_as_a_walk_of_the_whole_queue(
    agents: list[int], held: list[tuple[int, int]], asks: list[tuple[int, int, int]]
) -> None:
    """Users start with some sessions already placed (so shares differ), and ask for
    sessions of a few shapes and two priorities; the round by each user's shape heads
    places the same sessions on the same agents as the lazy DRF walk of every session."""
    built = []
    for _ in range(2):
        c = Cluster()
        for i, gpus in enumerate(agents):
            c.agent(f"a{i}", group="q", gpus=gpus)
        c.group("q", GroupSettings(queue=QueueOrder.DRF, policy="best-fit"))
        for user, fgpu in held:
            c.ask(f"u{user}", fgpu, group="q")
        c.run_placed(_scheduler().decide(c.s))
        for user, fgpu, priority in asks:
            c.ask(f"u{user}", fgpu, group="q", priority=priority)
        built.append(c)
    decided = [
        (d.session_id, d.agent_id)
        for d in _scheduler().decide(built[0].s)
        if isinstance(d, SessionScheduled)
    ]
    assert decided == _walk(built[1], _in_drf_order(built[1], "q"))


def test_a_user_whose_earliest_shape_failed_for_another_waits_its_next_turn() -> None:
    """``a``'s 2 fGPU does not fit: that shape fails for ``b`` too, so ``b``'s turn is
    that of its 0.5 fGPU, which came after ``c``'s: ``c``, with the same share (none),
    goes first."""
    c = Cluster()
    c.agent("a0", group="q", gpus=2)
    c.group("q", GroupSettings(queue=QueueOrder.DRF, policy="best-fit"))
    c.ask("d", 100, group="q")
    c.run_placed(_scheduler().decide(c.s))  # one device left
    c.ask("a", 200, group="q")
    c.ask("b", 200, group="q")
    first = c.ask("c", 50, group="q")
    then = c.ask("b", 50, group="q")
    placed = [d.session_id for d in _scheduler().decide(c.s) if isinstance(d, SessionScheduled)]
    assert placed == [first, then]


def test_an_agent_moved_to_another_group_takes_its_capacity_and_sessions_shares() -> None:
    """DRF's inputs, kept by the fold: an agent re-registered into another group takes
    its capacity there, and what its sessions hold; a snapshot rebuilds the same."""
    c = Cluster()
    c.agent("a0", group="q", gpus=2)
    c.agent("a1", group="q", gpus=1)
    c.group("q", GroupSettings(queue=QueueOrder.DRF, policy="pack"))
    ann, bob = c.ask("ann", 200, group="q"), c.ask("bob", 50, group="q")
    c.run_placed(_scheduler().decide(c.s))
    assert (c.s.sessions[ann].agent_id, c.s.sessions[bob].agent_id) == ("a0", "a1")
    one_gpu = Slots(cpu=64_000, mem=256 * GIB, fgpu=100)
    assert group_capacity(c.s, "q") == Slots(cpu=128_000, mem=512 * GIB, fgpu=300)
    assert held_by_user(c.s, "q") == {
        "ann": Slots(cpu=100, mem=GIB, fgpu=200),
        "bob": Slots(cpu=100, mem=GIB, fgpu=50),
    }
    a0 = c.s.agents["a0"]
    moved = AgentRegistered(
        id="r-a0-again",
        at=T0,
        actor="agent:a0",
        agent_id="a0",
        capacity=Slots(cpu=64_000, mem=256 * GIB, fgpu=200),
        gpus=tuple(g.info for g in a0.gpus.values()),
        fgpu_per_gpu=100,
        images=(IMAGE,),
        group="r",
    )
    c.add(subj.agent("a0"), moved)
    assert group_capacity(c.s, "q") == one_gpu
    assert group_capacity(c.s, "r") == Slots(cpu=64_000, mem=256 * GIB, fgpu=200)
    assert held_by_user(c.s, "q") == {"bob": Slots(cpu=100, mem=GIB, fgpu=50)}
    assert held_by_user(c.s, "r") == {"ann": Slots(cpu=100, mem=GIB, fgpu=200)}
    assert decode_state(encode_state(c.s)).shares == c.s.shares
    ended = SessionTerminated(
        id="end-ann",
        at=T0,
        actor="agent:a0",
        session_id=ann,
        agent_id="a0",
        exit_code=0,
        reason="exited",
    )
    c.add(subj.agent_session("a0", ann), ended)
    assert held_by_user(c.s, "r") == {}


def test_a_session_mounting_folders_goes_only_where_their_storage_hosts_are_mounted() -> None:
    """Best fit would take the fuller agent, which mounts no folders: a session mounting
    folders of storage host ``nfs`` goes to the one that mounts them, whatever it costs;
    one whose host no agent of the group mounts is rejected with the reason; one that
    mounts nothing goes where best fit says."""
    c = Cluster()
    c.agent("none", storage_hosts=())  # one device: the tighter fit
    c.agent("nfs", gpus=2, storage_hosts=("nfs", "local"))
    c.agent("every", group="other")  # storage_hosts None: every host, but another group's
    on_nfs = c.ask("u", 25, storage_hosts=("nfs",))
    on_tape = c.ask("u", 25, storage_hosts=("local", "tape"))
    plain = c.ask("u", 25)
    decided = _scheduler().decide(c.s)
    assert _placed(decided) == {on_nfs: "nfs", plain: "none"}
    [rejected] = [d for d in decided if isinstance(d, SessionRejected)]
    assert (rejected.session_id, rejected.code) == (on_tape, "vfolder")
    assert rejected.reason == (
        "no agent of resource group default mounts the virtual folders of storage host local, tape"
    )


def test_absurd_durations_are_refused_where_given_and_never_break_the_fold() -> None:
    """A lifetime past the year 9999 is refused in a request and in a group's settings;
    one already on a log (folded as it is) neither breaks the fold nor the limits check."""
    huge = 10**12
    request = SessionRequested(
        id="r", at=T0, actor="u", session_id="s", owner="u", image=IMAGE,
        slots=Slots(cpu=100, mem=GIB, fgpu=50), lifetime_s=huge,
    )  # fmt: skip
    assert invalid_request(request) == (
        f"lifetime must be 1 s to {LONGEST_S} s (a century; for ever: leave it out)"
    )
    for field in ("default_lifetime_s", "max_lifetime_s", "idle_timeout_s", "pending_timeout_s"):
        bad = invalid_group_command(
            {}, {}, CreateGroup(group="g", settings=GroupSettings(**{field: huge}))
        )
        assert bad is not None and f"at most {LONGEST_S} s" in bad[1]
    # As a log from before the bound holds them: admitted, placed, running, checked.
    c = Cluster()
    c.agent("a", group="forever", gpus=2)
    settings = GroupSettings(default_lifetime_s=huge, idle_timeout_s=huge, pending_timeout_s=huge)
    c.group("forever", settings)
    own = c.ask("u", 100, group="forever", lifetime_s=huge)
    theirs = c.ask("u", 100, group="forever")
    waits = c.ask("u", 100, group="forever")
    c.run_placed(_scheduler().decide(c.s))
    assert {c.s.sessions[i].status.value for i in (own, theirs)} == {"RUNNING"}
    assert c.s.sessions[waits].status.value == "PENDING"
    assert _limits(c, T0 + timedelta(days=365 * 100)) == []


def test_a_session_whose_folders_fit_only_where_they_are_not_mounted_is_rejected() -> None:
    """The agent that mounts its folders is too small for it, the one big enough mounts
    others: it can never run, so it is rejected, and never holds up the group."""
    c = Cluster()
    c.agent("small", storage_hosts=("h1",))  # one device
    c.agent("big", gpus=8, storage_hosts=("h2",))
    never = c.ask("u", 400, storage_hosts=("h1",))
    decided = _scheduler().decide(c.s)
    [rejected] = [d for d in decided if isinstance(d, SessionRejected)]
    assert (rejected.session_id, rejected.code) == (never, "unsatisfiable")
    assert rejected.reason.startswith(
        "of the agents that mount the virtual folders of storage host h1: no agent can ever hold"
    )


def test_a_session_waiting_for_lost_agents_that_mount_its_folders_reserves_nothing() -> None:
    """Its folders' only agent is lost: past the reservation time it does not hold up
    the rest of the group, for which the live agent is worth nothing to it."""
    c = Cluster()
    c.agent("h1-node", storage_hosts=("h1",))
    c.agent("other", gpus=2, storage_hosts=())
    c.add(
        subj.LEDGER, AgentLost(id="lost", at=T0, actor="scheduler", agent_id="h1-node", reason="t")
    )
    stuck = c.ask("u", 100, storage_hosts=("h1",))
    later = T0 + timedelta(seconds=3600)
    plain = c.ask("u", 100, at=later)
    placed = _placed(_scheduler(later, reserve_after_s=60).decide(c.s))
    assert placed == {plain: "other"} and c.s.sessions[stuck].status.value == "PENDING"


def test_a_placement_taken_back_goes_back_to_its_place_in_its_shape_s_queue() -> None:
    c = Cluster()
    c.agent("a", group="q")
    c.group("q", GroupSettings())
    first, second, third = (c.ask("u", 100, group="q") for _ in range(3))
    decisions = _scheduler().decide(c.s)
    assert _placed(decisions) == {first: "a"}
    for d in decisions:  # folded back; its agent never starts it
        c.add(subj.LEDGER, d)
    assert first not in c.s.queue
    unplaced = SessionUnplaced(
        id="un",
        at=T0,
        actor="scheduler",
        session_id=first,
        owner="u",
        agent_id="a",
        reason="agent a was lost before it started the session",
    )
    c.add(subj.LEDGER, unplaced)
    [queue] = c.s.queue.shapes("q").values()
    assert list(queue) == [first, second, third]
    assert list(c.s.queue.untold("q")) == [first]
    assert _placed(_scheduler().decide(c.s)) == {first: "a"}


# ---- what the review found -------------------------------------------------------------


def test_a_session_s_own_lifetime_ends_it_though_no_group_sets_a_limit() -> None:
    c = Cluster()
    c.agent("a")
    sid = c.ask("u", 100, lifetime_s=60)
    c.run_placed(_scheduler().decide(c.s))
    assert _limits(c, T0 + timedelta(seconds=59)) == []
    [stop] = _limits(c, T0 + timedelta(seconds=60))
    assert isinstance(stop, SessionTerminating) and stop.session_id == sid


def test_sessions_on_a_lost_agent_are_not_ended_by_their_limits() -> None:
    c = Cluster()
    c.agent("a", group="lab")
    c.group("lab", GroupSettings(default_lifetime_s=60, idle_timeout_s=60))
    c.ask("u", 100, group="lab")
    c.run_placed(_scheduler().decide(c.s))
    c.add(subj.LEDGER, AgentLost(id="lost", at=T0, actor="scheduler", agent_id="a", reason="x"))
    assert _limits(c, T0 + timedelta(hours=1)) == []


class _Ledger:
    """An EventLog that takes what the scheduler appends (at most one batch's worth)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def append_batch(self, items: Sequence[tuple[str, AnyEvent]], **expect: object) -> int:
        check_batch(items, subj.LEDGER)
        self.batches.append(len(items))
        return len(items)


@pytest.mark.anyio
async def test_more_than_a_batch_past_their_time_are_ended_a_batch_at_a_time() -> None:
    c = Cluster()
    c.agent("a", group="q")
    c.group("q", GroupSettings(pending_timeout_s=60))
    c.ask("u", 100, group="q")
    for _ in range(1200):
        c.ask("u", 100, group="q")
    c.run_placed(_scheduler().decide(c.s))  # one placed, 1,200 told why they wait
    ledger = _Ledger()
    actor = SchedulerActor(ledger, VirtualClock(T0 + timedelta(seconds=61)))  # type: ignore[arg-type]
    actor.state = c.s
    actor.since = actor.monotonic()  # every agent just heard: none is lost
    actor.heard("a")
    await actor.check_liveness()
    await actor.check_liveness()
    assert ledger.batches == [1000, 200]
    assert len(c.s.queue) == 0


def test_after_a_reservation_what_can_never_fit_is_still_rejected() -> None:
    c = Cluster()
    c.agent("a", group="q")  # one device: 100
    c.group("q", GroupSettings())
    c.ask("u", 60, group="q")
    c.run_placed(_scheduler().decide(c.s))
    old = c.ask("u", 100, group="q")  # waits for the whole device
    huge = c.ask("u", 300, group="q", at=T0 + timedelta(seconds=500))
    decisions = _scheduler(T0 + timedelta(seconds=600), reserve_after_s=300).decide(c.s)
    rejected = [d.session_id for d in decisions if isinstance(d, SessionRejected)]
    assert rejected == [huge]
    assert c.s.sessions[old].status.value == "PENDING"


def test_in_lifo_the_longest_waiting_of_a_shape_reserves() -> None:
    c = Cluster()
    c.agent("a", group="stack")  # one device: 100
    c.group("stack", GroupSettings(queue=QueueOrder.LIFO))
    c.ask("u", 60, group="stack")
    c.run_placed(_scheduler().decide(c.s))  # 40 free
    old = c.ask("u", 100, group="stack", priority=1)
    c.ask("u", 100, group="stack", priority=1, at=T0 + timedelta(seconds=590))  # young
    small = c.ask("u", 30, group="stack", at=T0 + timedelta(seconds=595))
    decisions = _scheduler(T0 + timedelta(seconds=600), reserve_after_s=300).decide(c.s)
    # The young one fails first (LIFO), but the old one of its shape waited past the
    # reservation delay: the small one behind them waits.
    assert _placed(decisions) == {}
    assert c.s.sessions[small].status.value == "PENDING"
    assert c.s.sessions[old].status.value == "PENDING"


def test_a_waiting_reason_counts_the_group_s_agents_only() -> None:
    c = Cluster()
    c.agent("full", group="fast")
    c.agent("free", group="slow")
    c.group("fast", GroupSettings())
    c.group("slow", GroupSettings())
    c.ask("u", 100, group="fast")
    c.run_placed(_scheduler().decide(c.s))
    waiting = c.ask("u", 100, group="fast")
    _scheduler().decide(c.s)
    assert c.s.sessions[waiting].waiting is not None
    assert c.s.sessions[waiting].waiting == (
        "waiting for fGPU: no device in resource group fast has 1 fGPU free "
        "(none free on any device)"
    )


def test_an_untold_session_past_its_timeout_is_cancelled_not_told() -> None:
    c = Cluster()
    c.agent("a", group="q")
    c.group("q", GroupSettings(pending_timeout_s=60))
    c.ask("u", 100, group="q")
    c.run_placed(_scheduler().decide(c.s))
    late = c.ask("u", 100, group="q")
    decisions = _scheduler(T0 + timedelta(seconds=61)).decide(c.s)
    assert [type(d).__name__ for d in decisions if getattr(d, "session_id", None) == late] == [
        "SessionCancelled"
    ]
