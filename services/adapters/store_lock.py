"""One ``fgpu up`` per store, and no server stopped that a live process may own.

``StoreLock`` holds an OS lock (``flock``) on the store's directory itself, through a
descriptor kept open for as long as ``fgpu up`` runs: the kernel lets go of it when the
process ends, however it ends, and no file can be removed to take it from its holder
(removing the directory removes the store). ``<store>/fgpu.lock`` only names the holder,
its pid and its start time, for the message a second one gets and for the next holder
to tell whether the process that held the store before still runs.

``stop_orphan`` stops a nats-server left running on the store only when its owner is
proven dead: the caller holds the lock, the server is a nats-server serving that very
store, and the process that held the store before it (pid *and* start time, from
``/proc``, so that a pid reused by another process is no proof of life) runs no more.

Errors::

    StoreInUse    another process holds the store, or a server on it may have a live
                  owner: refused, never shared, nothing stopped
"""

import contextlib
import fcntl
import os
import select
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PID_FILE", "Process", "StoreInUse", "StoreLock", "alive", "stop_orphan"]

LOCK_FILE = "fgpu.lock"  # who holds the lock; the lock itself is on the directory
PID_FILE = "nats-server.pid"


class StoreInUse(Exception):
    """Another process holds the store (``holder``, where on record), or may own the
    server that serves it."""

    def __init__(self, message: str, holder: "Process | None" = None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Process:
    """A process as the kernel tells one from another: its pid, and when it started
    (clock ticks after boot, ``/proc/<pid>/stat``; None where it was not recorded)."""

    pid: int
    started: int | None

    @classmethod
    def me(cls) -> "Process":
        return cls(os.getpid(), _start_of(os.getpid()))

    @classmethod
    def of(cls, pid: int) -> "Process | None":
        """The process that runs as ``pid`` now; None if none does."""
        return cls(pid, _start_of(pid)) if alive(pid) else None

    @classmethod
    def parse(cls, text: str) -> "Process | None":
        """A process written as ``str`` writes it (``pid [started]``); None if not one."""
        words = text.split()
        if not 1 <= len(words) <= 2 or not all(w.isdigit() for w in words):
            return None
        return cls(int(words[0]), int(words[1]) if len(words) == 2 else None)

    def __str__(self) -> str:
        return f"{self.pid}" if self.started is None else f"{self.pid} {self.started}"

    def runs(self) -> bool:
        """Whether this very process may still run: its pid runs, and started when it did
        (unknown start: any process with its pid may be it)."""
        if not alive(self.pid):
            return False
        return self.started is None or _start_of(self.pid) in (self.started, None)


class StoreLock:
    """The store's lock, held until ``release`` (or the process's end).

    ``previous``: the process that held the store before (None if none is on record).
    Raises StoreInUse if another holds it, OSError if the store cannot be made or written.
    """

    def __init__(self, store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        self.store = store
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _holder(store)
            who = f"pid {holder.pid}" if holder else "pid unknown: its fgpu.lock is gone"
            raise StoreInUse(
                f"the store {store} is in use by another fgpu up ({who}): stop it "
                "(fgpu down), or give this one another --store",
                holder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self.previous = _holder(store)
        try:
            _write(store / LOCK_FILE, f"{Process.me()}\n")
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing lets go of the lock
            self._fd = None


def stop_orphan(lock: StoreLock, timeout_s: float = 10.0) -> int | None:
    """Stop the nats-server left running on the store ``lock`` holds by an ``fgpu up``
    that died; its pid, or None if there was none. Raises StoreInUse, stopping nothing,
    if one serves the store while the process that held the store before may run (or
    none is on record)."""
    store = lock.store
    try:
        pid = int((store / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    with _pidfd(pid) as pidfd:
        # From here the pid names one process: a signal through pidfd never reaches
        # another that reuses it.
        if not _serves(pid, store):
            return None
        owner = lock.previous
        if owner is None or owner.runs():
            who = "nobody on record" if owner is None else f"process {owner.pid}, still running"
            raise StoreInUse(
                f"nats-server {pid} serves the store {store} for {who}: stop it yourself "
                f"(kill {pid}) if no fgpu up uses it, then start again"
            )
        _signal(pid, pidfd, signal.SIGTERM)
        if not _exited(pid, pidfd, timeout_s):
            _signal(pid, pidfd, signal.SIGKILL)
    return pid


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one that exited and awaits its parent's wait does
    not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _start_of(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot); None if it does not run
    or this is no Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1].split()
    except OSError:
        return None
    # The fields after the command's name start at the third (state): starttime is the
    # 22nd (proc(5)).
    return int(fields[22 - 3]) if len(fields) > 22 - 3 else None


def _holder(store: Path) -> Process | None:
    try:
        return Process.parse((store / LOCK_FILE).read_text())
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a reader finds the old file or the new)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def _pidfd(pid: int) -> Iterator[int | None]:
    """A descriptor naming process ``pid`` for the block (None where the kernel has
    none, or the process is gone)."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _signal(pid: int, pidfd: int | None, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)


def _exited(pid: int, pidfd: int | None, timeout_s: float) -> bool:
    """Whether process ``pid`` has exited within ``timeout_s``."""
    if pidfd is not None:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)  # readable: it exited
        return bool(ready)
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _serves(pid: int, store: Path) -> bool:
    """Whether process ``pid`` is a nats-server with ``store`` as its store."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [a.decode(errors="replace") for a in args]
    return bool(words) and Path(words[0]).name == "nats-server" and str(store) in words
