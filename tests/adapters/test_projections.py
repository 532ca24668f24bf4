"""The projection store: batches, restarts and redelivery never change what it holds.

Random logs (hypothesis) of every event type, in orders the actors would never write
(duplicates, late reports, reports from the wrong agent, requests on the wrong subject,
bytes that are no event), are applied in random batches with restarts and redeliveries,
and compared row for row with the same log applied in one go; the tables and the time
travel agree with the pure fold.
"""

import functools
import json
import uuid
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path

import anyio
import duckdb
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from structlog.testing import capture_logs

from events import (
    AgentRegistered,
    DevicePlacement,
    GpuInfo,
    Malformed,
    RawBatch,
    Record,
    SessionAdmitted,
    SessionQueued,
    SessionRequested,
    SessionScheduled,
    SessionTerminated,
    Slots,
    encode,
    record_of,
    records_of,
)
from events import subjects as subj
from events.union import EVENT_TYPES
from projections import Projector, rows
from projections.compare import differences
from projections.replay import seq_at, state_at
from projections.store import Batch, ProjectionError, ProjectionStore
from services.adapters import nats_server, raw_reader
from services.adapters.jetstream import connect
from services.adapters.memory_log import MemoryLog
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold, forget_ended
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.status import ENDED
from services.ports import EventLog
from tests.support.fold_log import known_ids
from tests.support.nats_env import Cert, store_raw
from tests.support.projection_logs import (
    OWNERS,
    T0,
    Raw,
    envelope,
    logs,
    records_from,
)


def _apply_in_one_go(path: Path, records: list[Record], every: int) -> None:
    store = ProjectionStore(path, snapshot_every=every)
    store.apply(records)
    store.close()


def _session_rows(store: ProjectionStore) -> dict[str, tuple[object, ...]]:
    rows = store.con.execute(
        "SELECT session_id, status, agent_id, devices, exit_code, reason, waiting FROM sessions"
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def _fold_rows(s: ClusterState) -> dict[str, tuple[object, ...]]:
    return {
        v.session_id: (
            v.status.value,
            v.agent_id,
            [{"gpu_index": d.gpu_index, "fgpu": d.fgpu} for d in v.devices],
            v.exit_code,
            v.reason,
            v.waiting,
        )
        for v in s.sessions.values()
    }


def _shares(s: ClusterState) -> dict[tuple[str, int], dict[str, int]]:
    return {
        (a.agent_id, i): dict(g.shares)
        for a in s.agents.values()
        for i, g in a.gpus.items()
        if g.shares
    }


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    log=logs(),
    cuts=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    every=st.integers(1, 20),
    restart_each=st.integers(2, 5),
)
def test_batches_restarts_and_redelivery_change_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    log: list[Raw],
    cuts: list[int],
    every: int,
    restart_each: int,
) -> None:
    tmp = tmp_path_factory.mktemp("p")
    records = records_from(log)
    _apply_in_one_go(tmp / "one.duckdb", records, every)

    store = ProjectionStore(tmp / "batched.duckdb", snapshot_every=every)
    i = 0
    k = 0
    while i < len(records):
        j = min(len(records), i + cuts[k % len(cuts)])
        # A redelivery: the batch comes with some of what was applied before it.
        again = records[max(0, i - cuts[(k + 1) % len(cuts)]) : j]
        assert store.apply(again) == records[j - 1].seq
        assert store.apply(records[i:j]) == records[j - 1].seq  # and once more: a no-op
        i = j
        k += 1
        if k % restart_each == 0:  # a crash between batches: reopen from the file
            store.close()
            store = ProjectionStore(tmp / "batched.duckdb", snapshot_every=every)
    truth = fold(records)
    assert _session_rows(store) == _fold_rows(truth)
    # Every column of every row is what the fold's final state says: a change the fold
    # did not mark as changed would have left an older row.
    assert _rows_of(store, "sessions_rows") == _table_rows(
        rows.session_table(truth.sessions.values())
    )
    assert _rows_of(store, "agents_rows") == _table_rows(rows.agent_table(truth.agents.values()))
    store.close()
    assert differences(tmp / "one.duckdb", tmp / "batched.duckdb") == {}


