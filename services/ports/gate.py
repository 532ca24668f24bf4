"""What the gatekeeper decides when a client connects, and how it finds and ends the
connections of a key."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from services.domain.access.permissions import Permissions

__all__ = ["Connection", "Grant", "Kicker"]


@dataclass(frozen=True)
class Grant:
    """A connection let in: as whom (``user:<name>`` or ``service:<kind>``), with which
    permissions, until when (Unix seconds; None: until it is revoked)."""

    name: str
    permissions: Permissions
    expires: int | None


@dataclass(frozen=True)
class Connection:
    """One client connection, as a server knows it: that server's id and the connection's
    id there (a cid names a connection of one server only)."""

    server_id: str
    client_id: int


class Kicker(Protocol):
    """The servers' own account of their client connections, and the way to end one.

    A client the gatekeeper let in is known to every server by its access key (the name
    its grant gives it), so the servers can be asked for a key's connections wherever
    they are, whoever let them in."""

    async def held(self, name: str | None = None) -> dict[Connection, str]:
        """The client connections the servers hold now, each with the name it is known
        by; those known by ``name`` only, when given. Raises ConnectionsUnknown when a
        server could not be asked."""
        ...

    async def kick(self, connections: Iterable[Connection]) -> None:
        """Disconnect each of ``connections``; no error for one gone already, nor for one
        its server could not be told of (``held`` shows what is left)."""
        ...
