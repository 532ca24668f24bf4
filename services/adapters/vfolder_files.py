"""The files of virtual folders on this host's storage root, through the folder helper.

A folder is the directory ``<root>/<host>/<vfolder id>`` (``services.domain.tenancy.vfolders``).
Sessions write into it as they like, links included, and may race the storage service
with them. So this process never touches a path inside a folder: a helper process of
its own (``vfolder_helper``), under the storage uid, never root, resolves every path
beneath the folder's directory without following a link (``vfolder_beneath``), lists,
stats, renames, unlinks and scans, and hands back the descriptors of the files it opened
(to be sent, or written by an upload), which are used as they are. Each call is a
conversation of its own with the helper (a new socket pair), so calls from many threads
run at once. A helper that died is started again at the next call.

Which uid: the one given; else this process's own when it is not root; else, for root,
the owner of the root when that is not root (an administrator may choose by ``chown``),
else ``STORAGE_UID``. Numbers only: no /etc/passwd entry is needed. Implements
``services.ports.FolderStore``.
"""

import errno
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import structlog

from services.adapters import vfolder_wire as wire
from services.domain.tenancy.model import Vfolder
from services.domain.tenancy.vfolders import STORAGE_UID, folder_dir
from services.ports import Entry, FileState, FolderError, OpenFile

__all__ = ["FolderFiles", "HelperFailed", "storage_owner"]

log = structlog.get_logger()
_HELPER = "services.adapters.vfolder_helper"


class HelperFailed(OSError):
    """The folders' helper could not start (the reason says why: a uid this process may
    not take, a root it cannot make)."""


def storage_owner(root: str, given: tuple[int, int] | None = None) -> tuple[int, int]:
    """The uid and gid the folders under ``root`` are kept as (see the module's
    docstring)."""
    if given is not None:
        return given
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    try:
        st = os.stat(root)
    except OSError:  # not there yet (or not to be: the helper will say why)
        return STORAGE_UID, STORAGE_UID
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else (STORAGE_UID, STORAGE_UID)


