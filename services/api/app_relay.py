"""One HTTP request, or one WebSocket, relayed to an app in a container over a byte
stream (an app channel: ``browser.Acting.app``), as a client of the app speaks it: h11
for HTTP/1.1 and wsproto for the WebSocket, both without I/O of their own.

Each HTTP request is one connection to the app (``Connection: close``): the request's
body streams to the app as the browser sends it, the answer's back as the app sends it.
What goes in is cleaned first (``forwarded``): the hop-by-hop headers go, and every cookie
and header of fgpu's own (the UI's browser session, the apps origin's grant, the CSRF
token) is taken out, so no credential of the user's ever reaches the container. What comes
back loses its hop-by-hop headers and any ``Set-Cookie`` of a name fgpu uses: an app
must not plant a cookie the UI would read as its own (cookies ignore ports).
"""

import contextlib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import anyio
import h11
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["HOP_BY_HOP", "Pipe", "forwarded", "kept_answer", "relay_http"]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)
_OURS = b"fgpu"  # the prefix of every cookie of fgpu's (the UI's, the apps origin's)
_OUR_HEADERS = frozenset({b"x-csrf-token"})
_READ = 64 << 10


class Pipe:
    """The proxy's side and the channel's side of one connection: what the proxy
    ``put``s the channel ``read``s, what the channel ``write``s the proxy ``get``s.
    Used as a context manager: its streams are closed on leaving."""

    def __init__(self) -> None:
        self._up: tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]
        self._down: tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]
        self._up = anyio.create_memory_object_stream[bytes](8)
        self._down = anyio.create_memory_object_stream[bytes](8)

    def __enter__(self) -> "Pipe":
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (*self._up, *self._down):
            stream.close()

    # The channel's end (``browser.AppEnd``).
    async def read(self) -> bytes | None:
        try:
            return await self._up[1].receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    async def write(self, data: bytes) -> None:
        await self._down[0].send(data)

    def closed(self) -> None:
        """The channel has closed: ``get`` ends."""
        self._down[0].close()

    # The proxy's end.
    async def put(self, data: bytes) -> None:
        if data:
            await self._up[0].send(data)

    def done(self) -> None:
        """Nothing more goes to the app."""
        self._up[0].close()

    async def get(self) -> bytes:
        """The app's next bytes; b"" once the channel has closed."""
        try:
            return await self._down[1].receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return b""


def _cookie(value: bytes) -> bytes | None:
    """A Cookie header without fgpu's cookies (None if none is left)."""
    kept = [p for p in value.split(b";") if not p.strip().lower().startswith(_OURS)]
    joined = b";".join(kept).strip()
    return joined or None


def forwarded(headers: Iterable[tuple[bytes, bytes]], host: bytes, prefix: str) -> Headers:
    """The request's headers as the app gets them: no hop-by-hop header, no credential
    of fgpu's, and where it was asked for (``X-Forwarded-Prefix``: the app's path here)."""
    out: Headers = []
    for name, value in headers:
        n = name.lower()
        if n in HOP_BY_HOP or n in _OUR_HEADERS or n.startswith(b"x-forwarded-"):
            continue
        if n.startswith(b"sec-websocket-"):
            continue  # a WebSocket's handshake is the relay's own
        if n == b"cookie":
            cleaned = _cookie(value)
            if cleaned is not None:
                out.append((b"cookie", cleaned))
            continue
        out.append((n, value))
    out += [(b"host", host), (b"x-forwarded-prefix", prefix.encode())]
    return out


def kept_answer(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The app's answer's headers as the browser gets them: no hop-by-hop or framing
    header (the server frames it again), no cookie of a name fgpu uses."""
    out: Headers = []
    for name, value in headers:
        n = name.lower()
        if n in HOP_BY_HOP or n == b"transfer-encoding":
            continue
        if n == b"set-cookie" and value.lstrip().lower().startswith(_OURS):
            continue
        out.append((n, value))
    return out


async def relay_http(
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    pipe: Pipe,
    target: str,
    headers: Headers,
) -> bool:
    """Send the request of ``scope`` (its body from ``receive``) through ``pipe`` as
    ``target`` with ``headers``, and the app's answer to ``send``; whether an answer was
    begun (if not, the caller answers: the app said nothing)."""
    conn = h11.Connection(h11.CLIENT)
    has_body = any(n in (b"content-length", b"transfer-encoding") for n, _ in headers)
    if not has_body and scope["method"] not in ("GET", "HEAD", "OPTIONS", "DELETE"):
        headers = [*headers, (b"transfer-encoding", b"chunked")]
    request = h11.Request(
        method=scope["method"], target=target, headers=[*headers, (b"connection", b"close")]
    )
    await pipe.put(conn.send(request) or b"")
    started = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(_body_up, conn, receive, pipe)
        started = await _answer_down(conn, send, pipe)
        tg.cancel_scope.cancel()
    return started


async def _body_up(conn: h11.Connection, receive: Receive, pipe: Pipe) -> None:
    """The request's body to the app, as the browser sends it."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = message.get("body", b"")
        if body:
            await pipe.put(conn.send(h11.Data(data=body)) or b"")
        if not message.get("more_body", False):
            await pipe.put(conn.send(h11.EndOfMessage()) or b"")
            return


async def _answer_down(conn: h11.Connection, send: Send, pipe: Pipe) -> bool:
    """The app's answer to the browser as it comes; whether one was begun."""
    started = False
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            event = None  # a broken answer: what was sent stands, the rest is cut
        if event is h11.NEED_DATA:
            with contextlib.suppress(h11.RemoteProtocolError):
                conn.receive_data(await pipe.get())
            continue
        if isinstance(event, h11.Response):
            headers = kept_answer(event.headers)
            await send(
                {"type": "http.response.start", "status": event.status_code, "headers": headers}
            )
            started = True
        elif isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, h11.InformationalResponse):
            continue
        else:  # EndOfMessage, ConnectionClosed, or broken
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return started
