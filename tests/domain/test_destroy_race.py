"""A destroy that loses the race to the session's own end is still answered, exactly once."""

from datetime import UTC, datetime

from events import (
    AgentRegistered,
    AnyEvent,
    DevicePlacement,
    GpuInfo,
    Record,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    Slots,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve

T = datetime(2026, 1, 1, tzinfo=UTC)
ONE = Slots(cpu=1, mem=1, fgpu=100)


def test_a_stop_order_that_arrives_after_the_end_answers_the_destroy() -> None:
    gpu = GpuInfo(index=0, uuid="g", model="m", mem=1 << 34, sm_count=1)
    log: list[tuple[str, AnyEvent]] = [
        (subj.agent("a"), AgentRegistered(
            id="r", at=T, actor="agent:a", agent_id="a",
            capacity=Slots(cpu=9, mem=1 << 34, fgpu=200),
            gpus=(gpu,), fgpu_per_gpu=200, images=("i",))),
        (subj.request("u", "s1"), SessionRequested(
            id="q", at=T, actor="u", session_id="s1", owner="u", image="i", slots=ONE)),
        (subj.quota("u"), SessionAdmitted(
            id="ad", at=T, actor="quota", session_id="s1", owner="u")),
        (subj.LEDGER, SessionScheduled(
            id="sc", at=T, actor="scheduler", session_id="s1", owner="u", agent_id="a", slots=ONE,
            devices=(DevicePlacement(gpu_index=0, fgpu=100),))),
        (subj.agent_session("a", "s1"), SessionRunning(
            id="ru", at=T, actor="agent:a", session_id="s1", agent_id="a", container_id="c")),
        (subj.request("u", "s1"), SessionDestroyRequested(
            id="D", at=T, actor="u", session_id="s1", requester="u")),
        # The command exits on its own just before the scheduler's stop order lands.
        (subj.agent_session("a", "s1"), SessionTerminated(
            id="te", at=T, actor="agent:a", session_id="s1", agent_id="a", exit_code=0,
            reason="exited")),
        (subj.LEDGER, SessionTerminating(
            id="tg", at=T, actor="scheduler", causation_id="D", session_id="s1", agent_id="a",
            reason="destroyed by u")),
    ]  # fmt: skip
    s = ClusterState()
    for seq, (subject, e) in enumerate(log, start=1):
        evolve(s, Record(seq=seq, subject=subject, event=e))
    assert s.sessions["s1"].status == "TERMINATED"
    assert s.destroys == {}  # nobody will answer it again
    assert s.destroy_answers == {"D": None}
