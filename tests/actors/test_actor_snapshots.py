"""Actors start from a snapshot and the log's tail, and keep one now and then.

The property: a snapshot taken at any point, decoded and fed the rest of the log, folds to
exactly what a full replay holds. Then the store's contract (in memory and on JetStream),
what an actor does with a snapshot it must not use, and actors restarted from one.
"""

import base64
from collections.abc import AsyncIterator, Awaitable

import anyio
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from structlog.testing import capture_logs

from events import Record, Slots
from events import subjects as subj
from services.actors.agent import AgentActor
from services.actors.common import rebuild
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.actors.snapshots import Snapshots
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import connect
from services.adapters.jetstream_snapshots import JetStreamSnapshots
from services.adapters.memory_log import MemoryLog
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.permissions import inbox
from services.domain.fold import state_codec
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold, forget_ended, own_subjects
from services.domain.fold.state_codec import (
    SnapshotUnusable,
    decode_actor_state,
    encode_actor_state,
    encode_state,
)
from services.domain.status import ENDED
from services.ports import LogError
from services.testing import MemorySnapshots
from tests.support.cluster import GIB, agent_config
from tests.support.fold_log import known_ids
from tests.support.projection_logs import Raw, logs, records_from
from tests.support.snapshot_contract import SnapshotContract
from tests.support.tenancy_env import secured_cluster

pytestmark = pytest.mark.anyio
LOG = "FGPU@2026-11-25T00:00:00+00:00"
IMAGE = "fgpu/busybox:latest"


def _replay(
    records: list[Record], cuts: list[int], state: ClusterState | None = None
) -> ClusterState:
    """Fold ``records`` as an actor's rebuild does: batch by batch, ended sessions let go
    of after each."""
    s = ClusterState() if state is None else state
    start = 0
    for end in [*sorted(set(cuts)), len(records)]:
        batch = records[start:end]
        if batch:
            fold(batch, s)
            forget_ended(s, s.changed)
            s.changed.clear()
        start = max(start, end)
    return s


def _appendable(s: ClusterState) -> dict[str, int]:
    """The subjects an actor appends to expecting their last sequence: the shared ones,
    and those of sessions that have not ended."""
    shared = {subj.LEDGER, subj.ADMISSION, subj.TENANCY, subj.SYS}
    for v in s.sessions.values():
        if v.status not in ENDED:
            shared.update(own_subjects(v))
    return {k: v for k, v in s.subject_seq.items() if k in shared}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    log=logs(),
    at=st.integers(0, 80),
    cuts=st.lists(st.integers(1, 80), max_size=4),
    forgotten=st.booleans(),
)
def test_a_snapshot_and_the_tail_fold_to_what_a_full_replay_holds(
    log: list[Raw], at: int, cuts: list[int], forgotten: bool
) -> None:
    records = records_from(log)
    at = min(at, len(records))
    whole = _replay(records, cuts)
    head = fold(records[:at])  # a snapshot is taken right after a fold
    if forgotten:  # ... whether or not ended sessions were let go of yet
        forget_ended(head, head.changed)
    restored = decode_actor_state(encode_actor_state(head, LOG), LOG)
    assert restored.last_seq == head.last_seq
    tail = [r for r in records if r.seq > restored.last_seq]
    again = _replay(tail, [c - at for c in cuts if c > at], restored)
    assert encode_state(again) == encode_state(whole)
    assert known_ids(again) == known_ids(whole)  # an ended id is still known
    assert _appendable(again) == _appendable(whole)
    assert again.destroy_answers == whole.destroy_answers


