"""The projector: keeps a ProjectionStore in step with the log, and rebuilds it.

``Projector.run`` first catches up in large batches (the log's bulk reader when it has
one and it can serve; in order through ``EventLog.read`` when not), then follows the log
(``EventLog.tail``, a consumer of its own made for the read): each batch is applied with
its last sequence in one DuckDB transaction (in a worker thread). Every start, and every retry
after a failure, reads on from the store's ``last_seq``: what the tables hold, not what a
server remembers, decides where reading resumes, so nothing is applied twice, nothing is
skipped, and any number of projectors may follow one log.
"""

import functools
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import duckdb
import structlog
from anyio.abc import TaskStatus

from events import RawBatch, Record
from projections.store import Batch, ProjectionError, ProjectionStore, connect_reader
from services.domain.tenancy.model import Tenancy
from services.ports import BulkLog, BulkReadUnavailable, EventLog, LogError

__all__ = [
    "REBUILD_BATCH",
    "REBUILD_BATCHES_PER_TRANSACTION",
    "REBUILD_THREADS",
    "Projector",
    "RebuildResult",
    "rebuild",
]

_CATCH_UP_BATCH = 10_000
# A rebuild writes larger transactions: fewer commits, each session written about once,
# and whole row groups. DuckDB writes a row group (122,880 rows by default) that one
# transaction fills straight to the file, where smaller appends go to its write-ahead log
# first and are written again at the next checkpoint: three batches of 40,960 events per
# transaction fill one exactly (a transaction with part of a row group over leaves it as a
# row group of its own, and the file grows). Batches stay smaller than that, so that
# reading, folding and writing overlap (bench/rebuild.py, cpu_us_per_event).
REBUILD_BATCH = 40_960
REBUILD_BATCHES_PER_TRANSACTION = 3
# DuckDB's threads in a rebuild. The reader's process, the folding thread and nats-server
# keep two cores busy already: a second DuckDB thread only takes turns with them. One
# writes a batch with a tenth less CPU; against the same run's raw replay the rebuild was
# faster in 6 pairs of 9 on a shared 2-core host, a small gain in that noise
# (docs/benchmarks.md, rebuild).
REBUILD_THREADS = 1
log = structlog.get_logger()


class Projector:
    """Applies the log to ``store``, batch by batch, forever (``run``)."""

    def __init__(
        self,
        events: EventLog,
        store: ProjectionStore,
        *,
        batch: int = _CATCH_UP_BATCH,
        batches_per_transaction: int = 1,
    ) -> None:
        """``batch``: records read and folded at once in a catch-up; a catch-up writes
        ``batches_per_transaction`` of them in each transaction (following the log, one).
        """
        if batch < 1 or batches_per_transaction < 1:
            raise ValueError("batch and batches_per_transaction must be at least 1")
        self.events = events
        self.store = store
        self.batch = batch
        self.batches_per_transaction = batches_per_transaction
        self._advanced = anyio.Event()
        self._limiter = anyio.CapacityLimiter(1)  # one writer: batches apply in order

    @property
    def last_seq(self) -> int:
        """The last sequence visible to readers."""
        return self.store.last_seq

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of the reader's own (see ``ProjectionStore.cursor``)."""
        return self.store.cursor()

    def tenancy(self) -> Tenancy:
        """The tenancy as folded so far (keypairs with their secrets' hashes): who may
        read. Read it, never change it."""
        return self.store.state.tenancy

    async def wait_beyond(self, seq: int) -> int:
        """Return ``last_seq`` once it is beyond ``seq`` (wait as long as it takes)."""
        while self.store.last_seq <= seq:
            await self._advanced.wait()
        return self.store.last_seq

    def _notify(self) -> None:
        self._advanced.set()
        self._advanced = anyio.Event()

    async def _apply(self, records: Sequence[Record]) -> None:
        await anyio.to_thread.run_sync(self.store.apply, records, limiter=self._limiter)
        self._notify()

    async def catch_up(self, until: int | None = None) -> int:
        """Apply every record up to ``until`` (default: the log's end now); how many.

        Through the log's bulk reader (``BulkLog``) when it has one; where that cannot
        serve (BulkReadUnavailable, before its first batch or after some), the batches
        committed stay and the rest is read in order, with one warning saying why.
        """
        start = self.store.last_seq
        end = await self.events.last_seq() if until is None else until
        if end <= start:
            return 0
        if isinstance(self.events, BulkLog):
            try:
                await self._pipelined(self.events, start, end)
            except BulkReadUnavailable as e:
                log.warning("projector.bulk_read_unavailable", reason=str(e), after=self.last_seq)
                await self._in_order(self.store.last_seq, end)
        else:
            await self._in_order(start, end)
        return self.store.last_seq - start

    async def _in_order(self, start: int, end: int) -> None:
        """Records ``start + 1`` to ``end`` through ``EventLog.read``, applied in batches
        of at most ``batch`` records, one transaction each."""
        async with aclosing(self.events.read(start, until=end)) as batches:
            async for records in batches:
                for i in range(0, len(records), self.batch):
                    await self._apply(records[i : i + self.batch])

    async def _pipelined(self, source: BulkLog, start: int, end: int) -> None:
        """Three stages at once: the reader fetches batch n+2, a worker thread folds n+1,
        another has DuckDB write n (it lets go of the GIL while it works) into the open
        transaction, committed with every ``batches_per_transaction``-th batch.

        If a stage fails (a write, or the read: BulkReadUnavailable included), the fold
        (ahead of the tables) is restored from them once no stage runs, and the error
        raised.
        """
        group = self.batches_per_transaction
        raws, raw_out = anyio.create_memory_object_stream[RawBatch](1)
        # Room for a transaction's worth of batches: folding goes on while DuckDB is busy.
        batches, batch_out = anyio.create_memory_object_stream[Batch](group)
        folding = anyio.CapacityLimiter(1)

        async def read() -> None:
            async with raws, aclosing(source.read_raw(start, until=end, batch=self.batch)) as it:
                async for raw in it:
                    await raws.send(raw)

        def prepare(raw: RawBatch) -> Batch | None:
            return self.store.prepare(self.store.decode(raw.seqs, raw.subjects, raw.payloads), raw)

        async def fold() -> None:
            async with batches:
                async for raw in raw_out:
                    batch = await anyio.to_thread.run_sync(prepare, raw, limiter=folding)
                    if batch is not None:
                        await batches.send(batch)

        try:
            # The streams' receiving ends close once every stage is done: closed by a failed
            # stage, they would break the stage before it with an error of their own.
            with raw_out, batch_out, _short_switch_interval():
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read)
                    tg.start_soon(fold)
                    added = 0  # batches in the open transaction
                    async for batch in batch_out:
                        added += 1
                        await self._add(batch, commit=added == group)
                        added %= group
                    if added:
                        await self._commit()
        except BaseException as e:
            if self.store.state.last_seq != self.store.committed:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.store.recover, limiter=self._limiter)
            if isinstance(e, ExceptionGroup):
                retried, other = e.split((LogError, ProjectionError))
                if retried is not None and other is None:  # what ``run`` retries on
                    raise _first(retried) from e
            raise

    async def _add(self, batch: Batch, *, commit: bool) -> None:
        add = functools.partial(self.store.add, batch, commit=commit)
        await anyio.to_thread.run_sync(add, limiter=self._limiter)
        if commit:
            self._notify()

    async def _commit(self) -> None:
        await anyio.to_thread.run_sync(self.store.commit, limiter=self._limiter)
        self._notify()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Catch up, signal readiness, then follow the log forever.

        A log or store failure is logged and retried from the store's ``last_seq``.
        """
        await self.catch_up()
        task_status.started()
        backoff = 0.05
        while True:
            try:
                await self._follow()
            except (LogError, ProjectionError) as e:
                log.warning("projector.retry", error=str(e), last_seq=self.store.last_seq)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                try:
                    await self.catch_up()
                except (LogError, ProjectionError) as again:
                    log.warning("projector.retry", error=str(again))

    async def _follow(self) -> None:
        # A cursor of this projector's own, held by no server: what the tables hold
        # decides where reading resumes, and two projectors of one log never share one.
        async with aclosing(self.events.tail(self.store.last_seq)) as batches:
            async for records in batches:
                await self._apply(records)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf exception of ``group``."""
    e = group.exceptions[0]
    return _first(e) if isinstance(e, BaseExceptionGroup) else e


