"""The domains' part of the log in memory: the fake the domain feed's tests run on."""

from collections.abc import Callable, Sequence

import anyio

from events import Record

__all__ = ["MemoryDomainFeed", "MemoryReaderConsumers"]


class MemoryDomainFeed:
    """DomainFeed in memory: what was written, in order, each (domain, sequence) once."""

    def __init__(self) -> None:
        self.written: list[tuple[str, Record]] = []
        self._seen: set[tuple[str, int]] = set()
        self._more = anyio.Event()

    async def last_fed(self) -> int:
        return self.written[-1][1].seq if self.written else 0

    async def feed(self, items: Sequence[tuple[str, Record]]) -> None:
        for domain, r in items:
            if (domain, r.seq) not in self._seen:
                self._seen.add((domain, r.seq))
                self.written.append((domain, r))
        self._more.set()
        self._more = anyio.Event()

    async def through(self, seq: int) -> None:
        """Until a record at ``seq`` or later is written (put a deadline around it)."""
        while await self.last_fed() < seq:
            await self._more.wait()

    def of(self, domain: str) -> list[Record]:
        """What ``domain``'s readers are given, in order."""
        return [r for d, r in self.written if d == domain]


class MemoryReaderConsumers:
    """ReaderConsumers in memory: the consumers there now, by key (their scope)."""

    def __init__(self) -> None:
        self.there: dict[str, str | None] = {}
        self.asked = 0  # calls made (the provisioner asks once a change, not a batch)
        self._changed = anyio.Event()

    async def open(self, access_key: str, domain: str | None) -> None:
        self.asked += 1
        self.there.setdefault(access_key, domain)
        self._tell()

    async def close(self, access_key: str, domain: str | None) -> None:
        self.asked += 1
        self.there.pop(access_key, None)
        self._tell()

    def _tell(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, done: Callable[[dict[str, str | None]], bool]) -> None:
        """Until the consumers there are ``done`` (put a deadline around it)."""
        while not done(self.there):
            await self._changed.wait()
