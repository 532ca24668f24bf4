"""The archive: the log's past leaves the stream only once archived, read back and said,
and the archive and the stream read as one history."""

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from events import LogArchived, Record, Slots, encode
from events import subjects as subj
from projections.archive import Archive, ArchivedLog, ArchiveError
from services.actors.agent import AgentActor
from services.actors.archiver import Archiver
from services.actors.common import rebuild
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.actors.snapshots import Snapshots
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state_codec import encode_actor_state, live_sessions, snapshot_seq
from services.ports import HistoryMissing, LogError, Retention
from services.sim.whatif import read_group, whatif
from services.testing import MemorySnapshots
from tests.support.cluster import GIB, agent_config

pytestmark = pytest.mark.anyio
IMAGE = "fgpu/busybox:latest"
CLOCK = SystemClock()


async def _all(events: object) -> list[Record]:
    out: list[Record] = []
    async for batch in events.read(0):  # type: ignore[attr-defined]
        out += batch
    return out


def _status(s: ClusterState, sid: str) -> str | None:
    v = s.sessions.get(sid)
    return None if v is None else v.status.value


class _SaidSnapshots(MemorySnapshots):
    async def covering(self, seq: int, identity: str) -> None:
        """Back once the latest snapshot covers the log up to ``seq``."""
        while self.data is None or snapshot_seq(self.data, identity) < seq:
            await self.saved()


async def _history(log: MemoryLog, stores: tuple[_SaidSnapshots, _SaidSnapshots]) -> None:
    """A cluster that ran sessions, some ended; the scheduler and quota kept snapshots."""
    sched, quota = stores
    runtime = DummyRuntime()
    client = Client(log, CLOCK, "alice")
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(RegistrarActor(log, CLOCK).run)
            every = {"writes": True, "every_events": 1}
            await tg.start(QuotaActor(log, CLOCK, snapshots=Snapshots(quota, **every)).run)
            await tg.start(SchedulerActor(log, CLOCK, snapshots=Snapshots(sched, **every)).run)
            await tg.start(AgentActor(log, runtime, CLOCK, agent_config("a1")).run)
            ids = await client.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25), count=8)
            await client.wait_until(lambda s: all(_status(s, i) == "RUNNING" for i in ids))
            for sid in ids[:5]:
                await client.destroy(sid)
            await client.wait_until(lambda s: all(_status(s, i) == "TERMINATED" for i in ids[:5]))
            # The last snapshots saved: each covers the whole log as it ends.
            end, identity = await log.last_seq(), await log.identity()
            for store in stores:
                await store.covering(end, identity)
            tg.cancel_scope.cancel()


@pytest.fixture
async def ran(tmp_path: Path) -> AsyncIterator[tuple[MemoryLog, Archiver, Archive, list[Record]]]:
    log = MemoryLog(retention=Retention(max_events=10))
    stores = (_SaidSnapshots(), _SaidSnapshots())
    await _history(log, stores)
    archive = Archive(tmp_path / "archive", await log.identity())
    before = await _all(log)
    yield log, Archiver(log, log, archive, stores, CLOCK, segment_records=7), archive, before


async def test_the_past_leaves_the_stream_archived_and_the_two_read_as_one(
    ran: tuple[MemoryLog, Archiver, Archive, list[Record]],
) -> None:
    log, archiver, archive, before = ran
    full = await rebuild(log)
    done = await archiver.pass_once()
    assert done is not None and done.written and done.waiting is None
    # Segments of at most 7 records, one after the other, each said on the log.
    assert [s.first_seq for s in done.written] == list(range(1, done.archived_through, 7))
    assert done.archived_through >= len(before) - 10
    said = [r.event for r in await _all(log) if isinstance(r.event, LogArchived)]
    assert [(e.first_seq, e.last_seq, e.sha256) for e in said] == [
        (s.first_seq, s.last_seq, s.sha256) for s in done.written
    ]
    # Only the tenancy, the archive's own, and what the limits keep stay in the stream.
    left = await _all(log)
    assert all(r.subject in subj.KEPT_SUBJECTS for r in left if r.seq <= done.archived_through)
    assert len([r for r in left if r.seq <= len(before)]) <= 10 + sum(
        r.subject in subj.KEPT_SUBJECTS for r in before
    )
    # Archive and stream read as one: every record as it was, in order.
    whole = await _all(ArchivedLog(log, archive))
    assert [(r.seq, r.subject, encode(r.event)) for r in whole[: len(before)]] == [
        (r.seq, r.subject, encode(r.event)) for r in before
    ]
    # An actor with the archive rebuilds what it had; one without and no snapshot cannot.
    again = await rebuild(ArchivedLog(log, archive))
    assert again.folded == again.last_seq == await log.last_seq()  # nothing of it missing
    assert set(again.sessions) == set(full.sessions) and again.ended == full.ended
    assert live_sessions(again) == live_sessions(full)
    assert again.agents == full.agents
    with pytest.raises(HistoryMissing, match="archived out of the stream"):
        await rebuild(log)


