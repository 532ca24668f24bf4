"""The servers' client connections in memory: a Kicker for tests of the gatekeeper."""

from collections.abc import Iterable

import anyio

from services.ports.gate import Connection

__all__ = ["MemoryServers"]


class MemoryServers:
    """Connections by server, each with the name it is known by, listed and ended as the
    servers do. ``comes_back[name]``: that many times, a connection of ``name`` that is
    ended is replaced by a new one (its client let in again by a gatekeeper that has not
    folded the revocation yet)."""

    def __init__(self) -> None:
        self.connections: dict[Connection, str] = {}
        self.comes_back: dict[str, int] = {}
        self._cid = 0
        self._changed = anyio.Event()

    def connect(self, name: str, server_id: str = "n0") -> Connection:
        self._cid += 1
        c = Connection(server_id, self._cid)
        self.connections[c] = name
        return c

    async def held(self, name: str | None = None) -> dict[Connection, str]:
        return {c: n for c, n in self.connections.items() if name is None or n == name}

    async def kick(self, connections: Iterable[Connection]) -> None:
        for c in connections:
            name = self.connections.pop(c, None)
            if name is not None and self.comes_back.get(name, 0) > 0:
                self.comes_back[name] -= 1
                self.connect(name, c.server_id)
        self._changed.set()
        self._changed = anyio.Event()

    async def none_of(self, name: str) -> None:
        """Back once no connection of ``name`` is left."""
        while name in self.connections.values():
            await self._changed.wait()
