"""An actor's snapshots: it starts from the latest one and the log's tail, and keeps one.

A snapshot that is missing, unreadable, corrupt (its bytes are not what was saved, or not
a snapshot at all), of another fold version or another log, or ahead of the log, is
ignored with a warning that says which (``snapshot.corrupt``, ``snapshot.unreadable``,
``snapshot.ignored``, with the reason): the actor replays the whole log, as without one,
and an actor that writes snapshots keeps one at once after that replay, in place of the
one it could not use. Saving never holds a decision up: the state is encoded between two
batches (it holds live sessions, not history: a few milliseconds) and stored by a task
of its own, one at a time; a save that fails is logged and tried again at the next one
due. A state is saved only once every decision the actor applied ahead of the log has
come back from it: a snapshot holds the fold of the log up to its sequence, nothing
more. ``check`` tells what an actor starting now would make of a store's snapshot
(``fgpu admin snapshots``).

Each kind of actor's snapshot has its codec (``SnapshotCodec``, one per kind in
``CODECS``): the cluster fold's for the scheduler and quota, the pipeline fold's for the
pipeline actor; the store, the checksum, the rules above and the listing are the same.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import structlog
from anyio.abc import TaskGroup

from services.domain.fold.cluster import ClusterState
from services.domain.fold.state_codec import (
    SnapshotUndecodable,
    SnapshotUnusable,
    decode_actor_state,
    encode_actor_state,
    snapshot_seq,
)
from services.ports import EventLog, LogError, SnapshotCorrupt, SnapshotStore

if TYPE_CHECKING:
    from services.domain.pipelines.runs import PipelineState

__all__ = [
    "CLUSTER",
    "CODECS",
    "PIPELINE",
    "SnapshotCodec",
    "SnapshotHealth",
    "Snapshots",
    "StateSnapshots",
    "check",
    "covered_by",
]

log = structlog.get_logger()
S = TypeVar("S")


class SnapshotCodec(Protocol[S]):
    """A kind of actor state as snapshot bytes. ``decode`` and ``seq_of`` raise
    SnapshotUnusable (SnapshotUndecodable: no snapshot at all)."""

    def encode(self, state: S, log: str) -> bytes: ...
    def decode(self, data: bytes, log: str) -> S: ...
    def seq_of(self, data: bytes, log: str) -> int: ...
    def empty(self) -> S: ...
    def seq(self, state: S) -> int: ...
    def settled(self, state: S) -> bool:
        """Whether ``state`` holds nothing the log has not given back."""
        ...


class _Cluster:
    def encode(self, state: ClusterState, log: str) -> bytes:
        return encode_actor_state(state, log)

    def decode(self, data: bytes, log: str) -> ClusterState:
        return decode_actor_state(data, log)

    def seq_of(self, data: bytes, log: str) -> int:
        return snapshot_seq(data, log)

    def empty(self) -> ClusterState:
        return ClusterState()

    def seq(self, state: ClusterState) -> int:
        return state.last_seq

    def settled(self, state: ClusterState) -> bool:
        return not state.unconfirmed


class _Pipeline:
    # The pipeline fold (YAML documents, cron schedules) is imported by the one actor
    # that keeps its snapshots, and by whoever reads one: every other actor's start
    # would pay for it (a tenth of a second of CPU, bench/history.py).
    def encode(self, state: "PipelineState", log: str) -> bytes:
        from services.domain.pipelines.snapshot import encode_pipeline_state

        return encode_pipeline_state(state, log)

    def decode(self, data: bytes, log: str) -> "PipelineState":
        from services.domain.pipelines.snapshot import decode_pipeline_state

        return decode_pipeline_state(data, log)

    def seq_of(self, data: bytes, log: str) -> int:
        from services.domain.pipelines.snapshot import pipeline_snapshot_seq

        return pipeline_snapshot_seq(data, log)

    def empty(self) -> "PipelineState":
        from services.domain.pipelines.runs import PipelineState

        return PipelineState()

    def seq(self, state: "PipelineState") -> int:
        return state.last_seq

    def settled(self, state: "PipelineState") -> bool:
        return state.settled


CLUSTER: SnapshotCodec[ClusterState] = _Cluster()
PIPELINE: "SnapshotCodec[PipelineState]" = _Pipeline()
# Each kind's codec (events.subjects.SNAPSHOT_KINDS).
CODECS: Mapping[str, SnapshotCodec[Any]] = {
    "scheduler": CLUSTER,
    "quota": CLUSTER,
    "pipeline": PIPELINE,
}


def covered_by(data: bytes, log: str) -> int:
    """The sequence an actor snapshot of any kind (its envelope says which) of the log
    ``log`` covers. Raises SnapshotUnusable; SnapshotUndecodable if of no kind."""
    undecodable = SnapshotUndecodable("no snapshot codec")
    for codec in (CLUSTER, PIPELINE):
        try:
            return codec.seq_of(data, log)
        except SnapshotUndecodable as e:
            undecodable = e
    raise undecodable


class StateSnapshots(Generic[S]):
    """Where an actor's snapshots are (of states ``codec`` encodes), whether it writes
    them, and how often: once ``every_events`` events were folded since the last, or
    ``every_s`` seconds went by with some folded."""

    def __init__(
        self,
        store: SnapshotStore,
        codec: SnapshotCodec[S],
        *,
        writes: bool,
        every_events: int = 50_000,
        every_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_events < 1 or every_s <= 0:
            raise ValueError("snapshots are kept every 1 event or more, every >0 seconds")
        self.store = store
        self.codec = codec
        self.writes = writes
        self.every_events = every_events
        self.every_s = every_s
        self._clock = clock
        self._log = ""  # the log's identity, read at each start
        self._saved_seq = 0  # the sequence the latest snapshot known here covers
        self._saved_at = clock()
        self._saving = False
        self.started_from = 0  # the sequence the latest start began from (0: full replay)

    async def start(self, events: EventLog, actor: str) -> S:
        """The latest usable snapshot's state, or an empty one (replay from the start)."""
        self._log = await events.identity()
        self.started_from = self._saved_seq = 0
        examined = _examine(self.store, events, self._log, self.codec)
        found, health = await examined
        _say(health, actor)
        if found is None:
            return self.codec.empty()
        self.started_from = self._saved_seq = self.codec.seq(found)
        self._saved_at = self._clock()
        return found

    def due(self, state: S) -> bool:
        seq = self.codec.seq(state)
        if not self.writes or self._saving or seq <= self._saved_seq:
            return False
        if not self.codec.settled(state):  # decisions not back from the log yet
            return False
        return (
            self._saved_seq == 0  # none yet: what a full replay built is worth keeping
            or seq - self._saved_seq >= self.every_events
            or self._clock() - self._saved_at >= self.every_s
        )

    def keep(self, state: S, tg: TaskGroup, actor: str) -> None:
        """Save ``state`` in a task of ``tg`` if one is due (see the class)."""
        if not self.due(state):
            return
        data = self.codec.encode(state, self._log)
        self._saving = True
        tg.start_soon(self._save, data, self.codec.seq(state), actor)

    async def _save(self, data: bytes, seq: int, actor: str) -> None:
        try:
            await self.store.save(data)
        except LogError as e:
            log.warning("snapshot.not_saved", actor=actor, seq=seq, error=str(e))
        else:
            self._saved_seq = seq
            log.info("snapshot.saved", actor=actor, seq=seq, bytes=len(data))
        finally:
            self._saved_at = self._clock()
            self._saving = False


