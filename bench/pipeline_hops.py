"""Where the pipeline benchmark's latency goes: a task's last dependency's end to its
request, hop by hop, from the events' own stamps and one process's monotonic clock.

- ``stamp``: the end event's own ``at`` (the agent wrote it), on the monotonic clock;
- ``got``: the pipeline actor's ``follow`` handed it the batch holding that end;
- ``sent``: the actor began appending the decision holding the task's request;
- ``stored``: the server stored the request (its own stamp of the message, by this
  host's clock);
- ``seen``: the observer saw the request;

and beside them ``acked``: the append's acknowledgement back at the actor.

``TimedLog`` wraps the actor's log to note ``got``, ``sent`` and ``acked``; it changes
nothing the actor does. ``stored_at`` reads the server's stamps after the run.
"""

import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events import AnyEvent, Record, SessionRequested, SessionTerminated
from events import subjects as subj
from events.records import record_of
from services.adapters.jetstream import JetStreamLog
from services.adapters.jetstream_pull import ack_seqs, ack_time
from services.adapters.jetstream_readers import deliveries, read_consumer
from services.ports import EventLog

__all__ = [
    "HOPS",
    "Hops",
    "Notes",
    "TimedLog",
    "hop_quantiles",
    "monotonic_of",
    "quantile_ms",
    "stored_at",
]

HOPS = ("stamp_to_got", "got_to_sent", "sent_to_stored", "stored_to_seen")

# Wall clock minus monotonic clock, read once: the events' stamps (wall clock, written by
# processes on this host) put on the monotonic clock the hops are timed with.
_WALL_MINUS_MONO = time.time() - time.monotonic()


def monotonic_of(at: datetime) -> float:
    """``at``, a stamp of this host's wall clock, on the monotonic clock
    (``time.monotonic``: the same in every process of the host)."""
    return at.timestamp() - _WALL_MINUS_MONO


@dataclass
class Notes:
    """When (``time.monotonic``) each session's end reached the pipeline actor, and each
    session's request was sent and acknowledged."""

    got: dict[str, float] = field(default_factory=dict)
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"got": self.got, "sent": self.sent}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Notes":
        return cls(data["got"], {k: (v[0], v[1]) for k, v in data["sent"].items()})


class TimedLog:
    """``inner`` as the pipeline actor's log, taking ``Notes`` of what it reads and
    appends; every other call is ``inner``'s."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.notes = Notes()

    async def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        async with aclosing(self.inner.follow(durable, after)) as batches:
            async for batch in batches:
                self._got(batch)
                yield batch

    async def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        # The actor's rebuild (after a failure of the log) reads ends too.
        async with aclosing(self.inner.read(after, until=until)) as batches:
            async for batch in batches:
                self._got(batch)
                yield batch

    def _got(self, batch: list[Record]) -> None:
        now = time.monotonic()
        for r in batch:
            if isinstance(r.event, SessionTerminated):
                self.notes.got.setdefault(r.event.session_id, now)

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        sent = time.monotonic()
        last = await self.inner.append_batch(
            items,
            expect_subject=expect_subject,
            expected_last_subject_seq=expected_last_subject_seq,
        )
        self._note(items, sent)
        return last

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        sent = time.monotonic()
        seqs = await self.inner.append_many(items)
        self._note(items, sent)
        return seqs

    def _note(self, items: Sequence[tuple[str, AnyEvent]], sent: float) -> None:
        """Requests acknowledged now. One whose append failed is not noted, though the
        log may hold it (no answer in time): its task is left out of the hops."""
        acked = time.monotonic()
        for _, e in items:
            if isinstance(e, SessionRequested):
                self.notes.sent.setdefault(e.session_id, (sent, acked))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the rest of the port, untimed


@dataclass
class Hops:
    """Each dependent task's hops (seconds), in ``HOPS`` order; the append's acknowledgement
    back at the actor (``sent_to_acked``); and its latency from the stamps alone, to the
    request's own ``at`` (when the actor decided) and to the server's stamp of the stored
    request (when it was on the log), from its last dependency's end event's own ``at``."""

    hops: dict[str, list[float]] = field(
        default_factory=lambda: {h: [] for h in (*HOPS, "sent_to_acked")}
    )
    stamped: list[float] = field(default_factory=list)
    on_log: list[float] = field(default_factory=list)  # the end's stamp to the request stored
    left_out: int = 0  # tasks whose request's append failed (``TimedLog._note``)

    def add(
        self,
        stamps: tuple[datetime, datetime],
        got: float,
        sent: tuple[float, float],
        stored: float,
        seen: float,
    ) -> None:
        """One task's: its last dependency's end's and its request's own stamps; when that
        end reached the actor, the request was sent and acknowledged, stored (the server's
        stamp) and seen (monotonic clock)."""
        end_stamp, request_stamp = stamps
        points = (monotonic_of(end_stamp), got, sent[0], stored, seen)
        for name, a, b in zip(HOPS, points, points[1:], strict=False):
            self.hops[name].append(b - a)
        self.hops["sent_to_acked"].append(sent[1] - sent[0])
        self.stamped.append((request_stamp - end_stamp).total_seconds())
        self.on_log.append(stored - points[0])


async def stored_at(log: JetStreamLog, after: int) -> dict[str, float]:
    """When the server stored each session request after ``after`` (up to the log's last
    record now), by session, on the monotonic clock: the server's own stamp of the
    message (it runs on this host)."""
    end = await log.last_seq()
    out: dict[str, float] = {}
    client = log.client
    what = "read the stored times"
    async with (
        read_consumer(client, subj.STREAM, subj.STREAM_WILDCARD, after, what) as name,
        aclosing(deliveries(client, subj.STREAM, name, what, wait_s=10)) as batches,
    ):
        async for msgs in batches:
            for msg in msgs:
                seq = ack_seqs(msg.reply)[0]
                e = record_of(seq, msg.subject, msg.data).event
                if isinstance(e, SessionRequested):
                    out[e.session_id] = ack_time(msg.reply) / 1e9 - _WALL_MINUS_MONO
            if seq >= end:
                return out
    return out


def quantile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def hop_quantiles(hops: Hops) -> dict[str, float]:
    """Each hop's p50 and p99 and the stamps' latency, in ms, named for the JSON line."""
    out: dict[str, float] = {"hops_left_out": hops.left_out}
    latencies = [("stamp_end_to_request", hops.stamped), ("stamp_end_to_stored", hops.on_log)]
    for name, values in [*hops.hops.items(), *latencies]:
        if values:
            out[f"{name}_p50_ms"] = quantile_ms(values, 0.5)
            out[f"{name}_p99_ms"] = quantile_ms(values, 0.99)
    return out
