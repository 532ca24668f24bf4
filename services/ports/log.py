"""The event log every state change goes through, its optional bulk read and retention."""

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from events import AnyEvent, RawBatch, Record
from events import subjects as subj

__all__ = ["MAX_BATCH", "BulkLog", "EventLog", "RetainingLog", "Retention", "check_batch"]

MAX_BATCH = 1000  # events in one atomic batch: the server's limit (nats.conf)


def check_batch(items: Sequence[tuple[str, AnyEvent]], expect_subject: str) -> None:
    """Raise ValueError for a batch ``EventLog.append_batch`` refuses: empty, larger than
    MAX_BATCH, or with no event on ``expect_subject``."""
    if not items:
        raise ValueError("an empty batch")
    if len(items) > MAX_BATCH:
        raise ValueError(f"a batch holds at most {MAX_BATCH} events, got {len(items)}")
    if all(subject != expect_subject for subject, _ in items):
        raise ValueError(f"no event of the batch is on {expect_subject}")


class EventLog(Protocol):
    """The append-only log every state change goes through.

    Every method raises only LogError (or a subclass) for a failure of the log: a caller
    that catches it can rebuild and retry, whatever the transport underneath.
    """

    async def append(
        self,
        subject: str,
        event: AnyEvent,
        *,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        """Append one event; return its sequence.

        The event id dedupes: appending the same event twice stores it once and returns
        the first sequence. With ``expected_last_subject_seq`` the append succeeds only if
        the subject's last sequence is that (0: no message yet), else ConcurrencyConflict.
        """
        ...

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        """Append ``items`` atomically, all or none; return the last one's sequence.

        Succeeds only if ``expect_subject``'s last sequence is ``expected_last_subject_seq``
        when the batch is stored, else ConcurrencyConflict and nothing is stored. Each
        event's id dedupes as in ``append``, but a batch does not return a first sequence:
        one holding an event the log holds already stores nothing and raises
        ConcurrencyConflict (so a batch sent again is never stored twice, whatever it
        expects).
        """
        ...

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        """Append independent events, pipelined, each deduped by its id; not atomic."""
        ...

    async def last_seq(self) -> int:
        """The sequence of the newest message (0 when empty)."""
        ...

    async def count(self, subject: str) -> int:
        """How many messages the log holds on ``subject`` (one subject, no wildcard): a
        reader of that subject alone knows it has caught up once it has read as many."""
        ...

    async def identity(self) -> str:
        """What tells this log from another: the same for as long as the log lives, and
        another once it is made anew (deleted and created again), whatever it then holds.
        A reader that keeps what it made of a log (projections) keeps this beside it."""
        ...

    def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of records after ``after`` up to ``until`` (default: the end now), in order."""
        ...

    def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of records after ``after``, then new ones as they come, forever.

        ``subject``, a NATS subject or pattern (``*`` one token, a final ``>`` the rest),
        narrows it to the records on matching subjects: each of them, in order, none
        left out; a batch is never empty. The default is every subject of the stream.
        """
        ...

    def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        """Batches of new records forever, through a durable cursor named ``durable``.

        Records at or below ``after`` are skipped; a batch is acknowledged when the next
        one is asked for, so a crash redelivers at most the batch in hand.
        """
        ...


@runtime_checkable
class BulkLog(Protocol):
    """A log with a fast path for long replays: stored messages handed out undecoded.

    Optional: a reader checks for it and falls back to ``EventLog.read`` when the log has
    none, or when ``read_raw`` raises BulkReadUnavailable (before its first batch or
    after some: the batches handed out stay good, reading goes on in order after them).
    """

    def read_raw(
        self, after: int = 0, *, until: int | None = None, batch: int = 10_000
    ) -> AsyncGenerator[RawBatch, None]:
        """Stored messages after ``after`` up to ``until`` (default: the last now), in
        order, at most ``batch`` at a time, with canonical payloads (``RawBatch``)."""
        ...


@dataclass(frozen=True)
class Retention:
    """How much of its history a log keeps in the stream: at most ``max_events`` records,
    none older than ``max_age_s`` seconds (None: no such limit). What is beyond is
    archived, and only then removed (``services.actors.archiver``)."""

    max_events: int | None = None
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_events is not None and self.max_events < 1:
            raise ValueError("a log keeps at least 1 event in its stream")
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise ValueError("a log keeps its events for more than 0 seconds")


@runtime_checkable
class RetainingLog(Protocol):
    """A log whose past can leave the stream once archived. Optional: a log that keeps
    everything (made refusing purges) has none, or answers None."""

    async def retention(self) -> Retention | None:
        """The log's limits; None when it keeps every record for good."""
        ...

    async def remove_through(self, seq: int, keep: Sequence[str]) -> None:
        """Remove the records up to ``seq``, but those on the subjects ``keep`` (exact
        subjects, kept for good: they are few, and read from the start by those who fold
        only them). Raises LogError."""
        ...
