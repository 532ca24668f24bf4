"""What every actor shares: stamping new events, the clock, and the run loop."""

import atexit
import gc
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing

import anyio
import structlog
from anyio.abc import TaskStatus

from events import AnyEvent, Record
from services.actors.snapshots import Snapshots
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import clear_changes, fold, forget_ended
from services.domain.provenance import Provenance, new_id, stamp
from services.ports import Clock, EventLog, HistoryMissing, LogError

__all__ = [
    "LogActor",
    "Provenance",
    "append_expecting",
    "follow_log",
    "new_id",
    "rebuild",
    "stamp",
]

log = structlog.get_logger()


async def append_expecting(
    events: EventLog, s: ClusterState, subject: str, items: Sequence[tuple[str, AnyEvent]]
) -> None:
    """Append ``items`` all or none, expecting ``subject``'s last sequence as ``s`` knows it,
    and note the new one (ConcurrencyConflict: another writer was first; re-read)."""
    s.subject_seq[subject] = await events.append_batch(
        items, expect_subject=subject, expected_last_subject_seq=s.subject_seq.get(subject, 0)
    )


async def rebuild(
    events: EventLog, snapshots: Snapshots | None = None, actor: str = ""
) -> ClusterState:
    """The state folded from the whole log as it is now, ended sessions let go of as it
    goes (``forget_ended``): its memory follows live sessions, not history. With
    ``snapshots``, from the latest usable one and the log after it."""
    state = ClusterState() if snapshots is None else await snapshots.start(events, actor)
    async for batch in events.read(state.last_seq):
        fold(batch, state)
        forget_ended(state, _sessions_of(batch))
    if state.folded < state.last_seq:
        missing = state.last_seq - state.folded
        raise HistoryMissing(
            f"{missing} records of the log up to {state.last_seq} were archived out of the "
            "stream and no snapshot covers them: start from a snapshot, or with the archive"
        )
    return state


def _sessions_of(batch: Sequence[Record]) -> set[str]:
    found: set[str] = set()
    for r in batch:
        sid = getattr(r.event, "session_id", None)
        if isinstance(sid, str):
            found.add(sid)
    return found


React = Callable[[ClusterState], Awaitable[None]]


def _thaw() -> None:
    gc.unfreeze()
    gc.collect()


def _freeze() -> None:
    """Move everything alive now out of the collector's sight (see follow_log)."""
    if not gc.get_freeze_count():
        # Frozen objects are never freed, not even at exit, which extension modules (DuckDB)
        # report as leaks: give them back to the collector when the process ends.
        atexit.register(_thaw)
    gc.freeze()


async def _react(react: React, state: ClusterState) -> None:
    """One reaction; what changed is cleared only once it has been looked at, and the
    sessions that ended are let go of then."""
    await react(state)
    forget_ended(state, state.changed)
    clear_changes(state)


class LogActor:
    """An actor that folds the log and decides on each batch (``react``), from its
    snapshots when it has them: ``run`` is ``follow_log`` with its cursor ``durable``
    (default: the kind's ``NAME``)."""

    NAME = "actor"

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        *,
        durable: str | None = None,
        snapshots: Snapshots | None = None,
    ) -> None:
        self.events = events
        self.clock = clock
        self.durable = durable or self.NAME
        self.snapshots = snapshots

    async def react(self, s: ClusterState) -> None:
        raise NotImplementedError

    async def run(
        self, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Decide for ever; started once the state is rebuilt from the log."""
        await follow_log(
            self.events, self.durable, self.react, task_status=task_status, snapshots=self.snapshots
        )


async def follow_log(
    events: EventLog,
    durable: str,
    react: React,
    *,
    task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED,
    on_rebuild: Callable[[ClusterState], Awaitable[None]] | None = None,
    snapshots: Snapshots | None = None,
    tail: bool = False,
) -> None:
    """Fold the log into a state and call ``react`` after every batch, forever.

    The state is first rebuilt by replaying the log, then kept current through the durable
    consumer ``durable``; records already folded are skipped, so redelivery is harmless.
    When ``react`` fails to append (a concurrency conflict, the server gone), the state may
    hold a decision the log does not, so it is thrown away and rebuilt from the log.
    With ``snapshots`` it starts (and rebuilds) from the latest snapshot and the log
    after it, and keeps one now and then if it writes them. With ``tail``, it follows
    through a consumer of its own read names instead of the durable (``durable`` then
    only names it): for the many of a kind that keep no cursor and decide nothing
    another would (routers).
    """
    state = await rebuild(events, snapshots, durable)
    if on_rebuild is not None:
        await on_rebuild(state)
    # The state just built lives as long as the actor: keep the collector from walking it
    # again and again (full collections of a large state stall the actor for 100s of ms).
    _freeze()
    task_status.started(state)
    backoff = 0.05
    async with anyio.create_task_group() as saves:
        while True:
            try:
                # A snapshot is kept right after a fold, before the actor decides anything
                # on it (see Snapshots).
                if snapshots is not None:
                    snapshots.keep(state, saves, durable)
                await _react(react, state)
                new = (
                    events.tail(state.last_seq) if tail else events.follow(durable, state.last_seq)
                )
                async with aclosing(new) as batches:
                    async for batch in batches:
                        fold(batch, state)
                        if snapshots is not None:
                            snapshots.keep(state, saves, durable)
                        await _react(react, state)
                        backoff = 0.05
            except* LogError as group:
                # except*: an actor may append from a task group, which wraps what it raises.
                log.warning("actor.rebuild", actor=durable, error=str(group.exceptions[0]))
            state = await _rebuilt(events, snapshots, durable, backoff, on_rebuild)
            backoff = min(backoff * 2, 5.0)


async def _rebuilt(
    events: EventLog,
    snapshots: Snapshots | None,
    durable: str,
    backoff: float,
    on_rebuild: Callable[[ClusterState], Awaitable[None]] | None,
) -> ClusterState:
    """The state rebuilt after a failure, tried until it works: the server may still be
    away."""
    while True:
        await anyio.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
        state: ClusterState | None = None
        try:
            state = await rebuild(events, snapshots, durable)
            if on_rebuild is not None:
                await on_rebuild(state)
        except* LogError as group:
            state = None
            log.warning("actor.rebuild_failed", actor=durable, error=str(group.exceptions[0]))
        if state is not None:
            gc.collect()  # the state thrown away must not be frozen with the new one
            _freeze()
            return state
