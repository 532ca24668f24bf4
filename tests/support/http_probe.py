"""A plain HTTP GET of a server that may not listen yet, for tests of serving replicas."""

import contextlib

import anyio

__all__ = ["get_when_up"]


async def get_when_up(host: str, port: int, path: str) -> bytes:
    """The body of ``GET path``, once the server listens (connections are refused until
    its process has bound the port: tried again until the caller's deadline)."""
    while True:
        try:
            stream = await anyio.connect_tcp(host, port)
        except OSError:
            await anyio.sleep(0.05)
            continue
        async with stream:
            await stream.send(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            data = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    data += await stream.receive()
        return data.split(b"\r\n\r\n", 1)[1]