class Snapshots(StateSnapshots[ClusterState]):
    """``StateSnapshots`` of the cluster fold (the scheduler's, the quota's)."""

    def __init__(
        self,
        store: SnapshotStore,
        *,
        writes: bool,
        every_events: int = 50_000,
        every_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            store, CLUSTER, writes=writes, every_events=every_events, every_s=every_s, clock=clock
        )


@dataclass(frozen=True)
class SnapshotHealth:
    """What an actor makes of the latest snapshot of a store. ``verdict``: ``ok`` (it
    starts from it), ``none`` (none saved), ``corrupt`` (its bytes are not what was
    saved, or no snapshot), ``unusable`` (of another log or fold version, or ahead of
    the log), ``unreadable`` (the store failed); ``reason`` says why for the last three.
    """

    verdict: str
    reason: str | None = None
    seq: int = 0  # the sequence it covers, when ok
    size: int = 0  # its bytes, when read
    log_ends: int = 0  # the log's last sequence, when compared with it
    saved_at: datetime | None = None  # when it was saved (``check`` alone says)


def summary(kind: str, h: SnapshotHealth, now: datetime) -> dict[str, Any]:
    """``h`` as an operator reads it (``fgpu admin snapshots --json``, ``fgpu status``):
    ``kind``, ``health`` (the verdict), ``reason``, ``seq`` and ``behind`` (how far the
    log is past it: ok alone), ``bytes``, ``saved_at`` and ``age_s`` (None: unknown)."""
    ok = h.verdict == "ok"
    return {
        "kind": kind,
        "health": h.verdict,
        "reason": h.reason,
        "seq": h.seq if ok else None,
        "behind": h.log_ends - h.seq if ok else None,
        "bytes": h.size or None,
        "saved_at": None if h.saved_at is None else h.saved_at.isoformat(),
        "age_s": None if h.saved_at is None else round((now - h.saved_at).total_seconds(), 1),
    }


