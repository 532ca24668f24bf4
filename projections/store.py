"""The projection store: DuckDB tables kept by folding the log, batch by batch.

The store holds the fold's state (``services.domain.fold.state``) in memory, in step with the
tables: ``last_seq`` is the last sequence both have applied, ``max(events.seq)`` in the
tables. ``apply`` folds a batch, turns what changed into rows and writes them, the batch's
own rows of ``events`` included, in one DuckDB transaction, so a batch is in the tables
entirely or not at all and the last sequence commits with it. A catch-up writes several
batches to one transaction (``add``, ``commit``): they show together or not at all.
Records at or below ``last_seq`` were applied already and are skipped: a redelivered
batch changes nothing.

Opening a store restores the state from the newest snapshot at or below ``last_seq``
plus the events stored after it, so a restart neither re-reads the log from its start
nor applies anything twice.

Every method blocks (DuckDB, CPU): call them from worker threads, one at a time, except
that ``prepare`` may fold the next batch while ``add`` writes this one (the projector
does both). ``cursor()`` gives readers their own connection, safe in any thread.

Errors::

    ProjectionError             the store cannot be used as asked
    ├── StoreLocked             another process holds the file (retry later, or elsewhere)
    └── SchemaMismatch          the file was made by another version: rebuild it
"""

import bisect
import contextlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from events import (
    GpuUsageSampled,
    Malformed,
    PolicySet,
    RawBatch,
    Record,
    SessionRequested,
    decode,
    encode,
    records_of,
)
from projections import rows
from projections.schema import (
    DDL,
    ENDED_SQL,
    INSERTS,
    ROWS,
    SCHEMA_VERSION,
    SERVING_WHOLE,
    STORED,
    WHOLE,
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.id_set import IdSet
from services.domain.fold.state import clear_changes, evolve, forget_ended
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.records import SessionView

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "Batch",
    "ProjectionError",
    "ProjectionStore",
    "SchemaMismatch",
    "StoreLocked",
    "applied_seq",
    "connect_reader",
    "restore_state",
    "stored_records",
]

DEFAULT_SNAPSHOT_EVERY = 10_000


class ProjectionError(Exception):
    """The projection store cannot be used as asked."""


class StoreLocked(ProjectionError):
    """Another process has the database file open for writing."""


class SchemaMismatch(ProjectionError):
    """The database was written by another schema version; rebuild it."""


# Records whose rows are more than their audit row and what the fold marks as changed.
_APART = frozenset({Malformed, GpuUsageSampled, PolicySet})


