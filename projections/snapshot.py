"""Snapshots of the fold's state, small enough to keep one every few thousand events.

A snapshot holds what can still change: sessions that have not ended, agents, policies,
quota held, the queues and unanswered destroy requests. An ended session never changes
again (every rule of the fold ignores it), so it is left out; its rows live in the
``sessions`` and ``session_history`` tables. ``ENDED_STUB`` stands in for such a session
in a restored state, so that a second request for its id is still ignored, as the fold
does. Two things the fold only writes and never reads (each subject's last sequence, the
answers to destroy requests) serve the actors, not the projections, and are not kept.

Encoding is deterministic (sets and unordered keys are sorted), so a projection built batch by batch
and one rebuilt in one go store the same bytes.
"""

from datetime import UTC, datetime
from functools import partial
from operator import is_not

import msgspec

from events import PolicySet, SessionDestroyRequested, Slots
from services.domain.state import AgentView, ClusterState, GpuView, OwnerUsage, SessionView
from services.domain.status import ENDED, SessionStatus

__all__ = ["ENDED_STUB", "decode_state", "encode_state", "is_stub", "live_sessions"]

ENDED_STUB = SessionView(
    session_id="",
    owner="",
    image="",
    command=(),
    slots=Slots(),
    priority=0,
    name=None,
    request_id="",
    correlation_id="",
    arrival_seq=0,
    requested_at=datetime(1970, 1, 1, tzinfo=UTC),
    status=SessionStatus.TERMINATED,
)
"""Stands in for every ended session of a restored state: the fold never changes it."""


class _Agent(msgspec.Struct, array_like=True, frozen=True):
    agent_id: str
    capacity: Slots
    fgpu_per_gpu: int
    gpus: list[GpuView]
    images: list[str]  # sorted: a frozenset's order changes from one process to the next
    runtime: str
    allocated: Slots
    sessions: list[str]
    lost: bool

    @classmethod
    def of(cls, a: AgentView) -> "_Agent":
        return cls(
            agent_id=a.agent_id,
            capacity=a.capacity,
            fgpu_per_gpu=a.fgpu_per_gpu,
            gpus=list(a.gpus.values()),
            images=sorted(a.images),
            runtime=a.runtime,
            allocated=a.allocated,
            sessions=list(a.sessions),
            lost=a.lost,
        )

    def view(self) -> AgentView:
        return AgentView(
            agent_id=self.agent_id,
            capacity=self.capacity,
            fgpu_per_gpu=self.fgpu_per_gpu,
            gpus={g.info.index: g for g in self.gpus},
            images=frozenset(self.images),
            runtime=self.runtime,
            allocated=self.allocated,
            sessions=dict.fromkeys(self.sessions),
            lost=self.lost,
        )


class _Snapshot(msgspec.Struct, array_like=True, frozen=True):
    last_seq: int
    sessions: list[SessionView]
    agents: list[_Agent]
    policies: list[PolicySet]
    usage: dict[str, OwnerUsage]
    undecided: list[str]
    queue: list[str]
    destroys: list[SessionDestroyRequested]
    malformed: list[tuple[int, str, str]]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Snapshot)


def is_stub(v: SessionView) -> bool:
    return v is ENDED_STUB


def live_sessions(s: ClusterState) -> list[SessionView]:
    """Sessions that have not ended, in arrival order."""
    # Stubs, most of a long log's sessions, are skipped by identity in C (``filter``): the
    # status test then runs only on the few hundred others.
    others = filter(partial(is_not, ENDED_STUB), s.sessions.values())
    live = [v for v in others if v.status not in ENDED]
    live.sort(key=lambda v: v.arrival_seq)
    return live


def encode_state(s: ClusterState) -> bytes:
    """The part of ``s`` that can still change, as bytes."""
    return _encoder.encode(
        _Snapshot(
            last_seq=s.last_seq,
            sessions=live_sessions(s),
            agents=[_Agent.of(s.agents[k]) for k in sorted(s.agents)],
            policies=[s.policies[k] for k in sorted(s.policies)],
            usage={k: s.usage[k] for k in sorted(s.usage)},
            undecided=list(s.undecided),
            queue=list(s.queue),
            destroys=list(s.destroys.values()),
            malformed=[(seq, subject, error) for seq, (subject, error) in s.malformed.items()],
        )
    )


def decode_state(data: bytes, ended: list[str] | None = None) -> ClusterState:
    """The state ``encode_state`` saved, with ``ENDED_STUB`` for each id in ``ended``.

    Raises msgspec.DecodeError or msgspec.ValidationError if ``data`` is not a snapshot.
    """
    snap = _decoder.decode(data)
    s = ClusterState(last_seq=snap.last_seq)
    for sid in ended or ():
        s.sessions[sid] = ENDED_STUB
    for v in snap.sessions:
        s.sessions[v.session_id] = v
    for snap_agent in snap.agents:
        a = snap_agent.view()
        s.agents[a.agent_id] = a
        s.fit.update(a)
    s.policies = {p.owner: p for p in snap.policies}
    s.usage = dict(snap.usage)
    s.undecided = dict.fromkeys(snap.undecided)
    s.queue = dict.fromkeys(snap.queue)
    s.destroys = {d.id: d for d in snap.destroys}
    s.malformed = {seq: (subject, error) for seq, subject, error in snap.malformed}
    return s
