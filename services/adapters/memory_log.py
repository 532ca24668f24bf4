"""An EventLog in memory: what the simulator (``services.sim``) and actor tests run on
instead of JetStream.

It keeps the promises of ``services.ports.EventLog`` that JetStreamLog keeps, and both pass
the one contract in ``tests/support/log_contract.py``:

- one global sequence from 1; each subject remembers its last sequence;
- an event id stores once: appending it again returns the first sequence (JetStream forgets
  ids after its 2-minute window; this log remembers them for its whole life), but an
  expected sequence is checked first, so a resend expecting a stale one is a conflict;
- ``expected_last_subject_seq`` guards a single append and an atomic batch, which stores all
  of its events or none; a batch holding an event the log holds (its id) stores none and
  is a conflict, as JetStream refuses a batch holding a message id it has seen;
- payloads go through ``events.codec``, so what comes back was really encoded and decoded,
  and ``publish_raw`` can store a payload that is not an event at all (it reads as Malformed);
- only the stream's subjects (``events.subjects.STREAM_SUBJECTS``) are stored, as a stream
  stores only what it listens to;
- ``follow`` keeps one cursor per durable name, moved when the next batch is asked for.
  Unlike JetStream, which redelivers an unacknowledged batch once its ack wait (30 s) runs
  out, this log hands it out again as soon as the durable is followed anew.

Waiting readers (``tail``, ``follow``) sleep on an ``anyio.Event`` set by every append; they
never poll. Use one ``follow`` iterator per durable at a time.
"""

import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

import anyio

from events import AnyEvent, Record, encode, record_of
from events import subjects as subj
from services.ports import ConcurrencyConflict, EventLog, LogError, Retention, check_batch

