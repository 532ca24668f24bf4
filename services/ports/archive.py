"""Where the log's past goes before it leaves the stream."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from events import Record

__all__ = ["ArchiveStore", "ArchivedSegment"]


@dataclass(frozen=True)
class ArchivedSegment:
    """Records ``first_seq`` to ``last_seq`` of the log, kept in ``name`` (its file);
    ``sha256`` of their payloads, each preceded by its length."""

    name: str
    first_seq: int
    last_seq: int
    sha256: str


class ArchiveStore(Protocol):
    """An archive of one log, in segments that follow one another from its first record.

    Every method raises only LogError (a subclass for the archive's own failures)."""

    async def last_seq(self) -> int:
        """The last record archived (0: none)."""
        ...

    async def write(self, records: Sequence[Record]) -> ArchivedSegment:
        """Archive ``records``, which follow the last one archived without a gap, as one
        segment, in place only once read back and found equal."""
        ...

    async def segments(self) -> list[ArchivedSegment]:
        """Every segment, in order, each read back for its digest."""
        ...