def test_a_snapshot_of_another_log_version_or_no_snapshot_at_all_is_refused() -> None:
    s = ClusterState(last_seq=3)
    data = encode_actor_state(s, LOG)
    with pytest.raises(SnapshotUnusable, match="of another log"):
        decode_actor_state(data, "FGPU@2027-01-01T00:00:00+00:00")
    with pytest.raises(SnapshotUnusable, match="not a snapshot"):
        decode_actor_state(b"\x93garbage", LOG)
    with pytest.raises(SnapshotUnusable, match="not a snapshot"):
        decode_actor_state(data[: len(data) // 2], LOG)
    assert decode_actor_state(data, LOG).last_seq == 3


def test_a_snapshot_of_another_fold_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_actor_state(ClusterState(last_seq=3), LOG)
    monkeypatch.setattr(state_codec, "FOLD_VERSION", state_codec.FOLD_VERSION + 1)
    with pytest.raises(SnapshotUnusable, match="fold version"):
        decode_actor_state(data, LOG)


def test_a_state_holding_decisions_the_log_lacks_is_not_encoded() -> None:
    s = ClusterState()
    s.unconfirmed["e1"] = None
    with pytest.raises(ValueError, match="decisions the log does not have"):
        encode_actor_state(s, LOG)


# ---- the store ---------------------------------------------------------------------------


class TestMemorySnapshots(SnapshotContract):
    @pytest.fixture
    def store(self) -> MemorySnapshots:
        return MemorySnapshots()


class TestJetStreamSnapshots(SnapshotContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[JetStreamSnapshots]:
        with nats_server.nats_server() as server:
            events = await connect(server.url)
            await events.create_or_update_stream()  # makes the buckets too
            await events.close()
            async with nats_connection(server.url) as conn:
                yield conn.snapshots("scheduler")


async def test_no_bucket_reads_as_no_snapshot() -> None:
    """A server whose administrator has not made the buckets (an older set-up): nothing to
    start from, not an error."""
    with nats_server.nats_server() as server:
        async with nats_connection(server.url) as conn:
            assert await conn.snapshots("quota").load() is None


async def test_junk_where_the_meta_stands_reads_as_none_and_the_next_save_repairs_it() -> None:
    """A message aimed at the bucket's meta subject (an acknowledgement a client of the
    log's account sent there as a reply): nothing to start from, not a bucket broken until
    an administrator repairs it."""
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        await events.create_or_update_stream()
        await events.close()
        async with nats_connection(server.url) as conn:
            snapshots = conn.snapshots("scheduler")
            await snapshots.save(b"before")
            meta = f"$O.{snapshots.bucket}.M.{base64.urlsafe_b64encode(b'state').decode()}"
            await conn.client.nc.request(meta, b'{"stream":"FGPU","seq":42}', timeout=5)
            assert await snapshots.load() is None
            await snapshots.save(b"after")
            assert await snapshots.load() == b"after"


# ---- actors ------------------------------------------------------------------------------


async def _sessions(log: MemoryLog, n: int, end: int) -> list[str]:
    """``n`` sessions asked for, of which the first ``end`` destroyed, on a running
    cluster; returns the ids once every one has settled."""
    client = Client(log, SystemClock(), "alice")
    ids = await client.create(image=IMAGE, slots=Slots(cpu=1000, mem=GIB, fgpu=25), count=n)
    await client.wait_until(lambda s: all(_status(s, i) == "RUNNING" for i in ids))
    for sid in ids[:end]:
        await client.destroy(sid)
    await client.wait_until(lambda s: all(_status(s, i) == "TERMINATED" for i in ids[:end]))
    return ids


def _status(s: ClusterState, sid: str) -> str | None:
    v = s.sessions.get(sid)
    return None if v is None else v.status.value


async def test_actors_keep_snapshots_and_start_from_them_as_from_a_full_replay() -> None:
    log = MemoryLog()
    clock = SystemClock()
    sched_store, quota_store = MemorySnapshots(), MemorySnapshots()
    runtime = DummyRuntime()  # its containers outlive the agent, as Docker's do
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(
                QuotaActor(
                    log, clock, snapshots=Snapshots(quota_store, writes=True, every_events=5)
                ).run
            )
            await tg.start(
                SchedulerActor(
                    log, clock, snapshots=Snapshots(sched_store, writes=True, every_events=5)
                ).run
            )
            await tg.start(AgentActor(log, runtime, clock, agent_config("a1")).run)
            await _sessions(log, 6, 3)
            tg.cancel_scope.cancel()
        assert sched_store.saves > 1 and quota_store.saves > 1
        full = await rebuild(log)
        for store in (sched_store, quota_store):
            kept = Snapshots(store, writes=False)
            started = await rebuild(log, kept, "test")
            assert 0 < kept.started_from <= full.last_seq
            assert encode_actor_state(started, "x") == encode_actor_state(full, "x")
        # A scheduler and an agent started from the scheduler's snapshot carry on: a new
        # session runs, and one of the old is destroyed.
        client = Client(log, clock, "alice")
        async with anyio.create_task_group() as tg:
            from_sched = Snapshots(sched_store, writes=False)
            await tg.start(
                QuotaActor(log, clock, snapshots=Snapshots(quota_store, writes=True)).run
            )
            await tg.start(
                SchedulerActor(log, clock, snapshots=Snapshots(sched_store, writes=True)).run
            )
            agent = AgentActor(log, runtime, clock, agent_config("a1"), snapshots=from_sched)
            await tg.start(agent.run)
            assert from_sched.started_from > 0
            [new] = await client.create(image=IMAGE, slots=Slots(cpu=1000, mem=GIB, fgpu=25))
            old = next(sid for sid, v in full.sessions.items() if v.status.value == "RUNNING")
            await client.destroy(old)
            s = await client.wait_until(
                lambda s: _status(s, new) == "RUNNING" and _status(s, old) == "TERMINATED"
            )
            assert s.agents["a1"].gpus[0].allocated == 25 * 3  # 6 - 3 destroyed + 1 - 1
            tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("what", "said", "reason"),
    [
        ("garbage", "snapshot.corrupt", "not a snapshot"),
        ("damaged", "snapshot.corrupt", "its chunks do not match its digest"),
        ("other log", "snapshot.ignored", "of another log"),
        ("ahead", "snapshot.ignored", "the log ends at"),
        ("away", "snapshot.unreadable", None),
    ],
)
async def test_a_snapshot_it_must_not_use_is_ignored_with_a_warning(
    what: str, said: str, reason: str | None
) -> None:
    """Whatever is wrong with it, the actor replays the whole log and says why."""
    log = MemoryLog()
    client = Client(log, SystemClock(), "alice")
    await client.create(image=IMAGE, slots=Slots(cpu=1000, mem=GIB, fgpu=25), count=2)
    store = MemorySnapshots()
    ident = await log.identity()
    store.data = encode_actor_state(ClusterState(last_seq=1), ident)
    if what == "garbage":
        store.data = b"\x00\x01 not msgpack"
    elif what == "damaged":
        store.corrupt = "its chunks do not match its digest"
    elif what == "other log":
        store.data = encode_actor_state(ClusterState(last_seq=1), ident + "-other")
    elif what == "ahead":
        store.data = encode_actor_state(ClusterState(last_seq=99), ident)
    else:
        store.fail = True
    kept = Snapshots(store, writes=False)
    with capture_logs() as seen:
        state = await rebuild(log, kept, "test")
    assert kept.started_from == 0
    assert encode_actor_state(state, "x") == encode_actor_state(await rebuild(log), "x")
    warned = [e for e in seen if e["event"].startswith("snapshot.")]
    assert [(e["event"], e["log_level"]) for e in warned] == [(said, "warning")]
    assert reason is None or reason in warned[0]["reason"]


async def test_a_failed_save_is_logged_and_the_actor_carries_on() -> None:
    log = MemoryLog()
    clock = SystemClock()
    store = MemorySnapshots()
    store.fail = True
    with capture_logs() as seen, anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            kept = Snapshots(store, writes=True, every_events=1)
            await tg.start(QuotaActor(log, clock, snapshots=kept).run)
            await tg.start(SchedulerActor(log, clock).run)
            await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config("a1")).run)
            await _sessions(log, 2, 1)
            tg.cancel_scope.cancel()
    assert store.saves == 0
    assert any(e["event"] == "snapshot.not_saved" for e in seen)