def _connect(path: str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    try:
        con = duckdb.connect(path, read_only=read_only)
    except duckdb.IOException as e:
        if "lock" in str(e).lower():
            raise StoreLocked(f"{path} is open in another process: {e}") from e
        raise ProjectionError(f"cannot open {path}: {e}") from e
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # a server's terminal is not DuckDB's
    return con


def connect_reader(path: str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a store no process is writing. Raises StoreLocked."""
    return _connect(path, read_only=True)


class ProjectionStore:
    """The tables of one DuckDB file and the fold's state they were made from."""

    def __init__(
        self,
        path: str | Path,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        threads: int | None = None,
    ) -> None:
        """Open (or create) the store at ``path``; ``:memory:`` for a private one.

        ``threads``: DuckDB's worker threads (default: one per core). A projector that
        follows the log writes small transactions, for which one thread is faster: its
        fixed cost per statement is what the lag is made of (bench/projection_lag.py).

        Raises StoreLocked, SchemaMismatch, or ProjectionError.
        """
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.path = str(path)
        self.snapshot_every = snapshot_every
        self.con = _connect(self.path)
        if threads is not None:
            self.con.execute(f"SET threads = {int(threads)}")
        self.committed = 0
        self._open: tuple[int, int] | None = None  # first and last seq the open transaction holds
        self._closed = False
        self._cursor_lock = threading.Lock()
        self._reader_root = self.con.cursor()
        try:
            self._init_schema()
            self.state = self._restore()
        except BaseException:
            self.close()
            raise

    # ---- lifecycle ------------------------------------------------------------------------

    def _init_schema(self) -> None:
        for statement in DDL:
            self.con.execute(statement)
        found = dict(self.con.execute("SELECT key, value FROM meta").fetchall())
        if not found:
            self.con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        elif found.get("schema_version") != SCHEMA_VERSION:
            raise SchemaMismatch(
                f"{self.path} has schema version {found.get('schema_version')}, this is "
                f"{SCHEMA_VERSION}: rebuild it (fgpu projections rebuild)"
            )

    def close(self) -> None:
        """Close the file. Idempotent; readers' cursors must be closed first."""
        if self._closed:
            return
        self._closed = True
        self._reader_root.close()
        self.con.close()
        # Let go of the connections: DuckDB objects alive at interpreter exit are reported
        # as leaks, and a closed store may stay referenced (by a server's app) until then.
        del self._reader_root, self.con

    @property
    def last_seq(self) -> int:
        """The last sequence the tables hold (committed; what readers see)."""
        return self.committed

    def log_identity(self) -> str | None:
        """The identity of the log the tables are of (``EventLog.identity``), if known."""
        row = self.con.execute("SELECT identity FROM log_identity").fetchone()
        return None if row is None else str(row[0])

    def set_log_identity(self, identity: str) -> None:
        """Say which log the tables are of. Raises ProjectionError."""
        try:
            self.con.execute("BEGIN TRANSACTION")
            self.con.execute("DELETE FROM log_identity")
            self.con.execute("INSERT INTO log_identity VALUES (?)", [identity])
            self.con.execute("COMMIT")
        except duckdb.Error as e:
            self._roll_back()
            raise ProjectionError(f"could not record the log's identity: {e}") from e

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own for a reader; it sees committed batches only."""
        with self._cursor_lock:
            return self._reader_root.cursor()

    # ---- restoring the fold ---------------------------------------------------------------

    def _restore(self) -> ClusterState:
        checkpoint = applied_seq(self.con)
        state = restore_state(self.con, checkpoint, all_ended=True)
        _compact(state, list(state.sessions.values()))
        state.changed.clear()
        state.changed_agents.clear()
        state.answered.clear()  # their rows are written already
        state.admin_answered.clear()
        state.tenancy_changed = False
        state.serving.changed = False
        self.committed = checkpoint
        return state

    def recover(self) -> None:
        """Throw the in-memory fold away and restore it from the tables (after a failed
        write, when prepared batches may be ahead of what was committed); an open
        transaction (``add``) is rolled back first."""
        self._roll_back()
        self.state = self._restore()

    # ---- applying batches -----------------------------------------------------------------

    def decode(
        self, seqs: Sequence[int], subjects: Sequence[str], payloads: Sequence[bytes]
    ) -> list[Record]:
        """Records of stored messages not yet folded (``seqs`` ascending, as stored)."""
        start = bisect.bisect_right(seqs, self.state.last_seq)
        if start:
            seqs, subjects, payloads = seqs[start:], subjects[start:], payloads[start:]
        return records_of(seqs, subjects, payloads)

    def apply(self, records: Sequence[Record]) -> int:
        """Fold ``records`` and write what they changed, with the new ``last_seq``, at once.

        Records at or below ``last_seq`` are skipped. Returns the new ``last_seq``. If the
        transaction fails the state is restored from the tables and ProjectionError raised.
        """
        try:
            batch = self.prepare(records)
            if batch is not None:
                self.write(batch)
        except ProjectionError:
            self.recover()
            raise
        return self.committed

    def prepare(self, records: Sequence[Record], raw: RawBatch | None = None) -> "Batch | None":
        """Fold ``records`` (those not folded yet) and turn what they changed into rows.

        The first half of ``apply``, pure Python: a bulk reader may prepare the next batch
        while ``write`` has DuckDB store this one. Prepared batches must be written in
        order; if one fails, call ``recover`` before preparing again. None: nothing new.
        ``raw``: the bulk batch ``records`` were decoded from (``decode``), whose canonical
        payloads the events rows then take as they are instead of encoding each event.

        Raises ProjectionError if a value does not fit its column: the projector then
        retries (logged) instead of taking its process down.
        """
        try:
            return self._prepare(records, raw)
        except (pa.ArrowException, OverflowError) as e:
            raise ProjectionError(f"could not turn records into rows: {e!r}") from e

    def _prepare(self, records: Sequence[Record], raw: RawBatch | None) -> "Batch | None":
        s = self.state
        before = s.last_seq
        fresh = [r for r in records if r.seq > before]
        if not fresh:
            return None
        errors, snapshots = self._fold(fresh)
        views = [v for sid in s.changed if (v := s.sessions.get(sid)) is not None]
        tables = self._tables(fresh, raw, errors, views, before)
        tables["snapshots"] = rows.snapshot_table(snapshots)
        replaced: frozenset[str] = frozenset()
        if s.tenancy_changed:
            tables.update(rows.tenancy_tables(s.tenancy))
            replaced = WHOLE
        else:
            tables.update({name: ROWS[name].empty_table() for name in WHOLE})
        if s.serving.changed:
            tables["endpoints"] = rows.endpoint_table(s.serving)
            replaced |= SERVING_WHOLE
        else:
            tables["endpoints"] = ROWS["endpoints"].empty_table()
        _compact(s, views)  # their rows are built: ended sessions can go
        clear_changes(s)
        return Batch(first=fresh[0].seq, last=s.last_seq, tables=tables, replaced=replaced)

    def _fold(self, fresh: list[Record]) -> tuple[dict[int, str], list[tuple[int, bytes]]]:
        """Fold ``fresh`` into the state: why the fold refused each record it refused (by
        sequence), and the snapshots of the state due meanwhile."""
        s = self.state
        errors: dict[int, str] = {}
        snapshots: list[tuple[int, bytes]] = []
        every = self.snapshot_every
        # A snapshot at each multiple of ``every``: the state after the last record at or
        # below it, taken once a record beyond it shows that nothing else is coming.
        boundary = -(-s.last_seq // every) * every  # the first multiple at or above last_seq
        malformed = s.malformed
        for r in fresh:
            seq = r.seq
            if seq > boundary:
                if s.last_seq > 0:
                    snapshots.append((s.last_seq, encode_state(s)))
                boundary = -(-seq // every) * every
            e = r.event
            # The fold ignores a request for a session id taken already (by anyone, its own
            # owner included): such a record is of no session, whoever it says it is from.
            taken = (
                e.session_id
                if type(e) is SessionRequested
                and (e.session_id in s.sessions or e.session_id in s.ended)
                else None
            )
            evolve(s, r)
            # Read now: a later PayloadRejected takes the entry away again.
            if seq in malformed:
                errors[seq] = malformed[seq][1]
            elif taken is not None:
                errors[seq] = f"session {taken} is taken: a second request for it changes nothing"
        return errors, snapshots

    def _tables(
        self,
        fresh: list[Record],
        raw: RawBatch | None,
        errors: dict[int, str],
        views: list[SessionView],
        before: int,
    ) -> dict[str, pa.Table]:
        """The rows ``fresh``, now folded, adds or replaces: every table but the
        snapshots' and the tenancy's."""
        s = self.state
        kinds: list[str | None] = [None] * len(fresh)  # the payload says, but for these
        any_malformed = False
        samples: list[tuple[int, GpuUsageSampled]] = []
        policy_owners: dict[str, None] = {}
        # The few records the tables treat apart; every other changes only what the fold
        # marks as changed.
        for i, r in ((i, r) for i, r in enumerate(fresh) if type(r.event) in _APART):
            e = r.event
            if isinstance(e, Malformed):
                kinds[i] = "malformed"
                any_malformed = True
            elif isinstance(e, GpuUsageSampled):
                samples.append((r.seq, e))
            elif isinstance(e, PolicySet):
                policy_owners[e.owner] = None
        agent_ids = dict(s.changed_agents)
        for v in views:
            if v.agent_id is not None:
                agent_ids[v.agent_id] = None
        return {
            "events": rows.event_table(
                [r.seq for r in fresh],
                [r.subject for r in fresh],
                kinds,
                [errors.get(r.seq) for r in fresh] if errors else [None] * len(fresh),
                _payloads(fresh, raw, any_malformed),
            ),
            "sessions": rows.session_table(views),
            "session_history": rows.history_table(views, before),
            # A policy on the wrong subject names its owner but changes nothing (the fold
            # refused it): only policies the fold holds have rows.
            "policies": rows.policy_table(
                s.policies[o] for o in sorted(policy_owners) if o in s.policies
            ),
            "gpu_usage": rows.usage_table(samples),
            "destroys": rows.destroy_table(s.answered),
            "admin_answers": rows.admin_answer_table(s.admin_answered),
            "agents": rows.agent_table([s.agents[a] for a in sorted(agent_ids) if a in s.agents]),
        }

    def write(self, batch: "Batch") -> None:
        """Store a prepared batch and its last sequence in one transaction.

        Raises ProjectionError if it fails; the fold is then ahead of the tables: call
        ``recover`` once no ``prepare`` runs (``apply`` does).
        """
        self.add(batch, commit=True)

    def add(self, batch: "Batch", *, commit: bool) -> None:
        """Write a prepared batch into the open transaction, opening one if none is; with
        ``commit``, commit it: the batches added since it opened show together, and the
        last one's sequence becomes ``last_seq``.

        A catch-up writes each batch as soon as it is folded, several to a transaction,
        rather than a transaction's batches all at once: the last of them are then not
        left to write after the fold has ended. Raises ProjectionError as ``write``; the
        open transaction is rolled back whole.
        """
        opened = self._open
        after = self.committed if opened is None else opened[1]
        if batch.first <= after:
            raise ProjectionError(f"batch {batch.first}-{batch.last} is already written")
        first = batch.first if opened is None else opened[0]
        with self._rolled_back_on_failure(first, batch.last):
            self._write(batch, begin=opened is None, commit=commit)
        if commit:
            self._open = None
            self.committed = batch.last
        else:
            self._open = (first, batch.last)

    def commit(self) -> None:
        """Commit the open transaction (``add``), if one is. Raises ProjectionError."""
        opened = self._open
        if opened is None:
            return
        with self._rolled_back_on_failure(*opened):
            self.con.execute("COMMIT")
        self._open = None
        self.committed = opened[1]

    @contextmanager
    def _rolled_back_on_failure(self, first: int, last: int) -> Iterator[None]:
        """Roll the open transaction back whole if the block fails; DuckDB's errors are
        raised as ProjectionError for records ``first`` to ``last``."""
        try:
            yield
        except BaseException as e:
            self._roll_back()
            if isinstance(e, duckdb.Error):
                raise ProjectionError(f"could not apply records {first}-{last}: {e}") from e
            raise

    def _roll_back(self) -> None:
        self._open = None
        with contextlib.suppress(duckdb.Error):  # none open: the failure ended it already
            self.con.execute("ROLLBACK")

    def _write(self, batch: "Batch", *, begin: bool, commit: bool) -> None:
        # A batch is one call, its transaction's begin or end included: each call into
        # DuckDB gives the GIL back and must win it again, which costs milliseconds while
        # a thread folds.
        script = ";\n".join(_statements(batch.tables, batch.replaced))
        if begin:
            script = f"BEGIN TRANSACTION;\n{script}"
        if commit:
            script = f"{script};\nCOMMIT"
        _execute(self.con, script, **{f"_{n}": t for n, t in batch.tables.items()})


def _statements(tables: dict[str, pa.Table], replaced: frozenset[str]) -> list[str]:
    """What stores ``tables`` (``_<table>`` naming each one's rows in ``_execute``); the
    ``replaced`` ones are written whole, empty or not."""
    out = []
    for name, table in tables.items():
        if name in replaced:
            out.append(f"DELETE FROM {STORED[name]}")
        if not table.num_rows:
            continue
        key, stored = _KEYS.get(name), STORED[name]
        if key is not None:
            # Every row of what changed is written anew: out with the old ones first.
            out.append(f"DELETE FROM {stored} WHERE {key} IN (SELECT {key} FROM _{name})")
        out.append(f"INSERT INTO {stored} {INSERTS[name]}")
    return out


def _payloads(
    fresh: list[Record], raw: RawBatch | None, any_malformed: bool
) -> "pa.Array[Any] | list[bytes]":
    """The events rows' payloads of ``fresh``: what the events table keeps of an event is
    its canonical JSON, not the bytes as logged. DuckDB reads the audit columns from these
    bytes, and a producer's own JSON (a key twice, say) could make it read other values
    than the fold decoded.

    They are the bulk batch's (``raw``, canonical already) where ``fresh`` are its last
    records, as ``decode`` leaves them (sequences ascend, so its ends tell), and no record
    is malformed (the table keeps a malformed payload's first bytes, the batch has them
    whole); else each event encoded.
    """
    if raw is not None and not any_malformed:
        skip = len(raw.seqs) - len(fresh)
        if skip >= 0 and raw.seqs[skip] == fresh[0].seq and raw.seqs[-1] == fresh[-1].seq:
            return rows.packed(raw.body, raw.offsets, len(raw.seqs)).slice(skip)
    payloads: list[bytes] = []
    for r in fresh:
        e = r.event
        payloads.append(e.payload if isinstance(e, Malformed) else encode(e))
    return payloads


@contextmanager
def _registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> Iterator[None]:
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


@dataclass(frozen=True)
class Batch:
    """A prepared batch: the rows of records ``first`` to ``last``, ready to be written."""

    first: int
    last: int
    tables: dict[str, pa.Table]
    replaced: frozenset[str] = frozenset()  # tables written whole (schema.WHOLE)


# The key of each table whose rows are rewritten when what they describe changes.
_KEYS = {"sessions": "session_id", "agents": "agent_id", "policies": "owner"}


def _execute(
    con: duckdb.DuckDBPyConnection,
    script: str,
    *,
    _events: pa.Table,
    _sessions: pa.Table,
    _session_history: pa.Table,
    _policies: pa.Table,
    _snapshots: pa.Table,
    _gpu_usage: pa.Table,
    _agents: pa.Table,
    _destroys: pa.Table,
    _admin_answers: pa.Table,
    _domains: pa.Table,
    _users: pa.Table,
    _keypairs: pa.Table,
    _level_policies: pa.Table,
    _endpoints: pa.Table,
) -> None:
    """Run ``script``, in which ``_<table>`` names the Arrow rows of that table.

    DuckDB finds Arrow tables by the names of the caller's local variables (its replacement
    scan). Registering them instead creates and drops a view per table, a catalog change
    each, which is most of the cost of a follower's small transactions.
    """
    con.execute(script)


def _compact(s: ClusterState, views: Sequence[SessionView]) -> None:
    """Let ended sessions go: their rows are written and the fold never changes them."""
    forget_ended(s, [v.session_id for v in views])


def applied_seq(con: duckdb.DuckDBPyConnection) -> int:
    """The last sequence the tables hold: every record has its row in ``events``, written
    in the same transaction as everything it changed."""
    row = con.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
    return int(row[0]) if row else 0


def restore_state(
    con: duckdb.DuckDBPyConnection, seq: int, *, all_ended: bool = False
) -> ClusterState:
    """The fold's state as of ``seq`` (at most the store's ``last_seq``), from the tables.

    Starts from the newest snapshot at or below ``seq`` and folds the stored events after
    it. Ended sessions are stubs; with ``all_ended`` every session ended by then gets one,
    otherwise only those a later request in the folded range names again.
    """
    snap = con.execute(
        "SELECT seq, state FROM snapshots WHERE seq <= ? ORDER BY seq DESC LIMIT 1", [seq]
    ).fetchone()
    snap_seq = int(snap[0]) if snap else 0
    records = stored_records(con, snap_seq, seq)
    if all_ended:
        ended = _ended_ids(con, snap_seq)
    else:
        named = [r.event.session_id for r in records if isinstance(r.event, SessionRequested)]
        ended = _ended_ids(con, snap_seq, among=named) if named else []
    state = decode_state(bytes(snap[1]), IdSet(ended)) if snap else ClusterState(ended=IdSet(ended))
    for r in records:
        evolve(state, r)
    return state


def _ended_ids(
    con: duckdb.DuckDBPyConnection, seq: int, among: list[str] | None = None
) -> list[str]:
    sql = f"SELECT session_id FROM session_history WHERE seq <= ? AND status IN ({ENDED_SQL})"
    if among is None:
        return [r[0] for r in con.execute(sql, [seq]).fetchall()]
    with _registered(con, "_among", pa.table({"k": pa.array(among, pa.string())})):
        found = con.execute(sql + " AND session_id IN (SELECT k FROM _among)", [seq]).fetchall()
    return [r[0] for r in found]


def stored_records(con: duckdb.DuckDBPyConnection, after: int, until: int) -> list[Record]:
    """The records after ``after`` up to ``until``, decoded from the events table."""
    out: list[Record] = []
    if until <= after:
        return out
    result = con.execute(
        "SELECT seq, subject, type, error, payload FROM events "
        "WHERE seq > ? AND seq <= ? ORDER BY seq",
        [after, until],
    )
    while chunk := result.fetchmany(10_000):
        for seq, subject, kind, error, payload in chunk:
            data = bytes(payload)
            if kind == "malformed":
                out.append(
                    Record(seq=seq, subject=subject, event=Malformed(error=error, payload=data))
                )
            else:
                out.append(Record(seq=seq, subject=subject, event=decode(data)))
    return out