async def survey(stores: Mapping[str, SnapshotStore], events: EventLog) -> list[dict[str, Any]]:
    """``summary`` of each kind's latest snapshot in ``stores``, as of now. Raises
    LogError if the log cannot say its identity or its end."""
    found = [
        (kind, await check(store, events, CODECS.get(kind, CLUSTER)))
        for kind, store in stores.items()
    ]
    now = datetime.now(UTC)
    return [summary(kind, h, now) for kind, h in found]


async def check(
    store: SnapshotStore, events: EventLog, codec: SnapshotCodec[Any] = CLUSTER
) -> SnapshotHealth:
    """What an actor starting now would make of ``store``'s latest snapshot (of states
    ``codec`` encodes), and when it was saved. Raises LogError if the log cannot say its
    identity or its end."""
    try:
        saved_at = await store.saved_at()
    except LogError as e:
        return SnapshotHealth("unreadable", str(e))
    _, health = await _examine(store, events, await events.identity(), codec)
    return replace(health, saved_at=saved_at)


async def _examine(
    store: SnapshotStore, events: EventLog, log_identity: str, codec: SnapshotCodec[S]
) -> tuple[S | None, SnapshotHealth]:
    """The state of ``store``'s latest snapshot if an actor of the log ``log_identity``
    may start from it (else None), and why. Raises LogError if the log cannot say its
    end."""
    try:
        data = await store.load()
    except SnapshotCorrupt as e:
        return None, SnapshotHealth("corrupt", str(e))
    except LogError as e:
        return None, SnapshotHealth("unreadable", str(e))
    if data is None:
        return None, SnapshotHealth("none")
    try:
        state = codec.decode(data, log_identity)
    except SnapshotUndecodable as e:
        return None, SnapshotHealth("corrupt", str(e), size=len(data))
    except SnapshotUnusable as e:
        return None, SnapshotHealth("unusable", str(e), size=len(data))
    last = await events.last_seq()
    seq = codec.seq(state)
    if seq > last:
        reason = f"at {seq}, the log ends at {last}"
        return None, SnapshotHealth("unusable", reason, seq, len(data), last)
    return state, SnapshotHealth("ok", None, seq, len(data), last)


def _say(health: SnapshotHealth, actor: str) -> None:
    """The log line an actor's start writes for ``health``."""
    match health.verdict:
        case "ok":
            log.info("snapshot.started", actor=actor, seq=health.seq, log_ends=health.log_ends)
        case "none":
            log.info("snapshot.none", actor=actor)
        case "corrupt":
            log.warning("snapshot.corrupt", actor=actor, reason=health.reason)
        case "unreadable":
            log.warning("snapshot.unreadable", actor=actor, error=health.reason)
        case _:
            log.warning("snapshot.ignored", actor=actor, reason=health.reason)