def _rows_of(store: ProjectionStore, table: str) -> list[tuple[object, ...]]:
    return sorted(store.con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


def _table_rows(table: pa.Table) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("t", table)
        return sorted(con.execute("SELECT * FROM t").fetchall(), key=repr)
    finally:
        con.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(log=logs(), applied=st.integers(0, 80))
def test_a_bulk_batch_writes_what_its_records_write(
    tmp_path_factory: pytest.TempPathFactory, log: list[Raw], applied: int
) -> None:
    """A batch from the bulk reader (payloads canonical, taken as they come) writes the
    rows its records write one by one, though its producers wrote JSON of their own
    (spaces, keys in another order), and after part of it was applied already."""
    tmp = tmp_path_factory.mktemp("bulk")
    stored = [(subject, _respaced(payload)) for subject, payload in log]
    records = records_from(stored)
    _apply_in_one_go(tmp / "one.duckdb", records, every=5)
    store = ProjectionStore(tmp / "bulk.duckdb", snapshot_every=5)
    store.apply(records[:applied])
    canonical = raw_reader._canonical([payload for _, payload in stored])
    raw = RawBatch(
        list(range(1, len(stored) + 1)),
        [subject for subject, _ in stored],
        canonical,
        b"".join(canonical),
        array("q", accumulate(map(len, canonical), initial=0)).tobytes(),
    )
    batch = store.prepare(store.decode(raw.seqs, raw.subjects, raw.payloads), raw)
    if batch is not None:
        store.write(batch)
    store.close()
    assert differences(tmp / "one.duckdb", tmp / "bulk.duckdb") == {}


def _respaced(payload: bytes) -> bytes:
    """The same JSON written another way (as some producer might), or the bytes as they
    are if they are no JSON."""
    try:
        value = json.loads(payload)
    except ValueError:
        return payload
    if isinstance(value, dict):
        value = dict(reversed(value.items()))
    return json.dumps(value, indent=1).encode()


@settings(max_examples=30, deadline=None)
@given(log=logs(), applied=st.integers(0, 80))
def test_a_bulk_batch_decodes_as_its_messages_one_by_one(log: list[Raw], applied: int) -> None:
    """``records_of`` (one comprehension, message by message only on a failure) gives what
    ``record_of`` gives for each message, malformed ones included; ``decode`` leaves out
    what the store has folded already."""
    seqs = list(range(1, len(log) + 1))
    subjects = [subject for subject, _ in log]
    payloads = [payload for _, payload in log]
    one_by_one = [record_of(q, s, p) for q, s, p in zip(seqs, subjects, payloads, strict=True)]
    assert records_of(seqs, subjects, payloads) == one_by_one
    store = ProjectionStore(":memory:")
    store.state.last_seq = applied
    assert store.decode(seqs, subjects, payloads) == one_by_one[applied:]
    store.close()


@settings(max_examples=15, deadline=None)
@given(log=logs(), every=st.integers(1, 15), data=st.data())
def test_time_travel_is_the_fold_of_the_prefix(
    tmp_path_factory: pytest.TempPathFactory, log: list[Raw], every: int, data: st.DataObject
) -> None:
    records = records_from(log)
    path = tmp_path_factory.mktemp("t") / "p.duckdb"
    _apply_in_one_go(path, records, every)
    store = ProjectionStore(path, snapshot_every=every)
    try:
        for _ in range(3):
            n = data.draw(st.integers(0, len(records)))
            past = state_at(store.cursor(), n)
            truth = fold(records[:n])
            assert past.seq == n
            live = {v.session_id: v for v in past.sessions() if v.status.value not in _ENDED}
            expected = {k: v for k, v in _fold_rows(truth).items() if v[0] not in _ENDED}
            assert _fold_rows(_with(live)) == expected
            assert _shares(past.state) == _shares(truth)
            ended = sum(1 for v in truth.sessions.values() if v.status.value in _ENDED)
            assert sum(past.ended_counts.values()) == ended
            for aid, a in truth.agents.items():
                b = past.state.agents[aid]
                assert (b.allocated, b.lost, b.capacity) == (a.allocated, a.lost, a.capacity)
            assert past.state.usage == truth.usage
    finally:
        store.close()


_ENDED = {"TERMINATED", "CANCELLED", "ERROR", "REJECTED"}


def _with(sessions: dict[str, object]) -> ClusterState:
    s = ClusterState()
    s.sessions = sessions  # type: ignore[assignment]
    return s


def test_an_event_is_stamped_and_found_by_time(tmp_path: Path) -> None:
    log: list[Raw] = []
    for k, owner in enumerate(OWNERS):
        e = SessionRequested(
            **envelope(k * 10, owner),
            session_id=f"s{k}",
            owner=owner,
            image="img:1",
            slots=Slots(fgpu=100),
        )
        log.append((subj.request(owner, f"s{k}"), encode(e)))
    store = ProjectionStore(tmp_path / "p.duckdb")
    try:
        store.apply(records_from(log))
        con = store.cursor()
        assert seq_at(con, T0 - timedelta(seconds=1)) == 0
        assert seq_at(con, T0) == 1
        assert seq_at(con, T0 + timedelta(seconds=9)) == 1
        assert seq_at(con, T0 + timedelta(hours=1)) == 2
        past = state_at(con, 1)
        assert past.at == T0 and [v.session_id for v in past.sessions()] == ["s0"]
    finally:
        store.close()


def test_a_snapshot_round_trips_and_folds_on_the_same(tmp_path: Path) -> None:
    records = records_from(
        [
            (subj.agent("a0"), encode(_agent("a0"))),
            (subj.request("alice", "s0"), encode(_request("alice", "s0", 1))),
            (
                subj.quota("alice"),
                encode(SessionAdmitted(**envelope(2, "quota"), session_id="s0", owner="alice")),
            ),
        ]
    )
    s = fold(records)
    copy = decode_state(encode_state(s))
    assert encode_state(copy) == encode_state(s)
    assert copy.sessions["s0"].status.value == "PENDING"
    assert copy.queue == s.queue and copy.usage == s.usage


def _agent(aid: str) -> AgentRegistered:
    return AgentRegistered(
        **envelope(0, f"agent:{aid}"),
        agent_id=aid,
        capacity=Slots(cpu=8000, mem=1 << 34, fgpu=200),
        gpus=(GpuInfo(index=0, uuid="GPU-0", model="M", mem=1 << 34, sm_count=80),),
        fgpu_per_gpu=200,
    )


def _request(owner: str, sid: str, k: int) -> SessionRequested:
    return SessionRequested(
        **envelope(k, owner), session_id=sid, owner=owner, image="img:1", slots=Slots(fgpu=100)
    )


def test_a_session_queued_in_a_batch_of_its_own_shows_why_it_waits() -> None:
    """A queued session's row is rewritten though the queueing changes no status: the
    fold marks it as changed (the store rewrites the rows of exactly those sessions)."""
    log: list[Raw] = [
        (subj.request("alice", "s0"), encode(_request("alice", "s0", 1))),
        (
            subj.quota("alice"),
            encode(SessionAdmitted(**envelope(2, "quota"), session_id="s0", owner="alice")),
        ),
        (
            subj.LEDGER,
            encode(SessionQueued(**envelope(3, "scheduler"), session_id="s0", reason="no room")),
        ),
    ]
    records = records_from(log)
    store = ProjectionStore(":memory:")
    for r in records:  # one record a batch
        store.apply([r])
    assert store.con.execute("SELECT status, waiting FROM sessions").fetchall() == [
        ("PENDING", "no room")
    ]
    store.close()


def test_every_batch_adds_as_much_to_the_write_ahead_log_as_the_first(tmp_path: Path) -> None:
    """Rewriting an agent and its sessions costs the same at the 40th batch as at the 5th.

    DuckDB logs a table's unflushed list data again at every append; with the rows' lists
    stored as such, the log grew by more at every batch until a checkpoint.
    """
    path = tmp_path / "p.duckdb"
    store = ProjectionStore(path)
    store.con.execute("SET checkpoint_threshold = '1GB'")  # no checkpoint resets the log
    wal = tmp_path / "p.duckdb.wal"
    raw: list[Raw] = [(subj.agent("a0"), encode(_agent("a0")))]
    store.apply(records_from(raw))
    grew: list[int] = []
    try:
        for n in range(40):
            sid, k = f"s{n}", 10 * n + 1
            admitted = SessionAdmitted(**envelope(k, "quota"), session_id=sid, owner="alice")
            placed = SessionScheduled(
                **envelope(k + 1, "scheduler"),
                session_id=sid,
                owner="alice",
                agent_id="a0",
                slots=Slots(fgpu=100),
                devices=(DevicePlacement(gpu_index=0, fgpu=100),),
            )
            batch: list[Raw] = [
                (subj.request("alice", sid), encode(_request("alice", sid, k))),
                (subj.quota("alice"), encode(admitted)),
                (subj.LEDGER, encode(placed)),
            ]
            if n:
                ended = SessionTerminated(
                    **envelope(k + 2, "agent:a0"),
                    session_id=f"s{n - 1}",
                    agent_id="a0",
                    exit_code=0,
                    reason="exited",
                )
                batch.append((subj.agent_session("a0", f"s{n - 1}"), encode(ended)))
            raw += batch
            before = wal.stat().st_size if wal.exists() else 0
            store.apply(records_from(raw)[-len(batch) :])
            grew.append(wal.stat().st_size - before)
        assert store.con.execute("SELECT count(*) FROM sessions").fetchone() == (40,)
    finally:
        store.close()
    assert grew[-1] <= 1.25 * grew[5], grew


class _FailingStore(ProjectionStore):
    """Fails its ``fail_at``-th write as a full disk would."""

    fail_at = 3

    def _count(self) -> None:
        self.writes = getattr(self, "writes", 0) + 1
        if self.writes == self.fail_at:
            self.writes_before_failure = self.last_seq
            raise duckdb.IOException("No space left on device")

    def _write(self, batch: Batch, *, begin: bool, commit: bool) -> None:
        self._count()
        super()._write(batch, begin=begin, commit=commit)


# ---- the projector, through each path of its catch-up -------------------------------------


@dataclass
class _Source:
    """A log a projector catches up from, and how a test stores raw messages in it."""

    log: EventLog
    publish: Callable[[list[Raw]], Awaitable[None]]
    falls_back: bool  # each catch-up warns that the bulk reader cannot serve, reads in order


@pytest.fixture(params=["bulk", "ordered: bulk unavailable", "ordered: no bulk reader"])
async def source(request: pytest.FixtureRequest, tls_cert: Cert) -> AsyncIterator[_Source]:
    """The bulk reader (JetStreamLog); the ordered read it falls back to (JetStreamLog over
    TLS, which the bulk reader does not speak); a log with no bulk reader (MemoryLog)."""
    if request.param == "ordered: no bulk reader":
        memory = MemoryLog(batch_size=7)

        async def publish(messages: list[Raw]) -> None:
            for subject, payload in messages:
                await memory.publish_raw(subject, payload)

        yield _Source(memory, publish, falls_back=False)
        return
    tls = request.param == "ordered: bulk unavailable"
    with nats_server.nats_server(args=tls_cert.server_args() if tls else ()) as server:
        events = await connect(server.url, tls=tls_cert.client_context()) if tls else None
        events = events or await connect(server.url)
        await events.create_or_update_stream()
        try:
            yield _Source(events, functools.partial(store_raw, events), falls_back=tls)
        finally:
            await events.close()


def _fallbacks(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in logs if e["event"] == "projector.bulk_read_unavailable"]


@pytest.mark.anyio
async def test_a_write_that_fails_while_following_is_retried_and_loses_nothing(
    tmp_path: Path, source: _Source
) -> None:
    """A failed write while following leaves the fold ahead of the tables, which are then
    read back; the records from there come again through a catch-up, the log's bulk
    reader or its ordered read, and nothing is lost or applied twice."""
    raw: list[Raw] = [(subj.agent("a0"), encode(_agent("a0")))]
    for n in range(12):
        sid = f"s{n}"
        raw += [
            (subj.request("alice", sid), encode(_request("alice", sid, 2 * n + 1))),
            (
                subj.quota("alice"),
                encode(
                    SessionAdmitted(**envelope(2 * n + 2, "quota"), session_id=sid, owner="alice")
                ),
            ),
        ]
    store = _FailingStore(tmp_path / "live.duckdb", snapshot_every=5)
    projector = Projector(source.log, store)
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            await tg.start(projector.run)
            # Five parts, each applied before the next is stored: five writes at least,
            # the third of which fails.
            for part in range(5):
                await source.publish(raw[part * 5 : (part + 1) * 5])
                with anyio.fail_after(30):
                    await projector.wait_beyond(min(len(raw), (part + 1) * 5) - 1)
            tg.cancel_scope.cancel()
    assert store.writes > store.fail_at  # it failed, and went on
    assert bool(_fallbacks(logs)) == source.falls_back  # the retry caught up, so
    store.close()
    _apply_in_one_go(tmp_path / "once.duckdb", records_from(raw), every=5)
    assert differences(tmp_path / "live.duckdb", tmp_path / "once.duckdb") == {}


def test_an_audit_row_holds_what_its_event_says(tmp_path: Path) -> None:
    """DuckDB reads the audit row's columns from the payload: for every event type they are
    the event's own fields, whatever its subject; a payload that is no event has none."""
    fixture = Path(__file__).parents[1] / "fixtures" / "events_v1.jsonl"
    payloads = [line.encode() for line in fixture.read_text().splitlines() if line]
    payloads.append(b'\xff{"id": "not-an-event", "actor": "x"}')
    records = records_from([(subj.LEDGER, p) for p in payloads])
    store = ProjectionStore(tmp_path / "p.duckdb")
    try:
        store.apply(records)
        rows = store.con.execute(
            "SELECT seq, type, event_id, happened_at, actor, causation_id, correlation_id,"
            " session_id, agent_id, owner FROM events ORDER BY seq"
        ).fetchall()
    finally:
        store.close()
    expected = []
    for r in records:
        e = r.event
        if isinstance(e, Malformed):
            expected.append((r.seq, "malformed", *[None] * 8))
            continue
        expected.append(
            (
                r.seq,
                e.__struct_config__.tag,
                e.id,
                e.at.astimezone(UTC).replace(tzinfo=None),
                e.actor,
                e.causation_id,
                e.correlation_id,
                getattr(e, "session_id", None),
                getattr(e, "agent_id", None),
                getattr(e, "owner", None) or getattr(e, "requester", None),
            )
        )
    assert rows == expected
    assert len(expected) == len(EVENT_TYPES) + 1 and expected[-1][1] == "malformed"


@pytest.mark.anyio
@pytest.mark.parametrize("per_transaction", [1, 3])
async def test_a_write_that_fails_in_a_catch_up_loses_nothing(
    tmp_path: Path, source: _Source, per_transaction: int
) -> None:
    """Catching up, batches of 4 are written (from the bulk reader: read, folded and
    written at once, one or more a transaction; in order: one a transaction); a failed
    write restores the fold from the tables, and the next catch-up goes on from there."""
    raw: list[Raw] = [(subj.agent("a0"), encode(_agent("a0")))]
    for n in range(20):
        sid = f"s{n}"
        raw.append((subj.request("alice", sid), encode(_request("alice", sid, n + 1))))
    await source.publish(raw)
    store = _FailingStore(tmp_path / "live.duckdb", snapshot_every=5)
    # 21 records, 4 a batch, each batch a write: fail in the second transaction, while
    # it is open (with 3 batches a transaction, after one of its batches).
    store.fail_at = per_transaction + 2
    projector = Projector(source.log, store, batch=4, batches_per_transaction=per_transaction)
    with capture_logs() as logs:
        with pytest.raises(ProjectionError, match="No space left"):
            await projector.catch_up()
        assert 0 < store.last_seq < len(raw) and store.state.last_seq == store.last_seq
        assert await projector.catch_up() == len(raw) - store.writes_before_failure
    assert len(_fallbacks(logs)) == (2 if source.falls_back else 0)
    store.close()
    _apply_in_one_go(tmp_path / "once.duckdb", records_from(raw), every=5)
    assert differences(tmp_path / "live.duckdb", tmp_path / "once.duckdb") == {}


def test_batches_added_to_a_transaction_show_when_it_commits(tmp_path: Path) -> None:
    """A catch-up adds batches to an open transaction as it folds them: readers see none
    of them, nor their sequence, until the commit; recovering rolls them back."""
    raw: list[Raw] = [(subj.agent("a0"), encode(_agent("a0")))]
    raw += [
        (subj.request("alice", f"s{n}"), encode(_request("alice", f"s{n}", n))) for n in range(6)
    ]
    records = records_from(raw)
    store = ProjectionStore(tmp_path / "p.duckdb")
    reader = store.cursor()

    def seen() -> tuple[int, int]:
        row = reader.execute("SELECT count(*), coalesce(max(seq), 0) FROM events").fetchone()
        assert row is not None
        return row[0], row[1]

    try:
        added = []
        for part in (records[:3], records[3:5]):
            batch = store.prepare(part)
            assert batch is not None
            store.add(batch, commit=False)
            added.append(batch)
        assert seen() == (0, 0) and store.last_seq == 0
        with pytest.raises(ProjectionError, match="already written"):
            store.add(added[0], commit=True)  # refused before any write: the rest stands
        store.commit()
        assert seen() == (5, 5) and store.last_seq == 5
        batch = store.prepare(records[5:])
        assert batch is not None
        store.add(batch, commit=False)
        store.recover()  # as after a failed write: the open transaction goes, the fold too
        assert seen() == (5, 5) and store.state.last_seq == 5
        store.write(store.prepare(records[5:]) or pytest.fail("nothing prepared"))
        assert seen() == (7, 7)
    finally:
        reader.close()
        store.close()


@pytest.mark.anyio
async def test_a_store_of_another_log_is_started_afresh(tmp_path: Path) -> None:
    """Tables of one log are no use to another: pointed at a log made anew (or another
    cluster's), the read API's store starts empty instead of serving the old tables and
    skipping the new log's first records."""
    from services.api.serve import open_store

    path = tmp_path / "p.duckdb"
    first, second = MemoryLog(), MemoryLog()
    for log in (first, second):
        await log.append(subj.quota("alice"), _admitted_event())
    store = open_store(path, await first.identity())
    await Projector(first, store).catch_up()
    assert store.last_seq == 1
    store.close()
    again = open_store(path, await first.identity())  # the same log: kept
    assert again.last_seq == 1 and again.log_identity() == await first.identity()
    again.close()
    other = open_store(path, await second.identity())
    try:
        assert other.last_seq == 0 and other.log_identity() == await second.identity()
        await Projector(second, other).catch_up()
        assert other.last_seq == 1
    finally:
        other.close()


def _admitted_event() -> SessionAdmitted:
    return SessionAdmitted(
        id=uuid.uuid4().hex,
        at=datetime(2025, 1, 1, tzinfo=UTC),
        actor="quota",
        session_id="s1",
        owner="alice",
    )


@pytest.mark.anyio
async def test_amounts_beyond_any_column_never_stop_the_projector() -> None:
    """An amount a 64-bit column cannot hold is no event (decoding refuses it); the largest
    an event may hold fits, summed with others: the projector writes both, crashing on
    neither (it used to stop its whole process)."""
    log = MemoryLog()
    request = {
        "type": "session.requested.v1",
        "id": uuid.uuid4().hex,
        "at": "2025-01-01T00:00:00Z",
        "actor": "alice",
        "session_id": "s1",
        "owner": "alice",
        "image": "fgpu/busybox:latest",
        "slots": {"cpu": 10**21, "mem": 1, "fgpu": 1},
    }
    await log.publish_raw(subj.request("alice", "s1"), json.dumps(request).encode())
    largest = {**request, "id": uuid.uuid4().hex, "session_id": "s2"}
    largest["slots"] = {"cpu": 1 << 62, "mem": 1 << 62, "fgpu": 1 << 62}
    await log.publish_raw(subj.request("alice", "s2"), json.dumps(largest).encode())
    store = ProjectionStore(":memory:")
    try:
        assert await Projector(log, store).catch_up() == 2
        kinds = store.con.execute("SELECT seq, type FROM events ORDER BY seq").fetchall()
        assert kinds == [(1, "malformed"), (2, "session.requested.v1")]
        row = store.con.execute("SELECT req_cpu, invalid FROM sessions").fetchone()
        assert row == (1 << 62, "a requested amount is more than any cluster holds")
    finally:
        store.close()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(log=logs(), cuts=st.lists(st.integers(1, 80), max_size=6))
def test_letting_ended_sessions_go_folds_to_the_same_live_state(
    log: list[Raw], cuts: list[int]
) -> None:
    """An actor lets ended sessions go after each batch (``forget_ended``): what can still
    change is exactly what a fold of everything holds, batch boundaries wherever."""
    records = records_from(log)
    whole = fold(records)
    kept = ClusterState()
    start = 0
    for end in [*sorted(set(cuts)), len(records)]:
        batch = records[start:end]
        if not batch:
            continue
        fold(batch, kept)
        forget_ended(kept, kept.changed)
        kept.changed.clear()
        start = end
    assert encode_state(kept) == encode_state(whole)
    assert known_ids(kept) == known_ids(whole)  # an ended id is still known
    live = {sid for sid, v in whole.sessions.items() if v.status not in ENDED}
    for subject, seq in kept.subject_seq.items():
        assert whole.subject_seq[subject] == seq
    for subject in whole.subject_seq.keys() - kept.subject_seq.keys():
        assert subject.rsplit(".", 1)[-1] not in live, subject
