"""A unix-socket proxy in front of the Docker engine, which a test cuts as a restart of the
engine cuts its clients: every connection through it closed from the engine's side, new
ones refused until it is resumed. The engine itself, shared by every test, runs on.

Plain asyncio streams (the runtime is asyncio's alone): anyio's unix sockets wait on a
reader callback that may fire on a future already cancelled when a cut cancels them.
"""

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["EngineProxy", "engine_proxy"]

_METHODS = (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD")


class EngineProxy:
    """``url``: where its clients connect. ``requests(text)``: how many requests whose
    first line holds ``text`` it has passed on."""

    def __init__(self, path: Path, engine: str) -> None:
        self.path, self._engine = path, engine
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._lines: list[bytes] = []
        self._seen = asyncio.Event()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    async def resume(self) -> None:
        """Take connections again."""
        self._server = await asyncio.start_unix_server(self._pipe, path=str(self.path))

    async def cut(self) -> None:
        """Close every connection through it, and take none until ``resume``."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._open):
            writer.close()
        if server is not None:
            await server.wait_closed()

    def requests(self, text: bytes) -> int:
        return sum(1 for line in self._lines if text in line)

    async def wait_request(self, text: bytes) -> None:
        """Until a request holding ``text`` has gone through (no deadline here)."""
        while not self.requests(text):
            self._seen.clear()
            await self._seen.wait()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            engine_reader, engine_writer = await asyncio.open_unix_connection(self._engine)
        except OSError:
            writer.close()
            return
        if self._server is None:  # cut while this connection was being made: none kept
            writer.close()
            engine_writer.close()
            return
        self._open |= {writer, engine_writer}
        try:
            await asyncio.gather(
                self._copy(reader, engine_writer, asks=True),
                self._copy(engine_reader, writer, asks=False),
            )
        finally:
            self._open -= {writer, engine_writer}

    async def _copy(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, asks: bool
    ) -> None:
        """``src`` to ``dst`` until ``src`` ends, then ``dst`` is closed; the request
        lines of what a client sends are noted."""
        with contextlib.suppress(OSError):
            while chunk := await src.read(1 << 16):
                if asks and chunk.split(b" ", 1)[0] in _METHODS:
                    self._lines.append(chunk.split(b"\r\n", 1)[0])
                    self._seen.set()
                dst.write(chunk)
                await dst.drain()
        dst.close()


@asynccontextmanager
async def engine_proxy(path: Path) -> AsyncIterator[EngineProxy]:
    """A proxy at ``path`` to the engine of ``DOCKER_HOST`` (a unix socket), taking
    connections, until the block ends."""
    engine = urlsplit(os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock").path
    proxy = EngineProxy(path, engine)
    await proxy.resume()
    try:
        yield proxy
    finally:
        await proxy.cut()
