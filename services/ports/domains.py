"""Each domain's part of the log, for the domain's readers: where the domain feed writes
it (``services.actors.domain_feed``), and the consumers readers read through."""

from collections.abc import Sequence
from typing import Protocol

from events import Record

__all__ = ["DomainFeed", "ReaderConsumers"]


class DomainFeed(Protocol):
    async def last_fed(self) -> int:
        """The log sequence of the last record written (0: none yet). Raises LogError."""
        ...

    async def feed(self, items: Sequence[tuple[str, Record]]) -> None:
        """Write each record under its domain, in order; a record written again under the
        same domain is kept once. Raises LogError (some may have been written)."""
        ...


class ReaderConsumers(Protocol):
    """The consumers reader keypairs read through: made and removed by the gatekeeper
    alone, each named by its reader's access key, scoped to its domain (None: the log)."""

    async def open(self, access_key: str, domain: str | None) -> None:
        """Make the reader's consumer if it is not there. Raises LogError."""
        ...

    async def close(self, access_key: str, domain: str | None) -> None:
        """Remove the reader's consumer, if there is one. Raises LogError."""
        ...
