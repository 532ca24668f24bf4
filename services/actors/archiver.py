"""The archiver: the log's past leaves the stream only once archived, read back, and said.

A log made with retention (``Retention``: at most so many records, none older than so
long) keeps in its stream what its limits allow; each pass of the archiver takes what is
beyond them, in order, and for each segment of at most ``segment_records``:

(at least a tenth of what the stream keeps at a time, or what is overdue by a tenth of
the age limit, so that the past is not archived record by record as new ones come)

1. writes it to the archive, which puts it in place only once read back equal;
2. appends ``log.archived`` on ``fgpu.archive`` (a deterministic id: a pass run again
   after a crash writes it once);
3. once every segment is said, removes those records from the stream, but those on the
   subjects kept for good (``KEPT_SUBJECTS``: the tenancy, the archive's own).

It never removes what an actor still needs to start: only records that the scheduler's,
the quota's and the pipeline actor's latest snapshots all cover (no snapshot: nothing
leaves). Readers of the whole history read the archive and the stream as one
(``projections.archive``). A pass that fails leaves the stream as it was, or with less
removed than said: the next pass goes on from what the archive holds and what the log
says.
"""

import hashlib
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from events import LogArchived, Malformed, Record
from events import subjects as subj
from services.actors.common import Provenance, stamp
from services.actors.snapshots import covered_by
from services.domain.fold.state_codec import SnapshotUnusable
from services.ports import (
    ArchivedSegment,
    ArchiveStore,
    Clock,
    EventLog,
    LogError,
    RetainingLog,
    Retention,
    SnapshotStore,
)

__all__ = ["ArchivePass", "Archiver"]

NAME = "archiver"
log = structlog.get_logger()


@dataclass(frozen=True)
class ArchivePass:
    """What one pass did: segments written, and the stream's records removed through
    ``removed_through`` (0: none yet)."""

    written: tuple[ArchivedSegment, ...]
    archived_through: int
    removed_through: int
    waiting: str | None = None  # why less than the limits ask was archived, if so