@contextmanager
def _short_switch_interval(seconds: float = 0.001) -> Iterator[None]:
    """Hand the GIL over more often while a bulk read and a folding thread share it.

    The reader needs the GIL for a moment whenever data arrives; at the default 5 ms it
    waits behind the folding thread and the server sits idle.
    """
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, seconds))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@dataclass(frozen=True)
class RebuildResult:
    path: str
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def rebuild(
    events: EventLog,
    path: str | Path,
    *,
    batch: int = REBUILD_BATCH,
    batches_per_transaction: int = REBUILD_BATCHES_PER_TRANSACTION,
    snapshot_every: int | None = None,
) -> RebuildResult:
    """Rebuild every table of the store at ``path`` from the start of the log.

    Builds a new file beside it and moves it into place, so readers of the old one never
    see a half-built store. Raises StoreLocked if another process has ``path`` open (stop
    it first), LogError if the log cannot be read.
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".rebuild")
    await anyio.to_thread.run_sync(_prepare, target, tmp)
    kwargs = {} if snapshot_every is None else {"snapshot_every": snapshot_every}
    identity = await events.identity()
    store = await anyio.to_thread.run_sync(
        lambda: ProjectionStore(tmp, threads=REBUILD_THREADS, **kwargs)
    )
    # DuckDB's own checkpoints, every 16 MB of write-ahead log, are kept: letting the log
    # grow and compressing everything once at the end writes each byte twice, the second
    # time after the fold has finished.
    try:
        await anyio.to_thread.run_sync(store.set_log_identity, identity)
        t0 = time.perf_counter()
        projector = Projector(
            events, store, batch=batch, batches_per_transaction=batches_per_transaction
        )
        applied = await projector.catch_up()
        await anyio.to_thread.run_sync(store.con.execute, "CHECKPOINT")
        seconds = time.perf_counter() - t0
    finally:
        await anyio.to_thread.run_sync(store.close)
    await anyio.to_thread.run_sync(_move, tmp, target)
    return RebuildResult(str(target), applied, seconds)


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _prepare(target: Path, tmp: Path) -> None:
    if target.exists():
        # Refuse while a projector writes it: it would go on writing a file nobody reads.
        connect_reader(str(target)).close()
    for stale in (tmp, _wal(tmp)):
        stale.unlink(missing_ok=True)


def _move(tmp: Path, target: Path) -> None:
    # The old file's write-ahead log must not be replayed onto the new file.
    _wal(target).unlink(missing_ok=True)
    os.replace(tmp, target)