__all__ = ["MemoryLog"]


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` one or more."""
    want = pattern.split(".")
    got = subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(got) > i
        if i >= len(got) or (token != "*" and token != got[i]):
            return False
    return len(got) == len(want)


class MemoryLog:
    """EventLog held in this process's memory. ``batch_size`` bounds each batch read hands out."""

    def __init__(
        self,
        *,
        subjects: Sequence[str] = subj.STREAM_SUBJECTS,
        batch_size: int = 1000,
        retention: Retention | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.subjects = tuple(subjects)
        self.batch_size = batch_size
        self._identity = f"memory@{uuid.uuid4().hex}"  # each MemoryLog is a log of its own
        # Sequence n is at index n - 1; None once removed (``remove_through``).
        self._messages: list[tuple[str, bytes] | None] = []
        self._retention = retention
        self._subject_seq: dict[str, int] = {}
        self._seq_of_id: dict[str, int] = {}
        self._acked: dict[str, int] = {}  # durable -> last acknowledged sequence
        self._appended: anyio.Event | None = None  # made by the first waiter, set on append

    # ---- appends --------------------------------------------------------------------------

    async def append(
        self,
        subject: str,
        event: AnyEvent,
        *,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        """Append one event; return its sequence (the first one's, for a known id).

        Raises ConcurrencyConflict if ``expected_last_subject_seq`` is not the subject's last
        sequence, LogError if no subject of the stream matches.
        """
        self._check_subject(subject)
        # As on JetStream, the expectation is checked before the id: a resend that still
        # expects what the first send expected is a conflict.
        self._expect(subject, expected_last_subject_seq)
        first = self._seq_of_id.get(event.id)
        if first is not None:
            return first
        seq = self._store(subject, encode(event))
        self._seq_of_id[event.id] = seq
        return seq

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        """Append ``items`` all or none, in order; return the last one's sequence.

        Raises ConcurrencyConflict (nothing stored) if ``expect_subject``'s last sequence is
        not ``expected_last_subject_seq``, or if the log holds one of its events (by id: as
        JetStream refuses a batch holding a message id it has seen); ValueError for an
        empty or too large batch or one with no event on ``expect_subject``; LogError for
        a subject outside the stream.
        """
        check_batch(items, expect_subject)
        for subject, _ in items:
            self._check_subject(subject)
        ids = [event.id for _, event in items]
        if len(set(ids)) < len(ids) or any(i in self._seq_of_id for i in ids):
            raise ConcurrencyConflict("the batch holds an event the log holds already")
        self._expect(expect_subject, expected_last_subject_seq)
        payloads = [(subject, encode(event)) for subject, event in items]
        seq = 0
        for (subject, payload), event_id in zip(payloads, ids, strict=True):
            seq = self._store(subject, payload, notify=False)
            self._seq_of_id[event_id] = seq
        self._notify()
        return seq

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        """Append independent events, each deduped by its id; their sequences, in order."""
        return [await self.append(subject, event) for subject, event in items]

    async def publish_raw(self, subject: str, payload: bytes) -> int:
        """Store ``payload`` as is, as a client publishing any bytes would; its sequence."""
        self._check_subject(subject)
        return self._store(subject, bytes(payload))

    # ---- reads ----------------------------------------------------------------------------

    async def last_seq(self) -> int:
        return len(self._messages)

    async def count(self, subject: str) -> int:
        return sum(1 for m in self._messages if m is not None and m[0] == subject)

    async def retention(self) -> Retention | None:
        return self._retention

    async def remove_through(self, seq: int, keep: Sequence[str]) -> None:
        if self._retention is None:
            raise LogError("this log keeps every record for good")
        for i in range(min(seq, len(self._messages))):
            m = self._messages[i]
            if m is not None and m[0] not in keep:
                self._messages[i] = None

    async def identity(self) -> str:
        return self._identity

    async def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of the records after ``after`` up to ``until`` (default: the last now).

        With ``until`` beyond the last record, waits for the records up to it.
        """
        end = len(self._messages) if until is None else until
        seq = max(after, 0)
        while seq < end:
            await self._wait_beyond(seq)
            batch, seq = self._batch(seq, end)
            if batch:
                yield batch

    async def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of the records after ``after``, then of each new one as it comes, forever.

        Only records on subjects ``subject`` (a NATS pattern) matches, as the port says.
        """
        seq = max(after, 0)
        while True:
            await self._wait_beyond(seq)
            batch, seq = self._batch(seq, None)
            wanted = [r for r in batch if _matches(subject, r.subject)]
            if wanted:
                yield wanted

    async def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        """Batches of new records through the cursor ``durable``, forever.

        A new durable starts after ``after``; a known one after its last acknowledged record.
        A batch is acknowledged when the next one is asked for. Records at or below ``after``
        are skipped (and acknowledged).
        """
        self._acked.setdefault(durable, max(after, 0))
        while True:
            cursor = self._acked.get(durable, 0)
            await self._wait_beyond(cursor)
            batch, last = self._batch(cursor, None)
            records = [r for r in batch if r.seq > after]
            if records:
                yield records
            # Reached only when the consumer asks for more: the batch was applied.
            self._acked[durable] = max(self._acked.get(durable, 0), last)

    async def delete_consumer(self, durable: str) -> None:
        """Forget the cursor ``durable`` (no error if there is none)."""
        self._acked.pop(durable, None)

    async def close(self) -> None:
        """Nothing to release; for symmetry with JetStreamLog."""

    # ---- internals ------------------------------------------------------------------------

    def _check_subject(self, subject: str) -> None:
        if not any(_matches(pattern, subject) for pattern in self.subjects):
            raise LogError(f"no stream stores {subject}")

    def _expect(self, subject: str, expected: int | None) -> None:
        if expected is None:
            return
        last = self._subject_seq.get(subject, 0)
        if last != expected:
            raise ConcurrencyConflict(
                f"wrong last sequence for {subject}: {last}, expected {expected}"
            )

    def _store(self, subject: str, payload: bytes, *, notify: bool = True) -> int:
        self._messages.append((subject, payload))
        seq = len(self._messages)
        self._subject_seq[subject] = seq
        if notify:
            self._notify()
        return seq

    def _notify(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    async def _wait_beyond(self, seq: int) -> None:
        """Return once a record after ``seq`` is stored."""
        while len(self._messages) <= seq:
            if self._appended is None:
                self._appended = anyio.Event()
            await self._appended.wait()

    def _batch(self, after: int, end: int | None) -> tuple[list[Record], int]:
        """The records after ``after``, at most ``batch_size`` of them, none beyond ``end``
        (those removed left out), and the last sequence looked at."""
        stop = len(self._messages) if end is None else min(end, len(self._messages))
        stop = min(stop, after + self.batch_size)
        found = []
        for seq in range(after + 1, stop + 1):
            m = self._messages[seq - 1]
            if m is not None:
                found.append(record_of(seq, *m))
        return found, stop


if TYPE_CHECKING:
    _conforms: EventLog = MemoryLog()  # mypy holds MemoryLog to the port
