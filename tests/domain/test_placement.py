"""Placement policies: what each chooses, GPU models, CPU-only sessions, and the invariants
every policy keeps (hypothesis): no device or agent over-allocated, only allowed models,
and nothing refused that some agent could take."""

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import (
    AgentRegistered,
    AnyEvent,
    GpuInfo,
    Record,
    SessionAdmitted,
    SessionRequested,
    Slots,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.fold.validation import invalid_request
from services.domain.fold.workload import Shape, Workload
from services.domain.scheduling.agent_groups import Option
from services.domain.scheduling.allocator import device_options, never_fits, usable
from services.domain.scheduling.fragmentation import Forecast, stranded, unusable
from services.domain.scheduling.placement import POLICY_NAMES, UnknownPolicy, policy
from services.domain.status import SessionStatus
from services.ports import EventLog

T0 = datetime(2024, 1, 1, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"
GIB = 1 << 30
PER = 100


class _UnusedLog:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"decide used the log ({name})")


class Cluster:
    """A state folded from the events a test makes, and a scheduler deciding on it."""

    def __init__(self, policy_name: str = "best-fit") -> None:
        self.s = ClusterState()
        self.seq = 0
        self.n = 0
        self.scheduler = SchedulerActor(
            cast(EventLog, _UnusedLog()), VirtualClock(T0), policy=policy_name, pending_timeout_s=0
        )

    def fold(self, subject: str, e: AnyEvent) -> None:
        self.seq += 1
        evolve(self.s, Record(seq=self.seq, subject=subject, event=e))

    def agent(self, agent_id: str, models: tuple[str, ...], cpu: int = 64_000) -> None:
        gpus = tuple(
            GpuInfo(index=i, uuid=f"{agent_id}-{i}", model=m, mem=16 * GIB, sm_count=80)
            for i, m in enumerate(models)
        )
        e = AgentRegistered(
            id=f"reg-{agent_id}",
            at=T0,
            actor=f"agent:{agent_id}",
            agent_id=agent_id,
            capacity=Slots(cpu=cpu, mem=256 * GIB, fgpu=len(gpus) * PER),
            gpus=gpus,
            fgpu_per_gpu=PER,
            images=(IMAGE,),
            runtime="dummy",
        )
        self.fold(subj.agent(agent_id), e)

    def ask(
        self, fgpu: int, cpu: int = 1000, models: tuple[str, ...] = ()
    ) -> tuple[str, tuple[tuple[int, int], ...]] | None:
        """Ask for a session, let the scheduler decide: (agent, ((device, quanta), ...)) or
        None if it was cancelled (nothing fits now) or rejected (nothing ever could)."""
        self.n += 1
        sid = f"s{self.n}"
        request = SessionRequested(
            id=f"req-{sid}",
            at=T0,
            actor="alice",
            session_id=sid,
            owner="alice",
            image=IMAGE,
            slots=Slots(cpu=cpu, mem=GIB, fgpu=fgpu),
            gpu_models=models,
            cpu_only=fgpu == 0,
        )
        self.fold(subj.request("alice", sid), request)
        admitted = SessionAdmitted(
            id=f"adm-{sid}", at=T0, actor="quota", session_id=sid, owner="alice"
        )
        self.fold(subj.ADMISSION, admitted)
        for d in self.scheduler.decide(self.s):
            self.fold(subj.LEDGER, d)
        v = self.s.sessions[sid]
        if v.agent_id is None:
            assert v.status in (SessionStatus.CANCELLED, SessionStatus.REJECTED)
            return None
        return v.agent_id, tuple((d.gpu_index, d.fgpu) for d in v.devices)


def test_unknown_policy_names_those_there_are() -> None:
    with pytest.raises(UnknownPolicy, match="fragmentation-aware"):
        policy("first-fit")
    assert POLICY_NAMES == ("best-fit", "pack", "spread", "round-robin", "fragmentation-aware")


def test_pack_fills_the_fullest_agent_and_spread_the_emptiest() -> None:
    for name, second in (("pack", "a"), ("spread", "b")):
        c = Cluster(name)
        c.agent("a", ("M", "M"))
        c.agent("b", ("M", "M"))
        assert c.ask(50) == ("a", ((0, 50),))  # equals: the first registered
        assert c.ask(30) is not None and c.s.last_placed == second


def test_spread_takes_the_emptiest_device_and_pack_the_tightest() -> None:
    for name, device in (("pack", 0), ("spread", 1)):
        c = Cluster(name)
        c.agent("a", ("M", "M"))
        assert c.ask(50) == ("a", ((0, 50),))
        assert c.ask(20) == ("a", ((device, 20),))


def test_round_robin_goes_round_the_agents_in_order_of_registration() -> None:
    c = Cluster("round-robin")
    for agent_id in ("a", "b", "c"):
        c.agent(agent_id, ("M",))
    placed = [c.ask(10) for _ in range(4)]
    assert [p[0] for p in placed if p is not None] == ["a", "b", "c", "a"]


def test_fragmentation_aware_keeps_whole_devices_for_a_workload_of_whole_devices() -> None:
    c = Cluster("fragmentation-aware")
    c.agent("a", ("M", "M"))
    c.agent("b", ("M", "M"))
    for _ in range(16):  # the forecast is renewed at 16 admissions: whole-device requests
        c.s.workload.note(Shape(fgpu=PER, cpu=1, mem=1))
    assert c.ask(60) == ("a", ((0, 60),))  # equals: the first registered
    # Its share beside the first, on the device already broken: a whole one stays whole.
    assert c.ask(40) == ("a", ((0, 40),))
    assert c.ask(PER) == ("a", ((1, PER),))  # of equal growth, the fuller agent


def test_unusable_counts_what_a_shape_could_not_use() -> None:
    agent = (PER, 4000, GIB, (("M", 30), ("M", 100), ("V", 100)))
    assert unusable(agent, Shape(fgpu=50, cpu=1000, mem=1)) == 30
    assert unusable(agent, Shape(fgpu=50, cpu=8000, mem=1)) == 230  # no CPU: all of it
    assert unusable(agent, Shape(fgpu=200, cpu=1, mem=1)) == 30  # two whole: fits
    assert unusable(agent, Shape(fgpu=200, cpu=1, mem=1, gpu_models=("M",))) == 230
    assert unusable(agent, Shape(fgpu=50, cpu=1, mem=1, gpu_models=("V",))) == 130
    assert unusable(agent, Shape(fgpu=130, cpu=1, mem=1)) == 0  # one whole and 30 beside


def test_the_forecast_weighs_shapes_by_the_fgpu_they_ask_for() -> None:
    w = Workload()
    for i in range(15):
        w.note(Shape(fgpu=10 if i % 3 else 300, cpu=1, mem=1))
        assert w.typical == ()
    w.note(Shape(fgpu=0, cpu=1, mem=1))  # CPU only: asks for no fGPU, weighs nothing
    assert dict(w.typical) == {Shape(300, 1, 1): 5 * 300, Shape(10, 1, 1): 10 * 10}


def test_best_fit_packs_whole_device_requests_onto_the_fullest_agent() -> None:
    c = Cluster("best-fit")
    for name in ("a", "b", "c"):
        c.agent(name, ("M",) * 4)
    placed = [c.ask(PER) for _ in range(5)]
    assert [p[0] for p in placed if p is not None] == ["a", "a", "a", "a", "b"]
    assert c.ask(30) == ("b", ((1, 30),))  # a share: the tightest device, on the fuller agent


def test_best_fit_gives_a_cpu_only_session_the_cpu_of_an_agent_with_no_fgpu_free() -> None:
    c = Cluster("best-fit")
    c.agent("a", ("M",), cpu=8000)  # the tighter CPU, but its device is free
    c.agent("b", ("M",), cpu=16_000)
    assert c.ask(PER, cpu=1000) == ("a", ((0, PER),))
    c.agent("c", ("M",), cpu=4000)
    # a's device is taken: its 7 cores beat c's 4, which would leave c's device no CPU.
    assert c.ask(0, cpu=4000) == ("a", ())


def test_fragmentation_aware_keeps_cpu_for_the_gpus_left() -> None:
    # The forecast asks 4 cores a device; after 8 cores on "a" its 3 devices have CPU for
    # 2 of them: FGD sees nothing (one more still fits) but one device is stranded there.
    c = Cluster("fragmentation-aware")
    c.agent("a", ("M",) * 4, cpu=16_000)
    c.agent("b", ("M",) * 4, cpu=64_000)
    for _ in range(16):
        c.s.workload.note(Shape(fgpu=PER, cpu=4000, mem=1))
    assert c.ask(PER, cpu=8000) == ("b", ((0, PER),))
    # Without stranding, as FGD and best fit would: the agent with the least fGPU left.
    assert c.ask(PER, cpu=4000) == ("b", ((1, PER),))


def test_stranded_counts_the_gpus_the_cpu_left_cannot_serve() -> None:
    agent = (PER, 8000, GIB, (("M", PER), ("M", PER), ("M", 50)))
    assert stranded(agent, 4000, PER) == (250 - 200) * 4000  # 8 cores serve 2 devices
    assert stranded(agent, 2000, PER) == 0
    forecast = Forecast(((Shape(fgpu=PER, cpu=4000, mem=1), 7),), {"M": 3})
    scale = 7 * 4000  # the measure is exact: x the forecast's weighted CPU
    # 50 quanta too small for the shape, and 50 beyond what 8 cores serve (x 4).
    assert forecast.measure(agent) == 7 * 50 * scale + 4 * 7 * (250 * scale - 8000 * 7 * PER)


def test_a_scarce_model_weighs_as_its_demand_per_device_and_takes_a_toll() -> None:
    typical = ((Shape(PER, 1, 1), 10), (Shape(PER, 1, 1, gpu_models=("T4",)), 10))
    forecast = Forecast(typical, {"T4": 1, "G2": 3})
    assert dict(forecast.typical)[Shape(PER, 1, 1, gpu_models=("T4",))] == 40
    agent = (PER, 8000, GIB, (("T4", PER),))
    take_t4 = Option((("T4", PER, PER),), (PER, 8000, GIB, (("T4", 0),)))
    take_g2 = Option((("G2", PER, PER),), (PER, 8000, GIB, (("G2", 0),)))
    assert forecast.toll(take_t4) > 0 == forecast.toll(take_g2)
    assert forecast.measure(agent) == 0  # both shapes fit: nothing fragmented


def test_every_policy_gives_only_devices_of_the_models_asked_for() -> None:
    for name in POLICY_NAMES:
        c = Cluster(name)
        c.agent("t4", ("T4", "T4"))
        c.agent("v100", ("V100", "V100"))
        placed = c.ask(50, models=("V100",))
        assert placed is not None and placed[0] == "v100", name
        assert c.ask(200, models=("T4",)) == ("t4", ((0, PER), (1, PER))), name
        assert c.ask(PER, models=("T4",)) is None, name  # the T4s are taken: cancelled


def test_a_model_no_agent_has_is_refused_for_good() -> None:
    c = Cluster()
    c.agent("a", ("T4",))
    why = never_fits(c.s, Slots(cpu=1, mem=1, fgpu=50), IMAGE, gpu_models=("A100",))
    assert why is not None and why.code == "unsatisfiable" and "A100" in why.reason


def test_a_cpu_only_session_takes_no_device_and_must_say_so() -> None:
    for name in POLICY_NAMES:
        c = Cluster(name)
        c.agent("a", ("M",), cpu=4000)
        c.agent("b", ("M",), cpu=2000)
        placed = c.ask(0, cpu=3000)
        assert placed == ("a", ()), name
        assert c.s.agents["a"].gpus[0].free == PER
    request = SessionRequested(
        id="r", at=T0, actor="k", session_id="s", owner="k", image=IMAGE, slots=Slots(cpu=1, mem=1)
    )
    assert invalid_request(request) == "fGPU must be greater than zero"
    cpu_only = SessionRequested(
        id="r",
        at=T0,
        actor="k",
        session_id="s",
        owner="k",
        image=IMAGE,
        slots=Slots(cpu=1, mem=1, fgpu=10),
        cpu_only=True,
    )
    assert invalid_request(cpu_only) == "a CPU-only session asks for no fGPU"


# ---- invariants, for every policy ------------------------------------------------------------

_agents = st.lists(
    st.tuples(
        st.lists(st.sampled_from(("M", "N")), min_size=0, max_size=4),
        st.integers(min_value=1, max_value=8),  # cores
    ),
    min_size=1,
    max_size=5,
)
_asks = st.lists(
    st.tuples(
        st.sampled_from((0, 10, 30, 50, 70, 100, 130, 200, 300)),
        st.integers(min_value=1, max_value=4),  # cores
        st.sampled_from(((), ("M",), ("N",), ("M", "N"))),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(POLICY_NAMES), agents=_agents, asks=_asks)
def test_no_policy_over_allocates_or_refuses_what_fits(
    name: str, agents: list[tuple[list[str], int]], asks: list[tuple[int, int, tuple[str, ...]]]
) -> None:
    c = Cluster(name)
    for i, (models, cores) in enumerate(agents):
        c.agent(f"a{i}", tuple(models), cpu=cores * 1000)
    for fgpu, cores, models in asks:
        if (
            fgpu > 0
            and never_fits(
                c.s, Slots(cpu=cores * 1000, mem=GIB, fgpu=fgpu), IMAGE, gpu_models=models
            )
            is not None
        ):
            continue
        slots = Slots(cpu=cores * 1000, mem=GIB, fgpu=fgpu)
        could = [
            a.agent_id
            for a in c.s.agents.values()
            if usable(a, slots, IMAGE, frozenset()) and device_options(a, fgpu, models)
        ]
        placed = c.ask(fgpu, cpu=cores * 1000, models=models)
        assert (placed is None) == (not could), (name, could, placed)
        if placed is None:
            continue
        agent_id, devices = placed
        a = c.s.agents[agent_id]
        assert sum(q for _, q in devices) == fgpu
        assert all(not models or a.gpus[i].info.model in models for i, _ in devices)
        for a in c.s.agents.values():
            assert a.allocated.cpu <= a.capacity.cpu and a.allocated.mem <= a.capacity.mem
            assert all(0 <= g.free <= g.capacity for g in a.gpus.values())
            assert a.allocated.fgpu == sum(g.allocated for g in a.gpus.values())
