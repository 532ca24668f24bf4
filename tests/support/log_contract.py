"""What every EventLog promises, as one test class to subclass.

A subclass provides two fixtures: ``events``, an EventLog on an empty stream, and
``publish_raw``, a coroutine function that puts any bytes on a subject of the stream as a
client would (no encoding, no dedupe id). The contract does the rest. It is run against
MemoryLog (``test_log_memory.py``) and the real JetStreamLog (``test_log_jetstream.py``).

Waits are bounded by ``anyio.fail_after``; nothing sleeps to synchronise.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime

import anyio
import pytest

from events import AnyEvent, Malformed, Record, SessionAdmitted, encode
from events import subjects as subj
from services.ports import ConcurrencyConflict, EventLog, LogError

__all__ = ["DEADLINE_S", "EventLogContract", "PublishRaw", "admitted", "read_all", "seqs", "take"]

PublishRaw = Callable[[str, bytes], Awaitable[None]]
DEADLINE_S = 10.0  # a bound on any one wait; a healthy log answers in milliseconds
AT = datetime(2024, 1, 1, tzinfo=UTC)
QUOTA_A = subj.quota("alice")
QUOTA_B = subj.quota("bob")
LEDGER = subj.LEDGER


def admitted(session_id: str | None = None, *, event_id: str | None = None) -> SessionAdmitted:
    """A small event with a fresh id (JetStream dedupes ids across the whole stream)."""
    sid = session_id or "s" + uuid.uuid4().hex[:8]
    return SessionAdmitted(
        id=event_id or uuid.uuid4().hex, at=AT, actor="quota", session_id=sid, owner="alice"
    )


async def read_all(events: EventLog, after: int = 0, until: int | None = None) -> list[Record]:
    out: list[Record] = []
    with anyio.fail_after(DEADLINE_S):
        async with aclosing(events.read(after, until=until)) as batches:
            async for batch in batches:
                out.extend(batch)
    return out


async def take(batches: AsyncGenerator[list[Record], None], n: int) -> list[Record]:
    """The next ``n`` records (or more, if the last batch holds more) from ``batches``."""
    out: list[Record] = []
    with anyio.fail_after(DEADLINE_S):
        while len(out) < n:
            out.extend(await anext(batches))
    return out


def seqs(records: list[Record]) -> list[int]:
    return [r.seq for r in records]


class EventLogContract:
    """Subclass as ``Test...`` and define the ``events`` and ``publish_raw`` fixtures."""

    @pytest.fixture
    def events(self) -> EventLog:
        raise NotImplementedError("a subclass provides an EventLog on an empty stream")

    @pytest.fixture
    def publish_raw(self) -> PublishRaw:
        raise NotImplementedError("a subclass provides a way to publish raw bytes")

    @pytest.fixture
    def made_anew(self) -> Callable[[], Awaitable[EventLog]]:
        raise NotImplementedError("a subclass provides a way to delete and create the log")

    @pytest.mark.anyio
    async def test_a_log_keeps_its_identity_until_made_anew(
        self, events: EventLog, made_anew: Callable[[], Awaitable[EventLog]]
    ) -> None:
        first = await events.identity()
        await events.append(QUOTA_A, admitted())
        assert await events.identity() == first  # what it holds does not change it
        again = await made_anew()
        assert await again.last_seq() == 0
        assert await again.identity() != first

    # ---- appends --------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_an_empty_log(self, events: EventLog) -> None:
        assert await events.last_seq() == 0
        assert await read_all(events) == []

    @pytest.mark.anyio
    async def test_sequences_increase_and_events_come_back(self, events: EventLog) -> None:
        sent: list[tuple[str, AnyEvent]] = [
            (QUOTA_A, admitted()),
            (LEDGER, admitted()),
            (QUOTA_A, admitted()),
        ]
        got = [await events.append(subject, e) for subject, e in sent]
        assert got == sorted(got) and len(set(got)) == 3
        assert await events.last_seq() == got[-1]
        records = await read_all(events)
        assert seqs(records) == got
        assert [(r.subject, r.event) for r in records] == sent

    @pytest.mark.anyio
    async def test_an_event_id_is_stored_once(self, events: EventLog) -> None:
        e = admitted()
        first = await events.append(QUOTA_A, e)
        assert await events.append(QUOTA_A, e) == first
        assert await events.append(QUOTA_B, e) == first  # the id, not the subject, dedupes
        assert await events.last_seq() == first
        assert seqs(await read_all(events)) == [first]

    @pytest.mark.anyio
    async def test_the_expectation_is_checked_before_the_dedupe(self, events: EventLog) -> None:
        """As JetStream does: a resend that expects what it expected the first time is a
        conflict (though its event is stored); one that expects the subject's last sequence
        is a duplicate and gets the first sequence back."""
        e = admitted()
        first = await events.append(QUOTA_A, e, expected_last_subject_seq=0)
        with pytest.raises(ConcurrencyConflict):
            await events.append(QUOTA_A, e, expected_last_subject_seq=0)
        assert await events.append(QUOTA_A, e, expected_last_subject_seq=first) == first
        assert await events.last_seq() == first

    @pytest.mark.anyio
    async def test_expected_last_subject_seq(self, events: EventLog) -> None:
        first = await events.append(QUOTA_A, admitted(), expected_last_subject_seq=0)
        with pytest.raises(ConcurrencyConflict):
            await events.append(QUOTA_A, admitted(), expected_last_subject_seq=0)
        other = await events.append(QUOTA_B, admitted(), expected_last_subject_seq=0)
        # Another subject's appends do not move this one's last sequence.
        second = await events.append(QUOTA_A, admitted(), expected_last_subject_seq=first)
        assert first < other < second
        with pytest.raises(ConcurrencyConflict):
            await events.append(QUOTA_A, admitted(), expected_last_subject_seq=first)
        with pytest.raises(ConcurrencyConflict):
            await events.append(QUOTA_A, admitted(), expected_last_subject_seq=second + 5)
        assert await events.last_seq() == second
        assert isinstance(ConcurrencyConflict(), LogError)

    @pytest.mark.anyio
    async def test_append_many(self, events: EventLog) -> None:
        e = admitted()
        items: list[tuple[str, AnyEvent]] = [(QUOTA_A, e), (QUOTA_B, admitted()), (LEDGER, e)]
        got = await events.append_many(items)
        assert len(got) == 3
        assert got[0] < got[1] and got[2] == got[0]
        records = await read_all(events)
        assert [(r.subject, r.event) for r in records] == [items[0], items[1]]

    @pytest.mark.anyio
    async def test_a_subject_outside_the_stream_is_refused(self, events: EventLog) -> None:
        with pytest.raises(LogError):
            await events.append("elsewhere.x", admitted())

    # ---- atomic batches -------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_a_batch_comes_back_in_order(self, events: EventLog) -> None:
        await events.append(QUOTA_A, admitted())
        items: list[tuple[str, AnyEvent]] = [
            (LEDGER, admitted()),
            (QUOTA_B, admitted()),
            (subj.agent("a1"), admitted()),
            (QUOTA_A, admitted()),
        ]
        last = await events.append_batch(items, expect_subject=LEDGER, expected_last_subject_seq=0)
        records = await read_all(events, after=1)
        assert seqs(records) == [2, 3, 4, 5]
        assert last == 5
        assert [(r.subject, r.event) for r in records] == items

    @pytest.mark.anyio
    async def test_a_batch_expects_its_subjects_last_seq(self, events: EventLog) -> None:
        batch: list[tuple[str, AnyEvent]] = [(LEDGER, admitted()), (LEDGER, admitted())]
        last = await events.append_batch(batch, expect_subject=LEDGER, expected_last_subject_seq=0)
        await events.append(QUOTA_A, admitted())
        again: list[tuple[str, AnyEvent]] = [(LEDGER, admitted()), (QUOTA_A, admitted())]
        newest = await events.append_batch(
            again, expect_subject=LEDGER, expected_last_subject_seq=last
        )
        assert newest == last + 3

    @pytest.mark.anyio
    async def test_a_batch_with_a_stale_expectation_stores_nothing(self, events: EventLog) -> None:
        await events.append(LEDGER, admitted())
        await events.append(QUOTA_A, admitted())
        before = await read_all(events)
        for expected in (0, 2, 9):
            stale: list[tuple[str, AnyEvent]] = [
                (LEDGER, admitted()),
                (QUOTA_A, admitted()),
                (LEDGER, admitted()),
            ]
            with pytest.raises(ConcurrencyConflict):
                await events.append_batch(
                    stale, expect_subject=LEDGER, expected_last_subject_seq=expected
                )
            single: list[tuple[str, AnyEvent]] = [(LEDGER, admitted())]
            with pytest.raises(ConcurrencyConflict):
                await events.append_batch(
                    single, expect_subject=LEDGER, expected_last_subject_seq=expected
                )
        assert await events.last_seq() == 2
        assert await read_all(events) == before
        # The log still takes a batch with the right expectation.
        fine: list[tuple[str, AnyEvent]] = [(LEDGER, admitted())]
        assert (
            await events.append_batch(fine, expect_subject=LEDGER, expected_last_subject_seq=1) == 3
        )

    @pytest.mark.anyio
    async def test_a_batch_s_events_are_deduped_by_their_ids(self, events: EventLog) -> None:
        """Every event of a batch carries its id: appended again on its own it is not
        stored twice, and a batch holding it, sent again with any expectation (the one it
        had, or the subject's last), stores nothing."""
        first, second = admitted(), admitted()
        batch: list[tuple[str, AnyEvent]] = [(LEDGER, first), (QUOTA_A, second)]
        last = await events.append_batch(batch, expect_subject=LEDGER, expected_last_subject_seq=0)
        assert await events.append(QUOTA_B, second) == last
        ledger = last - 1
        for expected in (0, ledger):
            with pytest.raises(ConcurrencyConflict):
                await events.append_batch(
                    batch, expect_subject=LEDGER, expected_last_subject_seq=expected
                )
            mixed: list[tuple[str, AnyEvent]] = [(LEDGER, admitted()), (QUOTA_A, second)]
            with pytest.raises(ConcurrencyConflict):
                await events.append_batch(
                    mixed, expect_subject=LEDGER, expected_last_subject_seq=expected
                )
            alone: list[tuple[str, AnyEvent]] = [(LEDGER, first)]
            with pytest.raises(ConcurrencyConflict):
                await events.append_batch(
                    alone, expect_subject=LEDGER, expected_last_subject_seq=expected
                )
        assert await events.last_seq() == last
        assert [r.event for r in await read_all(events)] == [first, second]

    @pytest.mark.anyio
    async def test_a_batch_must_hold_something_on_its_subject(self, events: EventLog) -> None:
        with pytest.raises(ValueError):
            await events.append_batch([], expect_subject=LEDGER, expected_last_subject_seq=0)
        with pytest.raises(ValueError):
            await events.append_batch(
                [(QUOTA_A, admitted())], expect_subject=LEDGER, expected_last_subject_seq=0
            )
        assert await events.last_seq() == 0

    # ---- reads ----------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_read_bounds(self, events: EventLog) -> None:
        for _ in range(5):
            await events.append(QUOTA_A, admitted())
        assert seqs(await read_all(events)) == [1, 2, 3, 4, 5]
        assert seqs(await read_all(events, after=1, until=3)) == [2, 3]
        assert seqs(await read_all(events, after=3)) == [4, 5]
        assert seqs(await read_all(events, until=1)) == [1]
        assert seqs(await read_all(events, after=2, until=2)) == []
        assert seqs(await read_all(events, after=4, until=2)) == []
        assert seqs(await read_all(events, after=5)) == []
        assert seqs(await read_all(events, after=5, until=5)) == []

    @pytest.mark.anyio
    async def test_read_ends_at_the_last_record_when_it_started(self, events: EventLog) -> None:
        await events.append(QUOTA_A, admitted())
        await events.append(QUOTA_A, admitted())
        out: list[Record] = []
        with anyio.fail_after(DEADLINE_S):
            async with aclosing(events.read()) as batches:
                async for batch in batches:
                    if not out:
                        await events.append(QUOTA_A, admitted())  # too late for this read
                    out.extend(batch)
        assert seqs(out) == [1, 2]

    @pytest.mark.anyio
    async def test_tail_yields_what_is_appended_after_it_started(self, events: EventLog) -> None:
        first = await events.append(QUOTA_A, admitted())
        send, receive = anyio.create_memory_object_stream[list[Record]](100)

        async def tailer() -> None:
            async with send, aclosing(events.tail(0)) as batches:
                async for batch in batches:
                    await send.send(batch)

        async with receive, anyio.create_task_group() as tg:
            tg.start_soon(tailer)
            with anyio.fail_after(DEADLINE_S):
                assert seqs(await receive.receive()) == [first]
                later = [(QUOTA_B, admitted()) for _ in range(3)]
                sent = [await events.append(s, e) for s, e in later]
                got: list[Record] = []
                while len(got) < 3:
                    got.extend(await receive.receive())
            assert seqs(got) == sent
            assert [r.event for r in got] == [e for _, e in later]
            tg.cancel_scope.cancel()

    @pytest.mark.anyio
    async def test_tail_starts_after_its_argument(self, events: EventLog) -> None:
        for _ in range(3):
            await events.append(QUOTA_A, admitted())
        async with aclosing(events.tail(2)) as batches:
            assert seqs(await take(batches, 1)) == [3]

    @pytest.mark.anyio
    @pytest.mark.parametrize(
        "pattern",
        [QUOTA_A, "fgpu.agent.*.s.*", "fgpu.agent.>"],
        ids=["one-subject", "token-wildcards", "tail-wildcard"],
    )
    async def test_a_tail_narrowed_to_a_subject_yields_its_records_alone(
        self, events: EventLog, pattern: str
    ) -> None:
        """Records on matching subjects, stored before the tail began (after its argument)
        and after, among others: each comes, in order, and nothing else."""
        on = {
            QUOTA_A: {QUOTA_A},
            "fgpu.agent.*.s.*": {subj.agent_session("a1", "s1"), subj.agent_session("a2", "s2")},
            "fgpu.agent.>": {
                subj.agent("a1"),
                subj.agent_session("a1", "s1"),
                subj.agent_session("a2", "s2"),
            },
        }[pattern]
        mixed = [
            QUOTA_A,
            subj.agent_session("a1", "s1"),
            LEDGER,
            subj.agent("a1"),
            QUOTA_B,
            subj.agent_session("a2", "s2"),
            subj.request("alice", "s1"),
        ]

        async def append(subjects: list[str]) -> list[tuple[int, str, AnyEvent]]:
            stored = []
            for subject in subjects:
                event = admitted()
                stored.append((await events.append(subject, event), subject, event))
            return stored

        first = await append(mixed)
        after = 1  # the first record is left out, whether it matches or not
        wanted = [m for m in first if m[0] > after and m[1] in on]
        async with aclosing(events.tail(after, subject=pattern)) as batches:
            got = await take(batches, len(wanted))
            later = await append(mixed * 2)
            wanted += [m for m in later if m[1] in on]
            got += await take(batches, len(wanted) - len(got))
            # Nothing unwanted comes between: the next record is one more on a subject of it.
            (last,) = await append([sorted(on)[0]])
            got += await take(batches, 1)
        assert [(r.seq, r.subject, r.event) for r in got] == [*wanted, last]

    @pytest.mark.anyio
    async def test_count_is_of_one_subject(self, events: EventLog) -> None:
        assert await events.count(LEDGER) == 0
        for subject in (LEDGER, QUOTA_A, LEDGER, subj.agent("a1"), LEDGER):
            await events.append(subject, admitted())
        assert await events.count(LEDGER) == 3
        assert await events.count(QUOTA_A) == 1
        assert await events.count(QUOTA_B) == 0

    # ---- durable cursors ------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_follow_hands_out_new_records(self, events: EventLog) -> None:
        async with aclosing(events.follow("worker")) as batches:
            sent: list[int] = []
            got: list[Record] = []
            for n in range(3):
                sent.append(await events.append(QUOTA_A, admitted()))
                got.extend(await take(batches, 1))
                assert seqs(got) == sent, n

    @pytest.mark.anyio
    async def test_follow_resumes_after_the_last_acknowledged_batch(self, events: EventLog) -> None:
        for _ in range(3):
            await events.append(QUOTA_A, admitted())
        async with aclosing(events.follow("worker")) as batches:
            assert seqs(await take(batches, 3)) == [1, 2, 3]
            await events.append(QUOTA_A, admitted())
            await events.append(QUOTA_A, admitted())
            # Asking for this batch acknowledged 1-3; 4-5 stay unacknowledged.
            assert seqs(await take(batches, 2)) == [4, 5]
        newest = await events.append(QUOTA_A, admitted())
        async with aclosing(events.follow("worker")) as batches:
            again = await take(batches, 1)
        # Acknowledged records never come again; 4 and 5 may (at once, or after an ack wait).
        assert min(seqs(again)) > 3
        assert set(seqs(again)) <= {4, 5, newest}

    @pytest.mark.anyio
    async def test_follow_skips_records_at_or_below_after(self, events: EventLog) -> None:
        for _ in range(4):
            await events.append(QUOTA_A, admitted())
        async with aclosing(events.follow("fresh", after=2)) as batches:
            assert seqs(await take(batches, 2)) == [3, 4]
        # A known durable, resumed with an ``after`` beyond what it acknowledged.
        newest = await events.append(QUOTA_A, admitted())
        async with aclosing(events.follow("fresh", after=4)) as batches:
            assert seqs(await take(batches, 1)) == [newest]

    @pytest.mark.anyio
    async def test_durables_are_independent(self, events: EventLog) -> None:
        await events.append(QUOTA_A, admitted())
        async with aclosing(events.follow("one")) as one:
            assert seqs(await take(one, 1)) == [1]
            await events.append(QUOTA_A, admitted())
            assert seqs(await take(one, 1)) == [2]
        async with aclosing(events.follow("two")) as two:
            assert seqs(await take(two, 2)) == [1, 2]

    # ---- what is not an event -------------------------------------------------------------

    @pytest.mark.anyio
    async def test_a_raw_payload_comes_back_malformed_or_decoded(
        self, events: EventLog, publish_raw: PublishRaw
    ) -> None:
        good = admitted()
        garbage = [
            ("fgpu.req.alice.s1", b"{not json"),
            ("fgpu.req.alice.s2", b'{"type": "session.exploded.v1", "id": "x"}'),
            ("fgpu.req.alice.s3", b'{"type": "session.admitted.v1"}'),
        ]
        for subject, payload in garbage:
            await publish_raw(subject, payload)
        await publish_raw(QUOTA_A, encode(good))
        async with aclosing(events.tail(0)) as batches:
            records = await take(batches, 4)
        assert seqs(records) == [1, 2, 3, 4]
        for r, (subject, payload) in zip(records, garbage, strict=False):
            assert r.subject == subject
            assert isinstance(r.event, Malformed)
            assert r.event.payload == payload
            assert r.event.error
        assert records[3].subject == QUOTA_A
        assert records[3].event == good
        assert seqs(await read_all(events)) == [1, 2, 3, 4]
