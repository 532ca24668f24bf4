"""One ``fgpu up`` per store, and no server left behind on it.

``StoreLock`` holds an exclusive lock on ``<store>/fgpu.lock`` for as long as ``fgpu up``
runs (the kernel lets go of it when the process dies, however it dies), with the pid of
its holder written inside for the message a second one gets. ``stop_orphan`` stops a
nats-server that outlived the ``fgpu up`` that started it on the store (its pid file
names it; it is only stopped if it is a nats-server serving that very store).

Errors::

    StoreInUse    another process holds the store: it is refused, never shared
"""

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path

__all__ = ["PID_FILE", "StoreInUse", "StoreLock", "alive", "stop_orphan"]

LOCK_FILE = "fgpu.lock"
PID_FILE = "nats-server.pid"


class StoreInUse(Exception):
    """Another process holds the store."""


class StoreLock:
    """The store's lock, held until ``release`` (or the process's end)."""

    def __init__(self, store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        path = store / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreInUse(
                f"the store {store} is in use by another fgpu up (pid {holder}): stop it "
                "(fgpu down), or give this one another --store"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing lets go of the lock
            self._fd = None


def stop_orphan(store: Path, timeout_s: float = 10.0) -> int | None:
    """Stop the nats-server left running on ``store`` by an ``fgpu up`` that died; its
    pid, or None if there was none. Call it holding the store's lock."""
    try:
        pid = int((store / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    if not _serves(pid, store):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pid


def _serves(pid: int, store: Path) -> bool:
    """Whether process ``pid`` is a nats-server with ``store`` as its store."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [a.decode(errors="replace") for a in args]
    return bool(words) and Path(words[0]).name == "nats-server" and str(store) in words


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one that exited and awaits its parent's wait does
    not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing
