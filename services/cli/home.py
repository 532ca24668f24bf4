"""Where this host's fgpu keeps what it keeps, and how: ``$FGPU_HOME`` (``~/.fgpu`` by
default), readable and writable by its user only.

What is there says who may do what (credentials, tokens, service keys) and what every
tenant did (the log's store, the projections): directories are made 0700, files 0600.
A daemon (``fgpu up``, ``fgpu api``, a rebuild, the archiver) makes much of it through
others (nats-server, DuckDB, Parquet), so it sets its umask to 077
(``private_process``, ``private_files``) rather than each file's mode; a command that
writes one file writes it with ``write_private``.
"""

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "fgpu_home",
    "home_hint",
    "private_dir",
    "private_files",
    "private_process",
    "write_private",
]

PRIVATE_UMASK = 0o077


def fgpu_home() -> Path:
    """``$FGPU_HOME``, else ``~/.fgpu``."""
    return Path(os.environ.get("FGPU_HOME", Path.home() / ".fgpu"))


def home_hint() -> str:
    """What to do when ``$FGPU_HOME`` will not do, for a message."""
    return f"set FGPU_HOME to a directory you may write (it is {fgpu_home()})"


def private_process() -> None:
    """For the rest of this process (a daemon's, which ends with its command), what it
    makes, and the children it starts (nats-server), is its user's only: files at most
    0600, directories 0700, whoever makes them. A mode set explicitly afterwards
    (``chmod``) stands."""
    os.umask(PRIVATE_UMASK)


@contextmanager
def private_files() -> Iterator[None]:
    """The same for the block only: for a command that may run in another's process (a
    test's), so that the process's umask is its own again after."""
    before = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(before)


def private_dir(path: Path) -> Path:
    """``path`` as a directory, each part of it that this makes 0700 (parts already there
    are left as they are). Returns ``path``. Raises OSError (NotADirectoryError naming the
    part that is a file)."""
    missing: list[Path] = []
    part = path
    while not part.is_dir() and part != part.parent:
        if part.exists():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(part))
        missing.append(part)
        part = part.parent
    for part in reversed(missing):
        part.mkdir(mode=0o700, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a reader finds the old file or the new),
    mode 0600, its directory made as ``private_dir`` does. Raises OSError."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)  # an existing tmp keeps its mode through O_CREAT
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
