"""The fold's state as bytes: the projections' snapshots and the actors'.

A snapshot holds what can still change: sessions that have not ended, agents, policies,
quota held (at every level), the queues, unanswered destroy and admin requests, and the
tenancy. An ended session never changes again (every rule of the fold ignores it), so it
is left out; its rows live in the ``sessions`` and ``session_history`` tables. Its id
goes to the restored state's ``ended`` set, so that a second request for it is still
ignored, as the fold does. Two things the fold only writes and never reads (each
subject's last sequence, the answers to destroy requests) serve the actors, not the
projections, and are not kept.

Encoding is deterministic (sets and unordered keys are sorted), so a projection built batch by batch
and one rebuilt in one go store the same bytes.
"""

from datetime import datetime

import msgspec

from events import (
    AdminRequested,
    CreatePreset,
    GroupSettings,
    ImageInfo,
    LogHealth,
    PolicyLevel,
    PolicySet,
    ResourcePolicy,
    SessionDestroyRequested,
    Slots,
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.id_set import Answers, IdSet
from services.domain.fold.state import own_subjects, running_at
from services.domain.fold.workload import Shape, Workload
from services.domain.records import AgentView, GpuView, OwnerUsage, SessionView
from services.domain.secrets import HeldSecret
from services.domain.serving.state import ServingState
from services.domain.status import ENDED, SessionStatus
from services.domain.tenancy.model import Keypair, Tenancy, User, Vfolder

__all__ = [
    "FOLD_VERSION",
    "SnapshotUndecodable",
    "SnapshotUnusable",
    "decode_actor_state",
    "decode_state",
    "encode_actor_state",
    "encode_state",
    "live_sessions",
    "snapshot_seq",
]

# The fold's schema: a change to what the fold keeps, or to how it folds an event, bumps
# it, and every actor snapshot of another version is ignored (full replay).
# 2: the workload forecast and the latest placement (placement policies); 3: resource
# groups; 4: agents' image details and registry, sessions' pull progress, domains' image
# allow-lists and aliases; 5: virtual folders (the tenancy's, and a session's mounts);
# 6: the storage hosts agents mount and admitted sessions need; 7: resource presets;
# 8: serving (endpoints, replicas, serve requests; an inference session's address);
# 9: ended sessions and answered destroy requests as ``IdSet`` digests; 10: secrets
# (sealed) and the key they are sealed to, a session's references to them; 11: an
# endpoint revision's references to its owner's secrets
FOLD_VERSION = 11


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
    lost_at: datetime | None = None
    registered_seq: int = 0
    heard_seq: int = 0
    group: str = "default"
    image_details: list[ImageInfo] = []
    registry: str | None = None
    storage_hosts: list[str] | None = None

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
            lost_at=a.lost_at,
            registered_seq=a.registered_seq,
            heard_seq=a.heard_seq,
            group=a.group,
            image_details=list(a.image_details),
            registry=a.registry,
            storage_hosts=None if a.storage_hosts is None else list(a.storage_hosts),
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
            lost_at=self.lost_at,
            registered_seq=self.registered_seq,
            heard_seq=self.heard_seq,
            group=self.group,
            image_details=tuple(self.image_details),
            registry=self.registry,
            storage_hosts=None if self.storage_hosts is None else tuple(self.storage_hosts),
        )


