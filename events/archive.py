"""The log's own housekeeping: what left the stream for the archive.

Written by the archiver on ``fgpu.archive`` (a subject kept in the stream for good), after
a segment was written and read back, and before the records it holds are removed from the
stream. The log thus says where its past went; folded, it lets the actors forget the last
sequences of subjects whose records all left (the server forgets them with the records).
"""

from events.base import Event

__all__ = ["LogArchived"]


class LogArchived(Event, frozen=True, kw_only=True, tag="log.archived.v1"):
    """Records ``first_seq`` to ``last_seq`` (``records`` of them: the stream's, as they
    were) are in the archive segment ``segment`` (a file name; ``sha256`` of its
    payloads), and leave the stream, but those on the subjects kept for good."""

    first_seq: int
    last_seq: int
    records: int
    segment: str
    sha256: str
