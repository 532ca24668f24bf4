"""The files of virtual folders on this host's storage root: blocking, call from a thread.

A folder is the directory ``<root>/<host>/<vfolder id>`` (``services.domain.vfolders``).
Sessions write into it as they like, symbolic links included, so every path a user gives
is checked twice: as written (relative, no ``..``, no empty or NUL part) and as resolved
(its real path must stay inside the folder's). A file is opened without following a link
in its last part. A link swapped in between the check and the use (a session racing the
storage service) is not caught: the storage service runs with the rights of the folders'
owner on the storage host, never more. Implements ``services.ports.FolderStore``.
"""

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from services.domain.vfolders import Vfolder, folder_dir
from services.ports import Entry, FolderError

__all__ = ["FolderFiles"]


class FolderFiles:
    """The folders under ``root`` (this storage service's: ``<root>/<host>/...``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(Path(root).resolve())

    def where(self, f: Vfolder) -> str:
        return folder_dir(self.root, f)

    def top(self, f: Vfolder) -> Path:
        """The folder's directory, made if it is not there yet."""
        top = Path(folder_dir(self.root, f))
        top.mkdir(parents=True, exist_ok=True)
        return top

    def path(self, f: Vfolder, rel: str) -> Path:
        """``rel`` inside ``f``, checked. Raises FolderError (400: a bad path; 403: it leads
        out of the folder through a link)."""
        parts = rel.strip("/").split("/") if rel.strip("/") else []
        if any(p in ("", ".", "..") or "\0" in p for p in parts) or rel.startswith("/"):
            raise FolderError(400, f"{rel!r} is not a relative path inside the folder")
        top = self.top(f)
        full = top.joinpath(*parts)
        real = Path(os.path.realpath(full.parent if parts else full))
        if real != top and top not in real.parents:
            raise FolderError(403, f"{rel!r} leads out of the folder")
        return full

    def scan(self, f: Vfolder) -> tuple[int, int]:
        """The bytes of the folder's regular files, and how many (links not followed)."""
        total = files = 0
        for dirpath, _dirs, names in os.walk(self.top(f)):
            for name in names:
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    files += 1
        return total, files

    def size(self, f: Vfolder, rel: str) -> int | None:
        """The size of file ``rel``; None if there is none. Raises FolderError (not a file)."""
        try:
            st = os.lstat(self.path(f, rel))
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise FolderError(409, f"{rel!r} is not a file")
        return st.st_size

    def open_at(self, f: Vfolder, rel: str, offset: int) -> BinaryIO:
        """File ``rel`` open for writing at ``offset``, which must be its size (a resumed
        upload) or 0 (a new file, or one replaced: truncated). Raises FolderError."""
        full = self.path(f, rel)
        if not full.name:
            raise FolderError(400, "name a file to write")
        full.parent.mkdir(parents=True, exist_ok=True)
        self.path(f, rel)  # the directories just made did not lead out of it
        # Never through a link, and never blocked on a FIFO a session left there.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(full, flags, 0o644)
        except OSError as e:
            raise FolderError(409, f"{rel!r} cannot be written: {e.strerror}") from e
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise FolderError(409, f"{rel!r} is not a file")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "r+b")
        size = st.st_size
        if offset not in (0, size):
            fh.close()
            raise FolderError(409, f"{rel!r} holds {size} bytes: resume at {size}, or at 0")
        fh.truncate(offset)
        fh.seek(offset)
        return fh

    def remove(self, f: Vfolder, rel: str) -> None:
        """Remove file ``rel`` (none there: nothing). Raises FolderError."""
        if self.size(f, rel) is not None:
            os.unlink(self.path(f, rel))

    def readable(self, f: Vfolder, rel: str) -> str:
        """The real path of file ``rel``, to be sent. Raises FolderError (404: none)."""
        full = self.path(f, rel)
        try:
            st = os.lstat(full)
        except FileNotFoundError as e:
            raise FolderError(404, f"no file {rel!r}") from e
        if not stat.S_ISREG(st.st_mode):
            raise FolderError(409, f"{rel!r} is not a file")
        return str(full)

    def listing(self, f: Vfolder, rel: str) -> list[Entry]:
        """The entries of directory ``rel`` (links shown, not followed). Raises FolderError."""
        full = self.path(f, rel)
        if not full.is_dir() or full.is_symlink():
            raise FolderError(404, f"no directory {rel!r}")
        return sorted(self._entries(full), key=lambda e: e.name)

    @staticmethod
    def _entries(directory: Path) -> Iterator[Entry]:
        with os.scandir(directory) as it:
            for d in it:
                st = d.stat(follow_symlinks=False)
                kind = (
                    "link"
                    if d.is_symlink()
                    else "dir"
                    if d.is_dir(follow_symlinks=False)
                    else "file"
                    if d.is_file(follow_symlinks=False)
                    else "other"
                )
                yield Entry(d.name, kind, st.st_size if kind == "file" else 0, st.st_mtime)

    def purge(self, f: Vfolder) -> bool:
        """Delete the folder's directory and everything in it; whether there was one."""
        top = Path(folder_dir(self.root, f))
        if not top.exists():
            return False
        shutil.rmtree(top)
        return True