class _Tenancy(msgspec.Struct, array_like=True, frozen=True):
    domains: list[tuple[str, list[str]]]
    users: list[User]
    keypairs: list[Keypair]
    policies: list[tuple[PolicyLevel, str, ResourcePolicy]]
    groups: list[tuple[str, GroupSettings]] = []
    images: list[tuple[str, list[str]]] = []  # domain -> its allow-list
    aliases: list[tuple[str, list[tuple[str, str]]]] = []  # domain -> alias, image
    vfolders: list[Vfolder] = []  # since fold version 5
    presets: list[CreatePreset] = []  # since fold version 7

    @classmethod
    def of(cls, t: Tenancy) -> "_Tenancy":
        return cls(
            domains=[(d, list(projects)) for d, projects in sorted(t.domains.items())],
            users=[t.users[k] for k in sorted(t.users)],
            keypairs=[t.keypairs[k] for k in sorted(t.keypairs)],
            policies=[
                (level, target, t.policies[level, target]) for level, target in sorted(t.policies)
            ],
            groups=sorted(t.groups.items()),
            images=[(d, list(t.images[d])) for d in sorted(t.images)],
            aliases=[(d, sorted(t.aliases[d].items())) for d in sorted(t.aliases)],
            vfolders=[t.vfolders[k] for k in sorted(t.vfolders)],
            presets=[t.presets[k] for k in sorted(t.presets)],
        )

    def view(self) -> Tenancy:
        return Tenancy(
            domains={d: dict.fromkeys(projects) for d, projects in self.domains},
            users={u.user: u for u in self.users},
            keypairs={k.access_key: k for k in self.keypairs},
            policies={(level, target): p for level, target, p in self.policies},
            groups=dict(self.groups),
            images={d: tuple(names) for d, names in self.images},
            aliases={d: dict(pairs) for d, pairs in self.aliases},
            vfolders={f.vfolder_id: f for f in self.vfolders},
            presets={(p.domain or "", p.name): p for p in self.presets},
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
    held: dict[str, OwnerUsage]
    pending: dict[str, OwnerUsage]
    tenancy: _Tenancy
    admin_requests: list[AdminRequested]
    # Since fold version 2 (snapshots from before restore none: an empty forecast).
    workload: tuple[list[Shape], int, list[tuple[Shape, int]], int] = ([], 0, [], 0)
    last_placed: str | None = None
    # Since the log's health was folded (older snapshots: none known; the watcher says
    # each server's at its start).
    log_space: list[LogHealth] = []
    serving: ServingState = msgspec.field(default_factory=ServingState)  # since fold version 8
    # Since fold version 10: (owner, name, sealed value, version, set at), sorted; the key.
    secrets: list[tuple[str, str, bytes, int, datetime]] = []
    secrets_key: bytes | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Snapshot)


def live_sessions(s: ClusterState) -> list[SessionView]:
    """Sessions that have not ended, in arrival order."""
    live = [v for v in s.sessions.values() if v.status not in ENDED]
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
            held={k: s.held[k] for k in sorted(s.held)},
            pending={k: s.pending[k] for k in sorted(s.pending)},
            tenancy=_Tenancy.of(s.tenancy),
            admin_requests=list(s.admin_requests.values()),
            workload=_workload(s.workload),
            last_placed=s.last_placed,
            log_space=[s.log_space[k] for k in sorted(s.log_space)],
            # What changed is the owner's note, not state: a snapshot taken mid-batch
            # must not depend on how the log was cut into batches.
            serving=msgspec.structs.replace(s.serving, changed=False),
            secrets=[
                (owner, name, h.sealed, h.version, h.set_at)
                for owner, mine in sorted(s.secrets.owners.items())
                for name, h in sorted(mine.items())
            ],
            secrets_key=s.secrets.public_key,
        )
    )


def _workload(w: Workload) -> tuple[list[Shape], int, list[tuple[Shape, int]], int]:
    recent, admitted, typical, version = w.parts()
    return recent, admitted, list(typical), version


def decode_state(data: bytes, ended: IdSet | None = None) -> ClusterState:
    """The state ``encode_state`` saved, with ``ended`` as the ids of the sessions that
    ended and were let go of.

    Raises msgspec.DecodeError or msgspec.ValidationError if ``data`` is not a snapshot.
    """
    snap = _decoder.decode(data)
    s = ClusterState(last_seq=snap.last_seq, ended=IdSet() if ended is None else ended)
    for v in snap.sessions:
        s.sessions[v.session_id] = v
    for snap_agent in snap.agents:
        a = snap_agent.view()
        s.agents[a.agent_id] = a
        s.fit.update(a)
        s.shares.agent(None, a, s.sessions)
        for sid in a.sessions:
            s.shares.allocated(a.group, s.sessions[sid])
    s.policies = {p.owner: p for p in snap.policies}
    s.usage = dict(snap.usage)
    s.undecided = dict.fromkeys(snap.undecided)
    for sid in snap.queue:
        s.queue.add(s.sessions[sid])
    for v in snap.sessions:
        if v.status is SessionStatus.RUNNING:
            s.running.add(v, running_at(v))
    s.destroys = {d.id: d for d in snap.destroys}
    s.malformed = {seq: (subject, error) for seq, subject, error in snap.malformed}
    s.held = dict(snap.held)
    s.pending = dict(snap.pending)
    s.tenancy = snap.tenancy.view()
    s.admin_requests = {r.id: r for r in snap.admin_requests}
    recent, admitted, typical, version = snap.workload
    s.workload = Workload.of(recent, admitted, tuple(typical), version)
    s.last_placed = snap.last_placed
    s.log_space = {h.server: h for h in snap.log_space}
    s.serving = snap.serving
    for owner, name, sealed, version, set_at in snap.secrets:
        s.secrets.owners.setdefault(owner, {})[name] = HeldSecret(sealed, version, set_at)
    s.secrets.public_key = snap.secrets_key
    return s


