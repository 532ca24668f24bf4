"""What the watcher beside a log's server asks of its host: the room on the disk under the
server's store, and the server itself (``services.actors.store_watch``)."""

from dataclasses import dataclass
from typing import Protocol

__all__ = ["DiskUsage", "LogServer", "StoreDisk"]


@dataclass(frozen=True)
class DiskUsage:
    free: int  # bytes the server may still write
    total: int  # bytes of the whole disk


class StoreDisk(Protocol):
    path: str  # the store's directory

    def usage(self) -> DiskUsage:
        """The room on the disk under the store now. Raises OSError."""
        ...


class LogServer(Protocol):
    def write_error(self) -> str | None:
        """What the server said when it failed to write for want of room since it last
        started (it keeps failing every write until it starts again), or None."""
        ...

    def running(self) -> bool:
        """Whether the server's process runs."""
        ...

    async def restart(self) -> None:
        """Stop the server (if it runs) and start it again on the same store, port and
        configuration; back once it accepts connections. Raises ServerUnavailable."""
        ...
