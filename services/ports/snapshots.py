"""Where an actor keeps its latest snapshot, so that it starts from it and the log's tail."""

from datetime import datetime
from typing import Protocol

__all__ = ["SnapshotStore"]


class SnapshotStore(Protocol):
    """One snapshot, replaced whole by each save: the latest one wins.

    Every method raises only LogError for a failure of the store underneath; a caller
    that catches it does without (a full replay, a snapshot not kept this time).
    """

    async def load(self) -> bytes | None:
        """The latest snapshot saved; None when none was (or the store does not exist).
        Raises SnapshotCorrupt (a LogError) when what is stored is not what was saved,
        found by checking it, without waiting for what is not there."""
        ...

    async def save(self, data: bytes) -> None:
        """Keep ``data`` as the latest snapshot, in place of the one before, all or none."""
        ...

    async def saved_at(self) -> datetime | None:
        """When the latest snapshot was saved; None when none was."""
        ...