class SnapshotUnusable(Exception):
    """An actor snapshot that must not be started from: why (another log, another fold
    version, bytes that are not a snapshot)."""


class SnapshotUndecodable(SnapshotUnusable):
    """Bytes that are no actor snapshot at all: damaged, or never one (corrupt)."""


class _ActorSnapshot(msgspec.Struct, array_like=True, frozen=True):
    """What an actor starts from: the projections' snapshot, and what the fold writes for
    the actors alone: each subject's last sequence (every optimistic-concurrency append
    expects it), the answers to destroy requests, and the ids of ended sessions (a second
    request with such an id is ignored, as the full fold ignores it). The ids are
    ``IdSet`` bytes: no string per id to decode, whatever the history's length."""

    version: int
    log: str  # the identity of the log it was folded from
    folded: int  # records folded into it (ClusterState.folded)
    state: bytes
    subject_seq: dict[str, int]
    destroys_answered: bytes  # IdSet
    destroys_refused: dict[str, str]
    ended: bytes  # IdSet


_actor_decoder = msgspec.msgpack.Decoder(_ActorSnapshot)


class _Version(msgspec.Struct, array_like=True, frozen=True):
    """The first field of ``_ActorSnapshot`` alone, whatever the rest of that version."""

    version: int


_version_decoder = msgspec.msgpack.Decoder(_Version)


def encode_actor_state(s: ClusterState, log: str) -> bytes:
    """``s`` whole, as an actor needs it to go on from ``s.last_seq`` of the log ``log``:
    sessions that have ended as ``forget_ended`` leaves them, whether or not it has yet.

    ``s`` must hold nothing the log does not (``s.unconfirmed`` empty)."""
    if s.unconfirmed:
        raise ValueError("a state holding decisions the log does not have yet")
    ended = s.ended
    subject_seq = s.subject_seq
    for sid, v in s.sessions.items():
        if v.status in ENDED:
            if ended is s.ended:
                ended = IdSet.from_bytes(s.ended.to_bytes())
            ended.add(sid)
            if subject_seq is s.subject_seq:
                subject_seq = dict(subject_seq)
            for subject in own_subjects(v):
                subject_seq.pop(subject, None)
    return _encoder.encode(
        _ActorSnapshot(
            version=FOLD_VERSION,
            log=log,
            folded=s.folded,
            state=encode_state(s),
            subject_seq=subject_seq,
            destroys_answered=s.destroy_answers.ids.to_bytes(),
            destroys_refused=s.destroy_answers.refused,
            ended=ended.to_bytes(),
        )
    )


class _Head(msgspec.Struct, array_like=True, frozen=True):
    """The first field of ``_Snapshot`` alone: the rest is not decoded."""

    last_seq: int


_head_decoder = msgspec.msgpack.Decoder(_Head)


def _usable(data: bytes, log: str) -> _ActorSnapshot:
    """The actor snapshot in ``data``, if it is one of the log ``log`` by this version of
    the fold; else SnapshotUnusable."""
    try:
        version = _version_decoder.decode(data).version
        if version != FOLD_VERSION:  # its other fields may be of another shape
            raise SnapshotUnusable(f"of fold version {version}, this one is {FOLD_VERSION}")
        snap = _actor_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotUndecodable(f"not a snapshot: {e}") from None
    if snap.log != log:
        raise SnapshotUnusable(f"of another log ({snap.log}, this one is {log})")
    return snap


def decode_actor_state(data: bytes, log: str) -> ClusterState:
    """The state ``encode_actor_state`` saved, if it was folded from the log ``log`` by
    this version of the fold; else SnapshotUnusable.

    Everything it holds counts as changed, as after a full replay: an actor's first
    reaction looks at all of it.
    """
    snap = _usable(data, log)
    try:
        s = decode_state(snap.state, IdSet.from_bytes(snap.ended))
        answered = IdSet.from_bytes(snap.destroys_answered)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
        raise SnapshotUndecodable(f"not a snapshot: {e}") from None
    s.folded = snap.folded
    s.subject_seq = dict(snap.subject_seq)
    s.destroy_answers = Answers(answered, dict(snap.destroys_refused))
    s.changed = dict.fromkeys(v.session_id for v in live_sessions(s))
    s.changed_agents = dict.fromkeys(s.agents)
    return s


def snapshot_seq(data: bytes, log: str) -> int:
    """The sequence an actor snapshot covers, if it is one of the log ``log`` by this
    version of the fold; else SnapshotUnusable. (What the archiver asks: it removes from
    the stream only what every actor's snapshot covers.)"""
    snap = _usable(data, log)
    try:
        return _head_decoder.decode(snap.state).last_seq
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotUndecodable(f"not a snapshot: {e}") from None
