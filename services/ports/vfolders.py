"""The files of virtual folders, as the storage service reaches them.

Blocking: callers run each method in a worker thread. Every path is relative to one
folder and is resolved by the store beneath the folder's directory, never through a
link, and with no more rights than the folders' own uid. Errors::

    FolderError          a path or operation to refuse (``status``: the HTTP status)
    OSError              the filesystem underneath failed
"""

from dataclasses import dataclass
from typing import Protocol

from services.domain.tenancy.model import Vfolder

__all__ = ["Entry", "FileState", "FolderError", "FolderStore", "OpenFile", "Upload"]


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


@dataclass(frozen=True, slots=True)
class FileState:
    size: int | None  # the file's bytes; None: no file there
    partial: int | None  # the bytes an upload into it left when it stopped short; None: none


@dataclass(frozen=True, slots=True)
class OpenFile:
    """A regular file of a folder, open for reading: the caller closes ``fd``."""

    fd: int
    size: int
    mtime: float


class Upload(Protocol):
    """An upload under way: its bytes go to a hidden file beside the one named, which
    appears, whole, only on ``commit``."""

    @property
    def replaced(self) -> int:
        """The bytes of the file it replaces (0: none)."""
        ...

    @property
    def partial(self) -> int:
        """The bytes an earlier upload into that file had left (counted in the folder)."""
        ...

    def write(self, data: bytes) -> None:
        """Append ``data``. Raises OSError."""
        ...

    def commit(self) -> int:
        """Put the file in place, whole; its size. Raises FolderError (409: the folder
        changed meanwhile); nothing of the upload is left then."""
        ...

    def discard(self) -> None:
        """Undo this upload: the folder as it was before it."""
        ...

    def keep(self) -> None:
        """Stop here, what was written kept for a resume (the client went away)."""
        ...


class FolderStore(Protocol):
    """The folders of this storage service (``<root>/<host>/<id>``)."""

    def where(self, f: Vfolder) -> str:
        """The folder's directory here (it may not exist yet)."""
        ...

    def scan(self, f: Vfolder) -> tuple[int, int]:
        """The bytes of the folder's regular files, and how many (links not followed)."""
        ...

    def stat(self, f: Vfolder, rel: str) -> FileState:
        """File ``rel``'s size and what a stopped upload into it left. Raises FolderError
        (409: not a file)."""
        ...

    def listing(self, f: Vfolder, rel: str) -> list[Entry]:
        """The entries of directory ``rel``, by name. Raises FolderError (404: none)."""
        ...

    def open_read(self, f: Vfolder, rel: str) -> OpenFile:
        """File ``rel``, open: what is sent is what was checked. Raises FolderError (404:
        none; 409: not a regular file; 403: not the folders' uid's to read)."""
        ...

    def upload(self, f: Vfolder, rel: str, offset: int, replace: bool) -> Upload:
        """An upload into file ``rel``: from 0 (anew), or resuming one that stopped at
        ``offset``; a file there is replaced (on commit) only if ``replace``. Raises
        FolderError (409)."""
        ...

    def remove(self, f: Vfolder, rel: str, recursive: bool) -> str:
        """Remove ``rel`` (a link itself; a directory if empty or ``recursive``); what it
        was (file, dir, link, other). Raises FolderError (404: none; 409: not empty)."""
        ...

    def move(self, f: Vfolder, rel: str, to: str, replace: bool) -> None:
        """Rename ``rel`` to ``to`` within the folder; an existing ``to`` only if
        ``replace``. Raises FolderError (404: no ``rel``; 409: ``to`` exists)."""
        ...

    def purge(self, f: Vfolder) -> bool:
        """Delete the folder's files for good; whether it had a directory here."""
        ...
