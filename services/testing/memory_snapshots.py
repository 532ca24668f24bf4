"""A SnapshotStore in memory: what actor tests start from instead of an object store.

It passes the contract in ``tests/support/snapshot_contract.py`` as ``JetStreamSnapshots`` does.
``fail`` makes every call raise LogError, as a store the server cannot reach does;
``corrupt`` makes a load raise SnapshotCorrupt with that reason, as a store whose chunks
were damaged does. ``saved`` is back at the next save: an actor saves from a task of its
own, so a test waits for the save, not for time to pass.
"""

from datetime import UTC, datetime

import anyio

from services.ports import LogError, SnapshotCorrupt

__all__ = ["MemorySnapshots"]


class MemorySnapshots:
    def __init__(self) -> None:
        self.data: bytes | None = None
        self.saves = 0
        self.fail = False
        self.corrupt: str | None = None
        self.at: datetime | None = None
        self._saved = anyio.Event()

    async def saved(self) -> None:
        """Back at the next save."""
        await self._saved.wait()

    async def load(self) -> bytes | None:
        if self.fail:
            raise LogError("load a snapshot: the store is away")
        if self.corrupt is not None:
            raise SnapshotCorrupt(f"load a snapshot: {self.corrupt}")
        return self.data

    async def save(self, data: bytes) -> None:
        if self.fail:
            raise LogError("save a snapshot: the store is away")
        self.data = bytes(data)
        self.corrupt = None
        self.at = datetime.now(UTC)
        self.saves += 1
        self._saved.set()
        self._saved = anyio.Event()

    async def saved_at(self) -> datetime | None:
        if self.fail:
            raise LogError("a snapshot's time: the store is away")
        return self.at if self.data is not None else None
