"""The storage service's folder helper: a process of its own that does every filesystem
operation on the virtual folders, under the storage uid, and hands open descriptors back.

Started by ``FolderFiles`` (``python -m services.adapters.vfolder_helper``) as the
service's own user. Before it reads any request it makes the folders' root (0700),
gives it (and the storage hosts' and folders' directories right under it, never what is
inside them) to the storage uid, opens it, and then, if it runs as root, drops to that
uid and gid for good (no supplementary groups; getting root back is checked to fail).
From then on it reaches the folders only through that open root, beneath it and never
through a link (``vfolder_beneath``), with no more rights than the storage uid: even a
mistake in the walk could not read, write or delete what that uid may not.

It talks over the Unix socket it was given (``--socket FD``): first a hello (its uid,
gid and how it resolves paths, or why it could not start), then, for each conversation
the service opens, the descriptor of a new socket on which it answers requests one after
another (``vfolder_wire``), each conversation in a thread of its own. It exits when the
service closes the first socket (or dies). Standard library only, all imported before
the privileges go.
"""

import argparse
import contextlib
import os
import resource
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from services.adapters import vfolder_wire as wire
from services.adapters.vfolder_beneath import (
    Beneath,
    Refused,
    Upload,
    kernel_resolves,
    open_top,
    purge,
)

__all__ = ["main"]

