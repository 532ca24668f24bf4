"""The fit index files agents as a plain model says, however reads and changes interleave.

The model: an agent's key is its largest free device share when it last changed (0 if it
is lost or has no GPU); ``candidates(need)`` are the agents with a key of at least
``need``, by key, then by the fGPU free on all their devices, then by the order of their
last change; ``largest()`` the top key.
The index notes changes and files them only when read: what it answers must not tell.
"""

from hypothesis import given
from hypothesis import strategies as st

from events import GpuInfo, Slots
from services.domain.fold.fit_index import FitIndex
from services.domain.records import AgentView, GpuView

AGENTS = 4
GPUS = 2
CAPACITY = 100


def _agent(n: int) -> AgentView:
    gpus = {
        i: GpuView(
            info=GpuInfo(index=i, uuid=f"GPU-{n}-{i}", model="m", mem=1 << 30, sm_count=1),
            capacity=CAPACITY,
        )
        for i in range(GPUS)
    }
    return AgentView(
        agent_id=f"a{n}",
        capacity=Slots(cpu=1000, mem=1 << 30, fgpu=GPUS * CAPACITY),
        fgpu_per_gpu=CAPACITY,
        gpus=gpus,
        images=frozenset(),
        runtime="dummy",
    )


def _key(a: AgentView) -> int:
    return 0 if a.lost or not a.gpus else max(g.free for g in a.gpus.values())


# A step: change an agent (give, take back, lose) and note it, or read the index.
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("give"),
            st.integers(0, AGENTS - 1),
            st.integers(0, GPUS - 1),
            st.integers(1, 60),
        ),
        st.tuples(st.just("take"), st.integers(0, AGENTS - 1), st.integers(0, GPUS - 1)),
        st.tuples(st.just("lose"), st.integers(0, AGENTS - 1)),
        st.tuples(st.just("touch"), st.integers(0, AGENTS - 1)),
        st.tuples(st.just("read"), st.integers(0, CAPACITY + 1)),
    ),
    max_size=60,
)


@given(steps)
def test_reads_answer_as_if_every_change_were_filed_at_once(plan: list[tuple[object, ...]]) -> None:
    agents = [_agent(n) for n in range(AGENTS)]
    index = FitIndex()
    model: dict[str, tuple[int, int, int]] = {}  # agent -> (key, free in all, when changed)
    clock = 0

    def changed(a: AgentView) -> None:
        nonlocal clock
        clock += 1
        model[a.agent_id] = (_key(a), sum(g.free for g in a.gpus.values()), clock)
        index.update(a)

    for a in agents:
        changed(a)
    for step in plan:
        match step:
            case ("give", int(n), int(g), int(q)):
                a = agents[n]
                if a.gpus[g].free >= q:
                    a.gpus[g].give(f"s{clock}", q)
                changed(a)
            case ("take", int(n), int(g)):
                a = agents[n]
                shares = a.gpus[g].shares
                if shares:
                    a.gpus[g].take_back(next(iter(shares)))
                changed(a)
            case ("lose", int(n)):
                agents[n].lost = True
                changed(agents[n])
            case ("touch", int(n)):  # noted with nothing changed: it still moves last
                changed(agents[n])
            case ("read", int(need)):
                filed = sorted((k, f, when, aid) for aid, (k, f, when) in model.items() if k > 0)
                expect = [aid for k, _, _, aid in filed if k >= need]
                assert list(index.candidates(need)) == expect
                assert index.largest() == (filed[-1][0] if filed else 0)
    filed = sorted((k, f, when, aid) for aid, (k, f, when) in model.items() if k > 0)
    assert list(index.candidates(1)) == [aid for _, _, _, aid in filed]


def test_a_change_noted_while_candidates_are_consumed_is_filed_at_the_next_read() -> None:
    a, b = _agent(0), _agent(1)
    index = FitIndex()
    index.update(a)
    index.update(b)
    taken = index.candidates(1)
    assert next(taken) == "a0"
    b.gpus[0].give("s", CAPACITY)
    b.gpus[1].give("s", CAPACITY)
    index.update(b)  # b is full now: the read under way still has it, the next does not
    assert list(taken) == ["a1"]
    assert list(index.candidates(1)) == ["a0"]
    assert index.largest() == CAPACITY


def test_the_smallest_device_follows_registrations_lost_agents_included() -> None:
    index = FitIndex()
    assert index.smallest_device() is None
    small, large = _agent(0), _agent(1)
    large.fgpu_per_gpu = 400
    index.update(small)
    index.update(large)
    assert index.smallest_device() == CAPACITY
    small.lost = True  # it may come back: its devices still count
    index.update(small)
    assert index.smallest_device() == CAPACITY
    again = _agent(0)  # registered again, with larger devices
    again.fgpu_per_gpu = 800
    index.update(again)
    assert index.smallest_device() == 400