class FolderFiles:
    """The folders under ``root`` (``<root>/<host>/...``), kept as ``owner`` (uid, gid;
    see ``storage_owner``). Starts the helper, which makes the root if need be; close it
    (or use ``with``) to stop it. ``resolver``: ``auto`` (openat2 where the kernel has
    it, else the walk), or one of them for tests. Raises OSError if the helper cannot
    start (HelperFailed, saying why)."""

    def __init__(
        self,
        root: str | Path,
        *,
        owner: tuple[int, int] | None = None,
        resolver: str = "auto",
        start_timeout_s: float = 60.0,
    ) -> None:
        self.root = str(Path(root).resolve())
        self.owner = storage_owner(self.root, owner)
        self._resolver = resolver
        self._timeout = start_timeout_s
        self._lock = threading.Lock()
        self._proc, self._control, self.resolver = self._start()

    def _start(self) -> tuple["subprocess.Popen[bytes]", socket.socket, str]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        uid, gid = self.owner
        command = [
            sys.executable, "-P", "-m", _HELPER, "--socket", str(theirs.fileno()),
            "--root", self.root, "--uid", str(uid), "--gid", str(gid),
            "--resolver", self._resolver,
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, cwd="/"
            )
        finally:
            theirs.close()
        try:
            ours.settimeout(self._timeout)
            got = wire.receive(ours)
            ours.settimeout(None)
        except (OSError, wire.WireError) as e:
            got = ({"ok": False, "reason": f"it said nothing ({e})"}, [])
        hello = {"ok": False, "reason": "it exited"} if got is None else got[0]
        if got is not None:
            _close_all(got[1])
        if not hello.get("ok"):
            ours.close()
            _stop(proc)
            raise HelperFailed(
                f"the storage helper did not start under {self.root}: {hello['reason']}"
            )
        log.info("storage.helper", pid=proc.pid, uid=uid, gid=gid, resolver=hello["resolver"])
        return proc, ours, str(hello["resolver"])

    def close(self) -> None:
        """Stop the helper (conversations under way end with it)."""
        with self._lock:
            self._control.close()
            _stop(self._proc)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def helper_pid(self) -> int:
        return self._proc.pid

    def _conversation(self) -> socket.socket:
        """A new socket to the helper (started again first if it died)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                if self._control.fileno() < 0:
                    raise FolderError(503, "the storage service is stopping")
                try:
                    if self._proc.poll() is not None:
                        raise BrokenPipeError("the helper exited")
                    wire.send(self._control, {"op": "talk"}, [theirs.fileno()])
                except OSError:
                    log.warning("storage.helper_restarted", pid=self._proc.pid)
                    self._control.close()
                    _stop(self._proc)
                    self._proc, self._control, self.resolver = self._start()
                    wire.send(self._control, {"op": "talk"}, [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ours

    def _ask(self, op: str, f: Vfolder | None, **args: Any) -> tuple[dict[str, Any], list[int]]:
        try:
            with self._conversation() as sock:
                return _exchange(sock, _request(op, f, **args))
        except _Cut:
            if op not in _READS:
                raise
        # A read cut before its answer (the helper died under it, or was started again
        # as it began) changes nothing: asked once more, on a new conversation.
        with self._conversation() as sock:
            return _exchange(sock, _request(op, f, **args))

    def where(self, f: Vfolder) -> str:
        return folder_dir(self.root, f)

    def scan(self, f: Vfolder) -> tuple[int, int]:
        reply, _ = self._ask("scan", f)
        return int(reply["bytes"]), int(reply["files"])

    def stat(self, f: Vfolder, rel: str) -> FileState:
        reply, _ = self._ask("stat", f, path=rel)
        return FileState(reply["size"], reply["partial"])

    def listing(self, f: Vfolder, rel: str) -> list[Entry]:
        reply, _ = self._ask("list", f, path=rel)
        return [Entry(str(n), str(k), int(s), float(m)) for n, k, s, m in reply["entries"]]

    def open_read(self, f: Vfolder, rel: str) -> OpenFile:
        reply, fds = self._ask("open", f, path=rel)
        if len(fds) != 1:
            _close_all(fds)
            raise FolderError(503, "the storage helper sent no file")
        return OpenFile(fds[0], int(reply["size"]), float(reply["mtime"]))

    def upload(self, f: Vfolder, rel: str, offset: int, replace: bool) -> "_Upload":
        sock = self._conversation()
        try:
            request = _request("upload", f, path=rel, offset=offset, replace=replace)
            reply, fds = _exchange(sock, request)
        except BaseException:
            sock.close()
            raise
        if len(fds) != 1:
            _close_all(fds)
            sock.close()
            raise FolderError(503, "the storage helper sent no file")
        return _Upload(sock, fds[0], int(reply["replaced"]), int(reply["partial"]), replace)

    def remove(self, f: Vfolder, rel: str, recursive: bool) -> str:
        reply, _ = self._ask("remove", f, path=rel, recursive=recursive)
        return str(reply["kind"])

    def move(self, f: Vfolder, rel: str, to: str, replace: bool) -> None:
        self._ask("move", f, path=rel, to=to, replace=replace)

    def purge(self, f: Vfolder) -> bool:
        reply, _ = self._ask("purge", f)
        return bool(reply["purged"])


class _Upload:
    """An upload: written here through the descriptor the helper opened; put in place,
    or undone, by the helper (``services.ports.Upload``)."""

    def __init__(
        self, sock: socket.socket, fd: int, replaced: int, partial: int, replace: bool
    ) -> None:
        self._sock = sock
        self._fd = fd
        self._replace = replace
        self.replaced = replaced
        self.partial = partial
        self._open = True

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            raise FolderError(507 if full else 500, f"the upload stopped: {e.strerror}") from e

    def commit(self) -> int:
        try:
            reply, _ = _exchange(self._sock, {"op": "commit", "replace": self._replace})
            return int(reply["size"])
        finally:
            self.keep()

    def discard(self) -> None:
        if not self._open:
            return
        try:
            _exchange(self._sock, {"op": "discard"})
        except FolderError as e:
            log.warning("storage.discard_failed", error=e.reason)
        finally:
            self.keep()

    def keep(self) -> None:
        if self._open:
            self._open = False
            os.close(self._fd)
            self._sock.close()


def _request(op: str, f: Vfolder | None, **args: Any) -> dict[str, Any]:
    where = {} if f is None else {"host": f.host, "id": f.vfolder_id}
    return {"op": op, **where, **args}


def _exchange(sock: socket.socket, request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The helper's answer to ``request``: its fields and descriptors. Raises FolderError
    (the helper's refusal; 503: it did not answer)."""
    try:
        wire.send(sock, request)
        got = wire.receive(sock)
    except (OSError, wire.WireError) as e:
        raise _Cut(503, f"the storage helper did not answer: {e}") from e
    if got is None:
        raise FolderError(503, "the storage helper stopped")
    reply, fds = got
    if not reply.get("ok"):
        _close_all(fds)
        raise FolderError(int(reply.get("status", 500)), str(reply.get("reason")))
    return reply, fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


_READS = frozenset({"stat", "list", "open", "scan"})  # what asking twice changes nothing of


class _Cut(FolderError):
    """The helper did not answer: the conversation broke before its answer."""


def _stop(proc: "subprocess.Popen[bytes]") -> None:
    """Wait for the helper, which exits once its socket is closed (killed if it does not)."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