class Archiver:
    def __init__(
        self,
        events: EventLog,
        retaining: RetainingLog,
        archive: ArchiveStore,
        snapshots: Sequence[SnapshotStore],
        clock: Clock,
        *,
        segment_records: int = 100_000,
    ) -> None:
        if segment_records < 1:
            raise ValueError("a segment holds at least one record")
        self.events = events
        self.retaining = retaining
        self.archive = archive
        self.snapshots = tuple(snapshots)
        self.clock = clock
        self.segment_records = segment_records
        self._removed = 0  # what this archiver removed last: a purge is not asked again

    async def run(
        self,
        every_s: float = 60.0,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """A pass every ``every_s`` seconds, for ever; a failed pass is logged and the next
        one goes on."""
        task_status.started()
        while True:
            try:
                done = await self.pass_once()
                if done is not None and (done.written or done.waiting):
                    log.info(
                        "archive.pass",
                        segments=len(done.written),
                        archived_through=done.archived_through,
                        removed_through=done.removed_through,
                        waiting=done.waiting,
                    )
            except LogError as e:
                log.warning("archive.pass_failed", error=str(e))
            await anyio.sleep(every_s)

    async def pass_once(self) -> ArchivePass | None:
        """One pass (see the module); None when the log keeps everything."""
        retention = await self.retaining.retention()
        if retention is None:
            return None
        identity = await self.events.identity()
        said = await self._said()
        through = await self.archive.last_seq()
        if through > said:  # a segment written by a pass that did not get to say it
            for seg in await self.archive.segments():
                if seg.last_seq > said:
                    await self._say(seg, identity)
            said = through
        last = await self.events.last_seq()
        covered, waiting = await self._covered(identity)
        bound = min(last, covered)
        horizon = (
            None
            if retention.max_age_s is None
            else self.clock.now() - timedelta(seconds=retention.max_age_s)
        )
        by_count = 0 if retention.max_events is None else last - retention.max_events
        written: list[ArchivedSegment] = []
        chunk: list[Record] = []
        limits_met = False  # the scan stopped at a record the limits keep
        if through < bound:
            async with aclosing(self.events.read(through, until=bound)) as batches:
                async for batch in batches:
                    for r in batch:
                        if r.seq > by_count and not _older(r, horizon):
                            limits_met = True
                            break
                        chunk.append(r)
                        if len(chunk) == self.segment_records:
                            written.append(await self._archive(chunk, identity))
                            chunk = []
                    if limits_met:
                        break
        if chunk and (
            written
            or len(chunk) >= _least(retention, self.segment_records)
            or _overdue(chunk[0], horizon, retention)
        ):
            written.append(await self._archive(chunk, identity))
        through = written[-1].last_seq if written else through
        if through > self._removed:  # once after a start too: a pass may have been cut off
            await self.retaining.remove_through(through, subj.KEPT_SUBJECTS)
            self._removed = through
        if limits_met or bound == last:
            waiting = None
        elif waiting is None:  # the scan stopped where the snapshots stop
            waiting = f"the actors' snapshots cover the log up to {covered} only"
        return ArchivePass(tuple(written), through, through, waiting)

    async def _archive(self, records: list[Record], identity: str) -> ArchivedSegment:
        seg = await self.archive.write(records)
        await self._say(seg, identity)
        return seg

    async def _say(self, seg: ArchivedSegment, identity: str) -> None:
        e = stamp(
            LogArchived,
            Provenance(NAME, self.clock.now()),
            first_seq=seg.first_seq,
            last_seq=seg.last_seq,
            records=seg.last_seq - seg.first_seq + 1,
            segment=seg.name,
            sha256=seg.sha256,
        )
        # One id per segment of this log: said again after a crash, it is stored once.
        log_hash = hashlib.sha256(identity.encode()).hexdigest()[:12]
        e = msgspec.structs.replace(e, id=f"archived-{log_hash}-{seg.first_seq}-{seg.last_seq}")
        await self.events.append(subj.ARCHIVE, e)

    async def _said(self) -> int:
        """The last record a ``log.archived`` on the log says is archived (0: none)."""
        n = await self.events.count(subj.ARCHIVE)
        if n == 0:
            return 0
        seen = said = 0
        async with aclosing(self.events.tail(0, subject=subj.ARCHIVE)) as batches:
            async for batch in batches:
                for r in batch:
                    if isinstance(r.event, LogArchived):
                        said = max(said, r.event.last_seq)
                seen += len(batch)
                if seen >= n:
                    break
        return said

    async def _covered(self, identity: str) -> tuple[int, str | None]:
        """The sequence every actor's latest snapshot covers, and why it is 0 if so."""
        seqs = []
        for store in self.snapshots:
            data = await store.load()
            if data is None:
                return 0, "an actor has no snapshot yet"
            try:
                seqs.append(covered_by(data, identity))
            except SnapshotUnusable as e:
                return 0, f"an actor's snapshot is unusable: {e}"
        return (min(seqs) if seqs else 0), None


def _least(retention: Retention, segment_records: int) -> int:
    """The fewest records a pass archives: a tenth of what the stream keeps (at most a
    segment), so that the log is not said to the archive (and the markers, kept for good,
    do not pile up) record by record as each new one pushes an old one out."""
    if retention.max_events is None:
        return segment_records
    return max(1, min(segment_records, retention.max_events // 10))


def _overdue(r: Record, horizon: datetime | None, retention: Retention) -> bool:
    """Whether ``r`` is older than the age limit by a tenth of it: then it goes now, however
    few records go with it."""
    if horizon is None or retention.max_age_s is None or isinstance(r.event, Malformed):
        return False
    return r.event.at < horizon - timedelta(seconds=retention.max_age_s / 10)


def _older(r: Record, horizon: datetime | None) -> bool:
    """Whether ``r`` is older than ``horizon`` (None: no age limit). A malformed record
    has no time: it goes with those around it."""
    if horizon is None:
        return False
    return isinstance(r.event, Malformed) or r.event.at < horizon