async def test_whatif_reads_the_archive_with_the_stream_and_not_part_of_the_past(
    ran: tuple[MemoryLog, Archiver, Archive, list[Record]],
) -> None:
    """``fgpu sim whatif`` on a log whose past was archived: with the archive it reads the
    same requests as before the pass; from the stream alone it refuses rather than tell
    what part of the history would have done as if it were all of it."""
    log, archiver, archive, records = ran
    # Up to the history's last event: the pass appends its own after it.
    end = max(r.event.at for r in records) + timedelta(microseconds=1)
    before = await read_group(log, "default", None, end)
    done = await archiver.pass_once()
    assert done is not None and done.written
    after = await read_group(ArchivedLog(log, archive), "default", None, end)
    assert [a.request.session_id for a in after.arrivals] == [
        a.request.session_id for a in before.arrivals
    ]
    assert len(after.arrivals) == 8
    assert whatif(after, "pack") == whatif(before, "pack")
    with pytest.raises(HistoryMissing, match="not in the archive"):
        await read_group(log, "default", None, None)


async def test_passes_again_archive_nothing_twice(
    ran: tuple[MemoryLog, Archiver, Archive, list[Record]],
) -> None:
    """Each pass goes on from the last (its own ``log.archived`` count against the limits
    too), and stops at what the snapshots cover."""
    log, archiver, _, _ = ran
    written = []
    for _ in range(10):
        done = await archiver.pass_once()
        assert done is not None
        written += done.written
    assert [s.first_seq for s in written] == [1, *(s.last_seq + 1 for s in written[:-1])]
    said = [r.event for r in await _all(log) if isinstance(r.event, LogArchived)]
    assert [(e.first_seq, e.last_seq) for e in said] == [(s.first_seq, s.last_seq) for s in written]
    assert done.written == () and done.waiting is not None  # the snapshots' end reached


async def test_a_segment_written_but_not_said_is_said_before_anything_leaves(
    ran: tuple[MemoryLog, Archiver, Archive, list[Record]],
) -> None:
    """A pass cut off between writing a segment and saying it: the next says it first."""
    log, archiver, archive, before = ran
    await archive.write(before[:5])
    assert not [r for r in await _all(log) if isinstance(r.event, LogArchived)]
    done = await archiver.pass_once()
    assert done is not None
    said = [r.event for r in await _all(log) if isinstance(r.event, LogArchived)]
    assert (said[0].first_seq, said[0].last_seq) == (1, 5)
    assert done.written[0].first_seq == 6


async def test_nothing_leaves_that_a_snapshot_does_not_cover(tmp_path: Path) -> None:
    log = MemoryLog(retention=Retention(max_events=1))
    client = Client(log, CLOCK, "alice")
    await client.create(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25), count=3)
    archive = Archive(tmp_path, await log.identity())
    store = MemorySnapshots()
    done = await Archiver(log, log, archive, [store], CLOCK).pass_once()
    assert done is not None and done.written == () and done.removed_through == 0
    assert done.waiting == "an actor has no snapshot yet"
    store.data = encode_actor_state(ClusterState(last_seq=2, folded=2), await log.identity())
    done = await Archiver(log, log, archive, [store], CLOCK).pass_once()
    assert done is not None and done.archived_through == 2
    assert "cover the log up to 2 only" in (done.waiting or "")


async def test_a_log_that_keeps_everything_is_left_alone(tmp_path: Path) -> None:
    log = MemoryLog()
    archive = Archive(tmp_path, await log.identity())
    assert await Archiver(log, log, archive, [], CLOCK).pass_once() is None
    with pytest.raises(LogError, match="keeps every record"):
        await log.remove_through(1, ())


