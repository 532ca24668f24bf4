"""A SnapshotStore in memory: what actor tests start from instead of an object store.

It passes the contract in ``tests/snapshot_contract.py`` as ``JetStreamSnapshots`` does.
``fail`` makes every call raise LogError, as a store the server cannot reach does.
"""

from services.ports import LogError

__all__ = ["MemorySnapshots"]


class MemorySnapshots:
    def __init__(self) -> None:
        self.data: bytes | None = None
        self.saves = 0
        self.fail = False

    async def load(self) -> bytes | None:
        if self.fail:
            raise LogError("load a snapshot: the store is away")
        return self.data

    async def save(self, data: bytes) -> None:
        if self.fail:
            raise LogError("save a snapshot: the store is away")
        self.data = bytes(data)
        self.saves += 1
