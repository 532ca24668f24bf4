"""The pipeline fold's state as bytes: the pipeline actor's snapshots.

A snapshot holds the whole ``PipelineState`` (runs, ended ones too: a rerun or a late
cancel is answered from them; schedules; the keys a schedule's owner acts with), and of
the subjects' last sequences only the runs' own (``fgpu.pipe.<run>``), the ones the actor
appends to expecting them. What the actor only looks at (``changed``, each run's
``dirty``) is not kept: a restored state has every run looked at once, as after a full
replay. The envelope names its kind, the fold's version and the log it was folded from;
one of another kind, version or log is refused as unusable (``SnapshotUnusable``), bytes
that are no snapshot as undecodable, as the cluster's (``fold.state_codec``).
"""

from typing import Literal

import msgspec

from events import subjects as subj
from services.domain.fold.state_codec import SnapshotUndecodable, SnapshotUnusable
from services.domain.pipelines.runs import PipelineState

__all__ = [
    "PIPELINE_FOLD_VERSION",
    "decode_pipeline_state",
    "encode_pipeline_state",
    "pipeline_snapshot_seq",
]

# The pipeline fold's schema: a change to what it keeps or how it folds bumps it, and a
# snapshot of another version is ignored (full replay).
PIPELINE_FOLD_VERSION = 2  # 2: serve tasks' deadlines (Run.awaiting)
_RUN_PREFIX = subj.pipeline_run("")


class _Snapshot(msgspec.Struct, array_like=True, frozen=True):
    kind: Literal["pipeline"]
    version: int
    log: str  # the identity of the log it was folded from
    last_seq: int
    state: bytes


_decoder = msgspec.msgpack.Decoder(_Snapshot)
_state_decoder = msgspec.msgpack.Decoder(PipelineState)
_encoder = msgspec.msgpack.Encoder()


def encode_pipeline_state(s: PipelineState, log: str) -> bytes:
    """``s`` as the pipeline actor needs it to go on from ``s.last_seq`` of the log
    ``log``. ``s`` must hold no decision the log has not given back (``s.settled``)."""
    if not s.settled:
        raise ValueError("a state holding decisions the log has not given back yet")
    kept = PipelineState(
        runs=s.runs,
        by_session=s.by_session,
        orphans=s.orphans,
        folders=s.folders,
        schedules=s.schedules,
        keys=s.keys,
        last_seq=s.last_seq,
        subject_seq={k: v for k, v in s.subject_seq.items() if k.startswith(_RUN_PREFIX)},
    )
    body = _encoder.encode(kept)
    return _encoder.encode(_Snapshot("pipeline", PIPELINE_FOLD_VERSION, log, s.last_seq, body))


def _usable(data: bytes, log: str) -> _Snapshot:
    try:
        snap = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotUndecodable(f"not a pipeline snapshot: {e}") from None
    if snap.version != PIPELINE_FOLD_VERSION:
        raise SnapshotUnusable(
            f"of pipeline fold version {snap.version}, this one is {PIPELINE_FOLD_VERSION}"
        )
    if snap.log != log:
        raise SnapshotUnusable(f"of another log ({snap.log}, this one is {log})")
    return snap


def decode_pipeline_state(data: bytes, log: str) -> PipelineState:
    """The state ``encode_pipeline_state`` saved, if folded from the log ``log`` by this
    version of the fold; else SnapshotUnusable (SnapshotUndecodable: no snapshot)."""
    snap = _usable(data, log)
    try:
        s = _state_decoder.decode(snap.state)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotUndecodable(f"not a pipeline snapshot: {e}") from None
    for run in s.runs.values():
        run.dirty.clear()
        run.dirty.update(run.tasks)  # every task looked at once: a no-op for those settled
    s.changed = set(s.runs)
    return s


def pipeline_snapshot_seq(data: bytes, log: str) -> int:
    """The sequence a pipeline snapshot covers (what the archiver asks), else
    SnapshotUnusable."""
    return _usable(data, log).last_seq
