"""A large session that waited too long is not starved by small ones that keep fitting."""

from datetime import UTC, datetime, timedelta

from events import (
    AgentRegistered,
    AnyEvent,
    DevicePlacement,
    GpuInfo,
    Record,
    SessionAdmitted,
    SessionRequested,
    SessionScheduled,
    Slots,
)
from events import subjects as subj
from services.actors.scheduler import SchedulerActor
from services.adapters.virtual_clock import VirtualClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from tests.support.doubles import NoLog

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE = "fgpu/busybox:latest"
GIB = 1 << 30


def _state() -> tuple[ClusterState, list[str]]:
    """One GPU of 2 fGPU, 1 fGPU held; a 2 fGPU session asked at T0; small ones at T0+390s."""
    records: list[tuple[str, AnyEvent]] = []
    gpu = GpuInfo(index=0, uuid="g0", model="m", mem=16 * GIB, sm_count=80)
    records.append(
        (
            subj.agent("a"),
            AgentRegistered(
                id="r",
                at=T0,
                actor="agent:a",
                agent_id="a",
                capacity=Slots(cpu=64_000, mem=64 * GIB, fgpu=200),
                gpus=(gpu,),
                fgpu_per_gpu=200,
                images=(IMAGE,),
            ),
        )
    )

    def ask(sid: str, fgpu: int, at: datetime) -> None:
        slots = Slots(cpu=100, mem=GIB, fgpu=fgpu)
        records.append(
            (
                subj.request("u", sid),
                SessionRequested(
                    id=f"q-{sid}",
                    at=at,
                    actor="u",
                    session_id=sid,
                    owner="u",
                    image=IMAGE,
                    slots=slots,
                ),
            )
        )
        records.append(
            (
                subj.quota("u"),
                SessionAdmitted(id=f"a-{sid}", at=at, actor="quota", session_id=sid, owner="u"),
            )
        )

    ask("holder", 100, T0 - timedelta(seconds=1))
    records.append(
        (
            subj.LEDGER,
            SessionScheduled(
                id="p-holder",
                at=T0,
                actor="scheduler",
                session_id="holder",
                owner="u",
                agent_id="a",
                slots=Slots(cpu=100, mem=GIB, fgpu=100),
                devices=(DevicePlacement(gpu_index=0, fgpu=100),),
            ),
        )
    )
    ask("big", 200, T0)
    smalls = [f"small{i}" for i in range(3)]
    for sid in smalls:
        ask(sid, 50, T0 + timedelta(seconds=390))
    s = ClusterState()
    for seq, (subject, e) in enumerate(records, start=1):
        evolve(s, Record(seq=seq, subject=subject, event=e))
    return s, smalls


def _placed(decisions: list[AnyEvent]) -> set[str]:
    return {d.session_id for d in decisions if isinstance(d, SessionScheduled)}


def test_small_sessions_backfill_while_the_big_one_has_not_waited_long() -> None:
    s, smalls = _state()
    actor = SchedulerActor(NoLog(), VirtualClock(T0 + timedelta(seconds=400)), reserve_after_s=600)  # type: ignore[arg-type]
    assert _placed(actor.decide(s)) == set(smalls[:2])  # 1 fGPU free: two of 0.5


def test_after_the_reservation_delay_nothing_jumps_ahead_of_the_big_one() -> None:
    s, _ = _state()
    actor = SchedulerActor(NoLog(), VirtualClock(T0 + timedelta(seconds=400)), reserve_after_s=300)  # type: ignore[arg-type]
    decisions = actor.decide(s)
    assert _placed(decisions) == set()
    assert s.sessions["big"].waiting is not None
