"""What a daemon needs of its host, found before it starts anything, each lack said in
one line with what to do (exit 1): directories it may write in (``$FGPU_HOME``, a
store), and the store and the home held by no other ``fgpu up``.

A port is checked where it is listened on (``nats_server.PortInUse``, ``port_taken``):
checked ahead, another process could take it between the check and the listen.
"""

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.adapters.nats_supervisor import StoreDirDisk
from services.adapters.store_lock import StoreInUse, StoreLock
from services.cli.home import home_hint, private_dir
from services.cli.options import HostProblem, fail
from services.domain.log_space import Watermark

__all__ = ["hold_home", "hold_store", "port_taken", "room_for_the_log", "writable"]


def writable(path: Path, hint: str) -> Path:
    """``path`` as a directory this process may write in (made as ``private_dir`` makes
    one); else exit 1 naming it, why, and ``hint``. Returns ``path``."""
    try:
        private_dir(path)
        # Modes say little (root passes them; a read-only filesystem does not): try.
        fd, probe = tempfile.mkstemp(dir=path, prefix=".fgpu-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        where = f" ({e.filename})" if e.filename and Path(e.filename) != path else ""
        fail(f"cannot write in {path}: {e.strerror or e}{where}: {hint}", code=1)
    return path


def hold_store(store: Path) -> StoreLock:
    """The lock of ``store`` (``StoreLock``), held for the rest of the process unless
    released; exit 1 naming its holder if another process has it."""
    try:
        return StoreLock(store)
    except StoreInUse as e:
        fail(str(e), code=1)
    except OSError as e:
        fail(f"cannot lock the store {store}: {e.strerror or e}", code=1)


def hold_home(home: Path, store: Path) -> StoreLock | None:
    """The lock of ``home`` (its ``up.json`` is one ``fgpu up``'s), unless ``home`` is
    the ``store`` already held (a directory is locked once); exit 1 if another ``fgpu
    up`` has it."""
    if home.resolve() == store.resolve():
        return None
    try:
        return StoreLock(home)
    except StoreInUse as e:
        who = f"pid {e.holder.pid}" if e.holder is not None else "its pid unknown"
        fail(
            f"another fgpu up ({who}) runs with FGPU_HOME {home}, on another store: stop "
            "it (fgpu down), or give this one another FGPU_HOME",
            code=1,
        )
    except OSError as e:
        fail(f"cannot lock {home}: {e.strerror or e}: {home_hint()}", code=1)


def room_for_the_log(store: Path, watermark: Watermark) -> None:
    """Exit 1 if the disk under ``store`` has less room than the watermark: the server
    would start on it only to fail its writes (and one that was writing an atomic batch
    when its disk filled could not finish it: it would drop the rest)."""
    disk = StoreDirDisk(str(store))
    usage = disk.usage()
    mark = watermark.of(usage.total)
    if usage.free < mark:
        fail(
            f"the log's disk is low: {usage.free} bytes free at {store}, under its watermark "
            f"of {mark} bytes: free some room (or lower --low-space), then start again",
            code=1,
        )


@contextmanager
def port_taken(host: str, port: int, option: str) -> Iterator[None]:
    """Raise HostProblem, naming ``option`` to change, for the OSError of a block that
    listens on ``host:port`` if another process listens there (other errors pass)."""
    try:
        yield
    except (OSError, BaseExceptionGroup) as e:
        # Raised in task groups, it comes wrapped in theirs.
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        if not isinstance(e, OSError) or e.errno != errno.EADDRINUSE:
            raise
        raise HostProblem(
            f"cannot listen on {host}:{port}: another process does: give another {option} "
            "(0: a free one)"
        ) from e
