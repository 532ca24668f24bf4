"""Messages of the log as readers hand them out: decoded records, and raw bulk batches.

Beside the codec because they are its output: a record is a stored message decoded, a
payload that is no event included (``Malformed``), so that one bad message never stops
a reader.
"""

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from events.codec import decode
from events.union import AnyEvent

__all__ = ["Malformed", "RawBatch", "Record", "record_of", "records_of"]

_MALFORMED_KEPT = 4096  # bytes of a payload that is no event kept in its record


class Malformed(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message on the log whose payload is not a valid event.

    It and Record hold immutable values only (events are ``gc=False`` too), so they can be
    in no reference cycle and the garbage collector need not track them: a replay makes
    one per message, and each tracked one brings the next collection nearer.
    """

    error: str
    payload: bytes


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message of the log: its global order ``seq``, its subject and its event."""

    seq: int
    subject: str
    event: AnyEvent | Malformed


class RawBatch(NamedTuple):
    """Stored messages as a bulk reader hands them out, in order, undecoded.

    ``payloads`` are canonical: each is ``events.encode`` of the event it decodes to, or
    the stored bytes where it is no event, so that a store can keep them as they are (the
    reader, in a process of its own, re-encodes them where the store's GIL is precious).
    ``body`` holds the same payloads end to end, payload i from ``offsets[i]`` to
    ``offsets[i + 1]`` (``len(seqs) + 1`` native int64s), to be taken in bulk.
    """

    seqs: list[int]
    subjects: list[str]
    payloads: list[bytes]
    body: bytes
    offsets: bytes


def record_of(seq: int, subject: str, payload: bytes) -> Record:
    """Decode one stored message; a payload that is not a valid event becomes Malformed."""
    try:
        event: AnyEvent | Malformed = decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        event = Malformed(error=str(e), payload=payload[:_MALFORMED_KEPT])
    return Record(seq=seq, subject=subject, event=event)


def records_of(
    seqs: Sequence[int], subjects: Sequence[str], payloads: Sequence[bytes]
) -> list[Record]:
    """``record_of`` of each stored message, in order.

    Decodes in one comprehension, and only where a payload fails message by message: a
    bulk replay's records cost a decode each and little more.
    """
    try:
        return [
            Record(seq=seq, subject=subject, event=decode(payload))
            for seq, subject, payload in zip(seqs, subjects, payloads, strict=True)
        ]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [record_of(*m) for m in zip(seqs, subjects, payloads, strict=True)]
