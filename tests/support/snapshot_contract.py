"""What every SnapshotStore (``services.ports.SnapshotStore``) promises, as one test class
to subclass: a subclass provides the fixture ``store``. Run against MemorySnapshots and the
real JetStreamSnapshots (``test_actor_snapshots.py``)."""

import os
from datetime import UTC, datetime

import pytest

from services.ports import SnapshotStore

__all__ = ["SnapshotContract"]


class SnapshotContract:
    async def test_none_until_one_is_saved(self, store: SnapshotStore) -> None:
        assert await store.load() is None

    async def test_what_was_saved_comes_back(self, store: SnapshotStore) -> None:
        await store.save(b"first")
        assert await store.load() == b"first"

    async def test_a_save_replaces_the_one_before(self, store: SnapshotStore) -> None:
        await store.save(b"first")
        await store.save(b"second, longer than the first")
        assert await store.load() == b"second, longer than the first"

    @pytest.mark.parametrize("size", [0, 1, 3 * 1024 * 1024 + 7])
    async def test_any_size_comes_back_whole(self, store: SnapshotStore, size: int) -> None:
        """Empty, one byte, and larger than a message (the object store's chunks)."""
        data = os.urandom(size)
        await store.save(data)
        assert await store.load() == data

    async def test_it_says_when_the_latest_was_saved(self, store: SnapshotStore) -> None:
        assert await store.saved_at() is None
        before = datetime.now(UTC)
        await store.save(b"first")
        first = await store.saved_at()
        assert first is not None and before <= first <= datetime.now(UTC)
        await store.save(b"second")
        second = await store.saved_at()
        assert second is not None and second >= first
