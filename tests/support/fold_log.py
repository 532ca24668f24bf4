"""Records with increasing sequences, folded as a test adds them; the time, image and slots the
fold's tests ask for."""

from datetime import UTC, datetime
from typing import Any

from events import (
    AgentRegistered,
    AnyEvent,
    DevicePlacement,
    GpuInfo,
    Malformed,
    Record,
    SessionAdmitted,
    SessionCancelled,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    Slots,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.id_set import IdSet
from services.domain.fold.state import evolve
from services.domain.status import ENDED

T0 = datetime(2024, 1, 1, tzinfo=UTC)


GIB = 1 << 30


IMAGE = "fgpu/busybox:latest"


NEED = Slots(cpu=1000, mem=GIB, fgpu=50)


class Log:
    """Records with increasing sequences, folded as they are added."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.state = ClusterState()
        self._ids = 0

    def add(self, subject: str, event: AnyEvent | Malformed) -> Record:
        r = Record(seq=len(self.records) + 1, subject=subject, event=event)
        self.records.append(r)
        evolve(self.state, r)
        return r

    def id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    # ---- the events of a session's life, on their own subjects ----

    def agent(self, agent_id: str = "a1", n_gpus: int = 2, per: int = 100) -> None:
        gpus = tuple(
            GpuInfo(index=i, uuid=f"GPU-{i}", model="Mock", mem=16 * GIB, sm_count=80)
            for i in range(n_gpus)
        )
        e = AgentRegistered(
            id=self.id("reg"),
            at=T0,
            actor=f"agent:{agent_id}",
            agent_id=agent_id,
            capacity=Slots(cpu=8000, mem=32 * GIB, fgpu=n_gpus * per),
            gpus=gpus,
            fgpu_per_gpu=per,
            images=(IMAGE,),
        )
        self.add(subj.agent(agent_id), e)

    def request(
        self, sid: str = "s1", owner: str = "alice", slots: Slots = NEED, **kw: Any
    ) -> SessionRequested:
        e = SessionRequested(
            id=f"req-{sid}",
            at=T0,
            actor=owner,
            session_id=sid,
            owner=owner,
            image=IMAGE,
            slots=slots,
            **kw,
        )
        self.add(subj.request(owner, sid), e)
        return e

    def admit(self, sid: str = "s1", owner: str = "alice") -> None:
        e = SessionAdmitted(id=self.id("adm"), at=T0, actor="quota", session_id=sid, owner=owner)
        self.add(subj.quota(owner), e)

    def schedule(
        self, sid: str = "s1", agent_id: str = "a1", gpu: int = 0, slots: Slots = NEED
    ) -> None:
        e = SessionScheduled(
            id=self.id("sched"),
            at=T0,
            actor="scheduler",
            session_id=sid,
            owner=self.state.sessions[sid].owner if sid in self.state.sessions else "alice",
            agent_id=agent_id,
            slots=slots,
            devices=(DevicePlacement(gpu_index=gpu, fgpu=slots.fgpu),),
        )
        self.add(subj.LEDGER, e)

    def report(self, cls: type[AnyEvent], sid: str = "s1", agent_id: str = "a1", **kw: Any) -> None:
        e = cls(
            id=self.id("rep"),
            at=T0,
            actor=f"agent:{agent_id}",
            session_id=sid,
            agent_id=agent_id,
            **kw,
        )
        self.add(subj.agent_session(agent_id, sid), e)

    def terminated(self, sid: str = "s1", agent_id: str = "a1") -> None:
        self.report(SessionTerminated, sid, agent_id, exit_code=0, reason="exited")

    def cancel(self, sid: str = "s1", owner: str = "alice", cause: str | None = None) -> None:
        e = SessionCancelled(
            id=self.id("cancel"),
            at=T0,
            actor="scheduler",
            causation_id=cause,
            session_id=sid,
            owner=owner,
            reason="destroyed",
        )
        self.add(subj.LEDGER, e)

    def running(self, sid: str = "s1") -> None:
        """Request, admit, place and start ``sid`` for alice on a1 (registered if need be)."""
        if "a1" not in self.state.agents:
            self.agent()
        self.request(sid)
        self.admit(sid)
        self.schedule(sid)
        self.report(SessionRunning, sid, container_id=f"c-{sid}")


def known_ids(s: ClusterState) -> tuple[set[str], bytes]:
    """The sessions ``s`` holds whole that have not ended, and (as ``IdSet`` bytes) every
    id it knows ended, whether it let go of the session yet or not: two folds of one log
    agree on these, wherever each let go."""
    ended = IdSet.from_bytes(s.ended.to_bytes())
    for sid, v in s.sessions.items():
        if v.status in ENDED:
            ended.add(sid)
    return {sid for sid, v in s.sessions.items() if v.status not in ENDED}, ended.to_bytes()