async def test_the_archive_refuses_a_gap_and_a_segment_that_is_not_one(tmp_path: Path) -> None:
    log = MemoryLog()
    await Client(log, CLOCK, "alice").create(
        image=IMAGE, slots=Slots(cpu=1, mem=GIB, fgpu=25), count=3
    )
    records = await _all(log)
    archive = Archive(tmp_path, "FGPU@x")
    with pytest.raises(ArchiveError, match="do not follow"):
        await archive.write(records[1:])
    await archive.write(records[:1])
    (archive.dir / "seg-000000000003-000000000004.parquet").write_bytes(b"not parquet")
    with pytest.raises(ArchiveError, match="gap"):
        await archive.last_seq()
    (archive.dir / "seg-000000000003-000000000004.parquet").unlink()
    (archive.dir / "seg-000000000002-000000000002.parquet").write_bytes(b"not parquet")
    with pytest.raises(ArchiveError, match="read"):
        async for _ in archive.read(0):
            pass


# ---- on JetStream ----------------------------------------------------------------------


@pytest.fixture
async def retained() -> AsyncIterator[JetStreamLog]:
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        await events.create_or_update_stream(retention=Retention(max_events=5, max_age_s=86400))
        yield events
        await events.close()


async def test_a_stream_made_with_retention_says_it_and_removes_all_but_the_kept(
    retained: JetStreamLog,
) -> None:
    events = retained
    assert await events.retention() == Retention(max_events=5, max_age_s=86400)
    client = Client(events, CLOCK, "alice")
    ids = await client.create(image=IMAGE, slots=Slots(cpu=1, mem=GIB, fgpu=25), count=3)
    s = await rebuild(events)
    await events.append(subj.TENANCY, _archived(1, 1))  # something on a kept subject
    last = await events.last_seq()
    await events.remove_through(last - 1, subj.KEPT_SUBJECTS)
    left = await _all(events)
    assert [r.subject for r in left] == [subj.TENANCY] or [r.seq for r in left][-1] == last
    assert {r.subject for r in left if r.seq < last} <= set(subj.KEPT_SUBJECTS)
    # The server forgot the last sequences of the subjects whose records left: an append
    # expecting none (0) on one of them is taken, as the fold says after log.archived.
    request = subj.request("alice", ids[0])
    assert s.subject_seq[request] > 0
    from services.domain.fold.state import fold

    fold([Record(seq=last + 1, subject=subj.ARCHIVE, event=_archived(1, last - 1))], s)
    assert request not in s.subject_seq
    await client.destroy(ids[0])  # a destroy expects the request subject's last sequence


def _archived(first: int, last: int) -> LogArchived:
    from services.domain.provenance import Provenance, stamp

    return stamp(
        LogArchived,
        Provenance("archiver", CLOCK.now()),
        first_seq=first,
        last_seq=last,
        records=last - first + 1,
        segment="seg",
        sha256="0" * 64,
    )


async def test_retention_is_refused_on_a_stream_made_keeping_everything(log: JetStreamLog) -> None:
    with pytest.raises(LogError, match="keeping every event for good"):
        await log.create_or_update_stream(retention=Retention(max_events=5))
    assert await log.retention() is None


@pytest.mark.parametrize(("requests", "archived"), [(43, 0), (44, 4)])
async def test_a_pass_archives_at_least_a_tenth_of_what_the_stream_keeps(
    tmp_path: Path, requests: int, archived: int
) -> None:
    """Keeping 40, a pass waits for 4 records beyond the limit: the past is not archived
    (and said, for good) record by record as each new one pushes an old one out."""
    log = MemoryLog(retention=Retention(max_events=40))
    client = Client(log, CLOCK, "alice")
    await client.create(image=IMAGE, slots=Slots(cpu=1, mem=GIB, fgpu=25), count=requests)
    covering = MemorySnapshots()
    covering.data = encode_actor_state(
        ClusterState(last_seq=requests, folded=requests), await log.identity()
    )
    archive = Archive(tmp_path, await log.identity())
    done = await Archiver(log, log, archive, [covering], CLOCK).pass_once()
    assert done is not None and done.archived_through == archived
    assert len(done.written) == (1 if archived else 0)
