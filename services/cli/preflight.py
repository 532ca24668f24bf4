"""What ``fgpu up`` must hold before it starts anything, each refusal said in one line
(exit 1): its store and its home, held by no other ``fgpu up``."""

from pathlib import Path

from services.adapters.store_lock import StoreInUse, StoreLock
from services.cli.options import fail

__all__ = ["hold_home", "hold_store"]


def hold_store(store: Path) -> StoreLock:
    """The lock of ``store`` (``StoreLock``), held for the rest of the process unless
    released; exit 1 naming its holder if another process has it."""
    try:
        return StoreLock(store)
    except StoreInUse as e:
        fail(str(e), code=1)


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
