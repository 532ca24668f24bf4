"""Random but meaningful logs of raw records (subject, payload): ids from small pools, so they
meet; for the projection and the actors' snapshots."""

import uuid
from datetime import UTC, datetime, timedelta

import hypothesis.strategies as st

from events import (
    AgentLost,
    AgentRegistered,
    AnyEvent,
    DestroyRejected,
    DevicePlacement,
    GpuInfo,
    GpuOomRefused,
    GpuUsageSampled,
    PayloadRejected,
    PolicySet,
    Record,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionErrored,
    SessionPreparing,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    Slots,
    encode,
    record_of,
)
from events import subjects as subj

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


SESSIONS = ["s0", "s1", "s2", "s3", "s4"]


AGENTS = ["a0", "a1"]


OWNERS = ["alice", "bob"]


Raw = tuple[str, bytes]  # subject, payload


def _id() -> str:
    return uuid.uuid4().hex


def envelope(k: int, actor: str, cause: str | None = None) -> dict[str, object]:
    return {"id": _id(), "at": T0 + timedelta(seconds=k), "actor": actor, "causation_id": cause}


@st.composite
def _message(draw: st.DrawFn, k: int) -> Raw:
    """One message of a random but meaningful log: ids from small pools, so they meet."""
    sid = draw(st.sampled_from(SESSIONS))
    aid = draw(st.sampled_from(AGENTS))
    owner = draw(st.sampled_from(OWNERS))
    kind = draw(st.integers(0, 19))
    e: AnyEvent
    subject = subj.LEDGER
    if kind == 0:
        fgpu = draw(st.sampled_from([0, 25, 50, 100, 150, 250]))
        e = SessionRequested(
            **envelope(k, owner),
            session_id=sid,
            owner=owner,
            image=draw(st.sampled_from(["img:1", "img:2"])),
            command=("sleep", "1"),
            slots=Slots(cpu=500, mem=1 << 30, fgpu=fgpu),
            priority=draw(st.integers(0, 3)),
        )
        wrong = draw(st.booleans()) and draw(st.booleans())
        subject = subj.request("mallory" if wrong else owner, sid)
    elif kind == 1:
        e = SessionAdmitted(**envelope(k, "quota"), session_id=sid, owner=owner)
        subject = subj.quota(owner)
    elif kind == 2:
        e = SessionRejected(
            **envelope(k, "quota"), session_id=sid, owner=owner, code="quota", reason="r"
        )
        subject = subj.quota(owner)
    elif kind == 3:
        e = SessionQueued(**envelope(k, "scheduler"), session_id=sid, reason="no room")
    elif kind == 4:
        gpu = draw(st.integers(0, 2))
        e = SessionScheduled(
            **envelope(k, "scheduler"),
            session_id=sid,
            owner=owner,
            agent_id=aid,
            slots=Slots(cpu=500, mem=1 << 30, fgpu=100),
            devices=(DevicePlacement(gpu_index=gpu, fgpu=draw(st.sampled_from([50, 100]))),),
        )
    elif kind == 5:
        e = SessionCancelled(**envelope(k, "scheduler"), session_id=sid, owner=owner, reason="gone")
    elif kind == 6:
        e = SessionTerminating(
            **envelope(k, "scheduler"), session_id=sid, agent_id=aid, reason="rm"
        )
    elif kind in (7, 8, 9, 10):
        subject = subj.agent_session(aid, sid)
        actor = f"agent:{aid}"
        if kind == 7:
            e = SessionPreparing(**envelope(k, actor), session_id=sid, agent_id=aid)
        elif kind == 8:
            e = SessionRunning(**envelope(k, actor), session_id=sid, agent_id=aid, container_id="c")
        elif kind == 9:
            code = draw(st.sampled_from([0, 1, 137, None]))
            e = SessionTerminated(
                **envelope(k, actor), session_id=sid, agent_id=aid, exit_code=code, reason="exit"
            )
        else:
            e = SessionErrored(
                **envelope(k, actor), session_id=sid, agent_id=aid, reason="no image"
            )
    elif kind == 11:
        e = SessionDestroyRequested(**envelope(k, owner), session_id=sid, requester=owner)
        subject = subj.request(owner, sid)
    elif kind == 12:
        e = DestroyRejected(
            **envelope(k, "scheduler"), session_id=sid, requester=owner, reason="no"
        )
    elif kind == 13:
        e = PolicySet(
            **envelope(k, "admin"),
            owner=owner,
            max_concurrent_sessions=draw(st.one_of(st.none(), st.integers(0, 3))),
            max_slots=draw(st.one_of(st.none(), st.just(Slots(cpu=1000, mem=1 << 31, fgpu=200)))),
        )
        subject = subj.quota(owner)
    elif kind == 14:
        gpus = draw(st.integers(1, 2))
        e = AgentRegistered(
            **envelope(k, f"agent:{aid}"),
            agent_id=aid,
            capacity=Slots(cpu=8000, mem=1 << 34, fgpu=200 * gpus),
            gpus=tuple(
                GpuInfo(index=i, uuid=f"GPU-{aid}-{i}", model="M", mem=1 << 34, sm_count=80)
                for i in range(gpus)
            ),
            fgpu_per_gpu=200,
            images=("img:1",),
        )
        subject = subj.agent(aid)
    elif kind == 15:
        e = AgentLost(**envelope(k, "scheduler"), agent_id=aid, reason="silent")
    elif kind == 16:
        e = PayloadRejected(**envelope(k, "quota"), stream_seq=k, subject=subj.SYS, error="bad")
        subject = subj.SYS
    elif kind == 17:
        e = GpuUsageSampled(
            **envelope(k, f"agent:{aid}"),
            session_id=sid,
            agent_id=aid,
            gpu_index=0,
            mem_used=k,
            mem_peak=k + 1,
            mem_limit=1 << 30,
            launches=k,
            throttled_ns=0,
            oom_refusals=0,
            charged_ns=draw(st.sampled_from([None, k * 1_000_000])),
        )
        subject = subj.usage(aid, sid)
    elif kind == 18:
        e = GpuOomRefused(
            **envelope(k, f"agent:{aid}"),
            session_id=sid,
            agent_id=aid,
            gpu_index=0,
            pid=7,
            requested=1 << 31,
            mem_used=1 << 29,
            mem_limit=1 << 30,
        )
        subject = subj.usage(aid, sid)
    else:
        return subj.SYS, draw(st.sampled_from([b"not json", b'{"type": "nope.v1"}', b"[]"]))
    return subject, encode(e)


@st.composite
def logs(draw: st.DrawFn) -> list[Raw]:
    n = draw(st.integers(0, 70))
    out: list[Raw] = [draw(_message(k)) for k in range(n)]
    # Resends: the same message twice (the fold must treat the copy as a no-op or a dup).
    for _ in range(draw(st.integers(0, 3))):
        if out:
            out.insert(draw(st.integers(0, len(out))), out[draw(st.integers(0, len(out) - 1))])
    return out


def records_from(log: list[Raw]) -> list[Record]:
    return [record_of(i + 1, subject, payload) for i, (subject, payload) in enumerate(log)]
