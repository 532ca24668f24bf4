"""The files of virtual folders, as the storage service reaches them.

Blocking: callers run each method in a worker thread. Every path is relative to one
folder and is checked by the store (no way out of the folder, links included). Errors::

    FolderError          a path or operation to refuse (``status``: the HTTP status)
    OSError              the filesystem underneath failed
"""

from dataclasses import dataclass
from typing import BinaryIO, Protocol

from services.domain.vfolders import Vfolder

__all__ = ["Entry", "FolderError", "FolderStore"]


class FolderError(Exception):
    """A request the folder cannot answer: ``status`` is the HTTP status it is refused with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    kind: str  # file, dir, link (not followed), other
    size: int
    mtime: float  # unix seconds


class FolderStore(Protocol):
    """The folders of this storage service (``<root>/<host>/<id>``)."""

    def where(self, f: Vfolder) -> str:
        """The folder's directory here (it may not exist yet)."""
        ...

    def scan(self, f: Vfolder) -> tuple[int, int]:
        """The bytes of the folder's regular files, and how many (links not followed)."""
        ...

    def size(self, f: Vfolder, rel: str) -> int | None:
        """The size of file ``rel``; None if there is none. Raises FolderError."""
        ...

    def open_at(self, f: Vfolder, rel: str, offset: int) -> BinaryIO:
        """File ``rel`` open for writing at ``offset``: its size (a resumed upload) or 0 (a
        new file, or one replaced: truncated). Raises FolderError."""
        ...

    def remove(self, f: Vfolder, rel: str) -> None:
        """Remove file ``rel`` (none there: nothing). Raises FolderError."""
        ...

    def readable(self, f: Vfolder, rel: str) -> str:
        """The real path of file ``rel``, to be sent. Raises FolderError (404: none)."""
        ...

    def listing(self, f: Vfolder, rel: str) -> list[Entry]:
        """The entries of directory ``rel``, by name. Raises FolderError."""
        ...

    def purge(self, f: Vfolder) -> bool:
        """Delete the folder's files for good; whether it had a directory here."""
        ...