_ADOPT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
Reply = tuple[dict[str, Any], list[int]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vfolder_helper")
    p.add_argument("--socket", type=int, required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--uid", type=int, required=True)
    p.add_argument("--gid", type=int, required=True)
    p.add_argument("--resolver", choices=("auto", "openat2", "walk"), default="auto")
    args = p.parse_args(argv)
    control = socket.socket(fileno=args.socket)
    os.umask(0o077)
    try:
        root = _prepare(args.root, args.uid, args.gid)
        _drop(args.uid, args.gid)
        kernel = _resolver(root, args.resolver)
        if not os.path.isdir("/proc/self/fd"):
            raise OSError("no /proc/self/fd here: files could not be opened by descriptor")
    except (OSError, ValueError) as e:
        wire.send(control, {"ok": False, "reason": str(e)})
        return 1
    _raise_open_files_limit()
    resolver = "openat2" if kernel else "walk"
    wire.send(control, {"ok": True, "uid": os.geteuid(), "gid": os.getegid(), "resolver": resolver})
    _serve(control, root, kernel)
    return 0


def _prepare(path: str, uid: int, gid: int) -> int:
    """The folders' root, made and opened, 0700 and the storage uid's, as are the
    directories of storage hosts and folders right under it (given to it by a root
    service: an agent or an older fgpu may have made them). Raises OSError."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    _own(root, uid, gid)
    if os.geteuid() == 0:
        for host in _dirs(root):
            with _Opened(host, root) as h:
                if h.fd is None:
                    continue
                _own(h.fd, uid, gid)
                for folder in _dirs(h.fd):
                    with _Opened(folder, h.fd) as f:
                        _own(f.fd, uid, gid)
    return root


def _dirs(d: int) -> list[str]:
    with os.scandir(d) as it:
        return [e.name for e in it if e.is_dir(follow_symlinks=False)]


class _Opened:
    """Directory ``name`` in ``d``, never a link, open for the block (None if it went
    or is no directory any more)."""

    def __init__(self, name: str, d: int) -> None:
        try:
            self.fd: int | None = os.open(name, _ADOPT_FLAGS, dir_fd=d)
        except OSError:
            self.fd = None

    def __enter__(self) -> "_Opened":
        return self

    def __exit__(self, *_: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _own(fd: int | None, uid: int, gid: int) -> None:
    """The directory ``fd``: the storage uid's (when this process may say so), 0700."""
    if fd is None:
        return
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (uid, gid) and os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    if stat.S_IMODE(st.st_mode) & 0o077 and (os.geteuid() in (0, st.st_uid)):
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)


def _drop(uid: int, gid: int) -> None:
    """Run as ``uid``/``gid`` from now on, for good. Raises OSError."""
    if uid == 0:
        raise OSError("the storage uid may not be 0 (root)")
    if os.geteuid() != 0:
        if (os.geteuid(), os.getegid()) != (uid, gid):
            raise OSError(
                f"only root may run the folders as uid {uid}:{gid} "
                f"(this service runs as {os.geteuid()}:{os.getegid()})"
            )
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(f"could not become {uid}:{gid}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise OSError("root could be taken back after the drop")


def _resolver(root: int, asked: str) -> bool:
    """Whether paths are resolved by openat2 (else walked). Raises OSError when openat2
    is asked for and this kernel has none."""
    if asked == "walk":
        return False
    found = kernel_resolves(root)
    if asked == "openat2" and not found:
        raise OSError("openat2 was asked for and this kernel does not have it")
    return found


def _raise_open_files_limit() -> None:
    """A deep walk holds a descriptor a level, in every conversation at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        if want > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _serve(control: socket.socket, root: int, kernel: bool) -> None:
    """A thread per conversation the service opens, until it closes ``control``."""
    while True:
        got = wire.receive(control)
        if got is None:
            return
        _, fds = got
        for fd in fds:
            sock = socket.socket(fileno=fd)
            talk = _Conversation(sock, root, kernel)
            threading.Thread(target=talk.run, daemon=True).start()


class _Conversation:
    """Requests on one socket, answered in turn; an upload lives as long as it."""

    def __init__(self, sock: socket.socket, root: int, kernel: bool) -> None:
        self.sock = sock
        self.root = root
        self.kernel = kernel
        self.upload: Upload | None = None
        self.ops: dict[str, Callable[[dict[str, Any]], Reply]] = {
            "list": self.listing,
            "stat": self.stat,
            "open": self.open,
            "upload": self.begin,
            "commit": self.commit,
            "discard": self.discard,
            "remove": self.remove,
            "move": self.move,
            "scan": self.scan,
            "purge": self.purge,
        }

    def run(self) -> None:
        try:
            while (got := wire.receive(self.sock)) is not None:
                request, fds = got
                for fd in fds:
                    os.close(fd)
                reply, out = self.answer(request)
                try:
                    wire.send(self.sock, reply, out)
                finally:
                    for fd in out:
                        os.close(fd)
        except (OSError, wire.WireError):
            pass  # the service went away within the conversation
        finally:
            if self.upload is not None:
                self.upload.close()
            self.sock.close()

    def answer(self, request: dict[str, Any]) -> Reply:
        op = self.ops.get(str(request.get("op")))
        if op is None:
            return {"ok": False, "status": 400, "reason": f"no operation {request.get('op')!r}"}, []
        try:
            reply, fds = op(request)
        except Refused as e:
            return {"ok": False, "status": e.status, "reason": e.reason}, []
        except (OSError, KeyError, TypeError, ValueError) as e:
            print(f"vfolder_helper: {request.get('op')}: {e!r}", file=sys.stderr)
            return {"ok": False, "status": 500, "reason": f"the storage helper failed: {e}"}, []
        return {"ok": True, **reply}, fds

    @contextlib.contextmanager
    def _folder(self, r: dict[str, Any], *, create: bool = False) -> Iterator[Beneath | None]:
        """The folder the request names, its directory open for the block; None if it
        has none here yet."""
        top = open_top(self.root, r["host"], r["id"], create=create)
        try:
            yield None if top is None else Beneath(top, kernel=self.kernel)
        finally:
            if top is not None:
                os.close(top)

    def listing(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            if folder is None:
                if r["path"].strip("/"):
                    raise Refused(404, f"no directory {r['path']!r}")
                return {"entries": []}, []
            return {"entries": folder.listing(r["path"])}, []

    def stat(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            size, partial = (None, None) if folder is None else folder.stat(r["path"])
        return {"size": size, "partial": partial}, []

    def open(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            if folder is None:
                raise Refused(404, f"no file {r['path']!r}")
            fd = folder.open_read(r["path"])
        st = os.fstat(fd)
        return {"size": st.st_size, "mtime": st.st_mtime}, [fd]

    def begin(self, r: dict[str, Any]) -> Reply:
        if self.upload is not None:
            raise Refused(400, "one upload a conversation")
        with self._folder(r, create=True) as folder:
            assert folder is not None  # made if missing
            self.upload = up = folder.upload(r["path"], int(r["offset"]), bool(r["replace"]))
        # The service writes through its copy; this one stays for the sync and the rename.
        return {"replaced": up.replaced, "partial": up.partial}, [os.dup(up.fd)]

    def commit(self, r: dict[str, Any]) -> Reply:
        if self.upload is None:
            raise Refused(400, "no upload to commit")
        return {"size": self.upload.commit(bool(r["replace"]))}, []

    def discard(self, _: dict[str, Any]) -> Reply:
        if self.upload is not None:
            self.upload.discard()
        return {}, []

    def remove(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            if folder is None:
                raise Refused(404, f"no {r['path']!r}")
            return {"kind": folder.remove(r["path"], bool(r["recursive"]))}, []

    def move(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            if folder is None:
                raise Refused(404, f"no {r['path']!r}")
            folder.move(r["path"], r["to"], bool(r["replace"]))
        return {}, []

    def scan(self, r: dict[str, Any]) -> Reply:
        with self._folder(r) as folder:
            total, files = (0, 0) if folder is None else folder.scan()
        return {"bytes": total, "files": files}, []

    def purge(self, r: dict[str, Any]) -> Reply:
        return {"purged": purge(self.root, r["host"], r["id"])}, []


if __name__ == "__main__":
    sys.exit(main())
