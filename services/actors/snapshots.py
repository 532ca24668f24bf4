"""An actor's snapshots: it starts from the latest one and the log's tail, and keeps one.

A snapshot that is missing, unreadable, of another fold version or another log, or ahead
of the log, is ignored with a warning: the actor replays the whole log, as without one.
Saving never holds a decision up: the state is encoded between two batches (it holds live
sessions, not history: a few milliseconds) and stored by a task of its own, one at a time;
a save that fails is logged and tried again at the next one due. A state is saved only
once every decision the actor applied ahead of the log has come back from it: a snapshot
holds the fold of the log up to its sequence, nothing more.
"""

import time
from collections.abc import Callable

import structlog
from anyio.abc import TaskGroup

from services.domain.state import ClusterState
from services.domain.state_codec import SnapshotUnusable, decode_actor_state, encode_actor_state
from services.ports import EventLog, LogError, SnapshotStore

__all__ = ["Snapshots"]

log = structlog.get_logger()


class Snapshots:
    """Where an actor's snapshots are, whether it writes them, and how often: once
    ``every_events`` events were folded since the last, or ``every_s`` seconds went by
    with some folded."""

    def __init__(
        self,
        store: SnapshotStore,
        *,
        writes: bool,
        every_events: int = 50_000,
        every_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_events < 1 or every_s <= 0:
            raise ValueError("snapshots are kept every 1 event or more, every >0 seconds")
        self.store = store
        self.writes = writes
        self.every_events = every_events
        self.every_s = every_s
        self._clock = clock
        self._log = ""  # the log's identity, read at each start
        self._saved_seq = 0  # the sequence the latest snapshot known here covers
        self._saved_at = clock()
        self._saving = False
        self.started_from = 0  # the sequence the latest start began from (0: full replay)

    async def start(self, events: EventLog, actor: str) -> ClusterState:
        """The latest usable snapshot's state, or an empty one (replay from the start)."""
        self._log = await events.identity()
        self.started_from = self._saved_seq = 0
        try:
            data = await self.store.load()
        except LogError as e:
            log.warning("snapshot.unreadable", actor=actor, error=str(e))
            return ClusterState()
        if data is None:
            log.info("snapshot.none", actor=actor)
            return ClusterState()
        try:
            state = decode_actor_state(data, self._log)
        except SnapshotUnusable as e:
            log.warning("snapshot.ignored", actor=actor, reason=str(e))
            return ClusterState()
        last = await events.last_seq()
        if state.last_seq > last:
            log.warning(
                "snapshot.ignored",
                actor=actor,
                reason=f"at {state.last_seq}, the log ends at {last}",
            )
            return ClusterState()
        self.started_from = self._saved_seq = state.last_seq
        self._saved_at = self._clock()
        log.info("snapshot.started", actor=actor, seq=state.last_seq, log_ends=last)
        return state

    def due(self, state: ClusterState) -> bool:
        if not self.writes or self._saving or state.last_seq <= self._saved_seq:
            return False
        if state.unconfirmed:  # decisions not back from the log yet: the next batch
            return False
        return (
            self._saved_seq == 0  # none yet: what a full replay built is worth keeping
            or state.last_seq - self._saved_seq >= self.every_events
            or self._clock() - self._saved_at >= self.every_s
        )

    def keep(self, state: ClusterState, tg: TaskGroup, actor: str) -> None:
        """Save ``state`` in a task of ``tg`` if one is due (see the class)."""
        if not self.due(state):
            return
        data = encode_actor_state(state, self._log)
        self._saving = True
        tg.start_soon(self._save, data, state.last_seq, actor)

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