async def test_a_snapshot_is_kept_at_once_then_by_events_or_by_time() -> None:
    store, now = MemorySnapshots(), [0.0]
    kept = Snapshots(store, writes=True, every_events=10, every_s=60, clock=lambda: now[0])
    s = ClusterState(last_seq=3, folded=3)
    async with anyio.create_task_group() as tg:
        kept.keep(s, tg, "test")  # none yet: what was folded is kept at once
    assert store.saves == 1
    s.last_seq = 12
    assert not kept.due(s)
    s.last_seq = 13
    assert kept.due(s)
    s.last_seq = 4
    assert not kept.due(s)
    now[0] = 61
    assert kept.due(s)
    s.unconfirmed["e"] = None  # a decision not back from the log yet
    assert not kept.due(s)
    assert not Snapshots(MemorySnapshots(), writes=False).due(ClusterState(last_seq=10**6))


# ---- who may read and write which snapshots (the server enforces it) ---------------------


async def test_only_a_kind_writes_its_snapshots_and_agents_read_the_schedulers() -> None:
    """Each identity on its own keypair through the gatekeeper: a scheduler writes and
    reads the scheduler's, quota its own; an agent and the registrar read the scheduler's
    and write none; a person reads and writes none. (A refused call waits for its
    timeout: a denied request is never answered, so only a few refusals are tried, all at
    once, each on its own connection.)"""
    kinds = ("scheduler", "quota", "registrar", "agent:a1")
    async with secured_cluster(services=kinds) as c:
        keys = {**c.services, "admin": (c.root.access_key, c.root.secret)}
        tried = {
            ("scheduler", "scheduler", "save"): True,
            ("scheduler", "scheduler", "load"): True,
            ("quota", "quota", "save"): True,
            ("quota", "scheduler", "load"): False,
            ("registrar", "scheduler", "load"): True,
            ("agent:a1", "scheduler", "load"): True,
            ("agent:a1", "scheduler", "save"): False,
            ("agent:a1", "quota", "load"): False,
            ("admin", "scheduler", "load"): False,
        }
        got: dict[tuple[str, str, str], bool] = {}

        async def attempt(who: str, kind: str, op: str) -> None:
            async with nats_connection(c.url, name=who, **_as(keys[who])) as conn:
                store = conn.snapshots(kind)
                call = store.save(f"{who} was here".encode()) if op == "save" else store.load()
                got[who, kind, op] = await _works(call)

        async with anyio.create_task_group() as tg:
            for who, kind, op in tried:
                tg.start_soon(attempt, who, kind, op)
        assert got == tried
        async with nats_connection(c.url, name="check", **_as(keys["agent:a1"])) as conn:
            assert await conn.snapshots("scheduler").load() == b"scheduler was here"


def _as(key: tuple[str, str]) -> dict[str, str]:
    return {"user": key[0], "password": key[1], "inbox_prefix": inbox(key[0])}


async def _works(call: Awaitable[object]) -> bool:
    """Whether ``call`` succeeds; a refusal by the server shows as the port's error (an
    answer never comes to a denied request: the call times out)."""
    try:
        with anyio.fail_after(30):
            await call
    except LogError:
        return False
    return True
