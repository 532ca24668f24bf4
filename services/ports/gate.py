"""What the gatekeeper decides when a client connects, and how it ends a connection."""

from dataclasses import dataclass
from typing import Protocol

from services.domain.permissions import Permissions

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
    """One client connection, as a server knows it."""

    server_id: str
    client_id: int


class Kicker(Protocol):
    async def kick(self, connection: Connection) -> None:
        """Disconnect ``connection``; no error if it is gone already."""
        ...
