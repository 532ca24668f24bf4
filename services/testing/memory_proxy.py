"""The ``Proxy`` port in Python: a small HTTP/1.1 proxy on loopback, for simulations and
the actors' tests. It passes the contract HAProxy passes (``tests/support/proxy_contract.py``)
and is never in a real request path.

One request a connection (``Connection: close`` both ways), a request body only by
``Content-Length``; the replica's response goes back byte for byte as it comes, so
chunked and server-sent events stream. Its checks follow each route's ``HealthCheck``;
a backend is in rotation when its weight is above 0 and its checks have not failed
(weights above 0 are not proportional here: round-robin takes each in turn).
``stats()`` keeps the last 1,000 answers' durations by route for ``p95_ms``.
"""

import hashlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from itertools import count

import anyio
from anyio.abc import ByteStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from services.domain.serving.route_table import Backend, Balance, Route, RouteTable
from services.ports.proxy import BackendHealth, RouteStats

__all__ = ["MemoryProxy", "memory_proxy"]

HEAD_MAX = 65536
_REASONS = {
    401: "Unauthorized",
    404: "Not Found",
    411: "Length Required",
    503: "Service Unavailable",
}


@dataclass
class _Counters:
    total: int = 0
    in_flight: int = 0
    waiting: int = 0
    durations_ms: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


@dataclass
class _Check:
    passes: int = 0
    fails: int = 0
    healthy: bool | None = None
    detail: str = ""
    due: float = 0.0


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


class MemoryProxy:
    def __init__(self) -> None:
        self._table = RouteTable()
        self._port = 0
        self._changed = anyio.Event()
        self._counters: dict[str, _Counters] = {}
        self._checks: dict[str, _Check] = {}
        self._active: dict[str, int] = {}  # requests at each replica now (leastconn)
        self._turn = count()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)

    async def apply(self, table: RouteTable) -> None:
        self._table = table
        for r in table.routes:
            self._counters.setdefault(r.endpoint_id, _Counters())
        self._wake()

    async def health(self) -> Mapping[str, BackendHealth]:
        placed = {b.session_id for r in self._table.routes for b in r.backends}
        return {
            sid: BackendHealth(session_id=sid, healthy=c.healthy, detail=c.detail)
            for sid, c in self._checks.items()
            if sid in placed and c.healthy is not None
        }

    async def stats(self) -> Mapping[str, RouteStats]:
        out = {}
        for r in self._table.routes:
            c = self._counters.setdefault(r.endpoint_id, _Counters())
            out[r.endpoint_id] = RouteStats(
                requests_total=c.total,
                in_flight=c.in_flight,
                queued=c.waiting,
                p95_ms=_p95(c.durations_ms),
            )
        return out

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _in_rotation(self, route: Route) -> list[Backend]:
        return [
            b
            for b in route.backends
            if b.weight > 0 and self._checks.get(b.session_id, _Check()).healthy is not False
        ]

    def _route(self, request: _Request) -> Route | None:
        host = (request.header("host") or "").split(":", 1)[0].lower()
        for r in self._table.routes:
            if r.host and r.host.lower() == host:
                return r
        prefixed = [r for r in self._table.routes if not r.host]
        for r in sorted(prefixed, key=lambda r: -len(r.path_prefix)):
            if request.target.startswith(r.path_prefix):
                return r
        return None

    async def _handle(self, client: SocketStream) -> None:
        """One client's request. A client gone (closed, reset) ends its handling alone: an
        error escaping here would end the listener, and every client's proxy with it."""
        with suppress(*_CLIENT_GONE):
            await self._handle_one(client)

    async def _handle_one(self, client: SocketStream) -> None:
        async with client:
            reader = BufferedByteReceiveStream(client)
            try:
                request = await _read_request(reader)
            except (anyio.IncompleteRead, anyio.DelimiterNotFound, ValueError):
                return
            if request is None:
                await _answer(client, 411)
                return
            route = self._route(request)
            if route is None:
                await _answer(client, 404)
            elif not _allowed(route, request):
                await _answer(client, 401)
            else:
                await self._forward(client, route, request)

    async def _forward(self, client: SocketStream, route: Route, request: _Request) -> None:
        counters = self._counters.setdefault(route.endpoint_id, _Counters())
        counters.in_flight += 1
        started = time.monotonic()
        try:
            chosen = await self._choose(route, counters)
            counters.total += 1  # as HAProxy counts: once a replica is chosen, or 503
            if chosen is None:
                await _answer(client, 503)
                return
            self._active[chosen.session_id] = self._active.get(chosen.session_id, 0) + 1
            try:
                await _relay(client, chosen, _upstream(route, request))
            except OSError:
                await _answer(client, 503)
            finally:
                self._active[chosen.session_id] -= 1
        finally:
            counters.in_flight -= 1
            counters.durations_ms.append((time.monotonic() - started) * 1000)

    async def _choose(self, route: Route, counters: _Counters) -> Backend | None:
        """A backend in rotation; for a cold start, the first to come within its time."""
        deadline = time.monotonic() + route.cold_start_s
        counters.waiting += 1
        try:
            while not (ready := self._in_rotation(route)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                changed = self._changed
                with anyio.move_on_after(left):
                    await changed.wait()
                route = next(
                    (r for r in self._table.routes if r.endpoint_id == route.endpoint_id), route
                )
        finally:
            counters.waiting -= 1
        if route.balance is Balance.LEAST_CONNECTIONS:
            return min(ready, key=lambda b: self._active.get(b.session_id, 0))
        return ready[next(self._turn) % len(ready)]

    async def _check_forever(self) -> None:
        """Each placed backend checked as its route says; a change of health wakes the
        requests held for a cold start."""
        while True:
            now = time.monotonic()
            for r in self._table.routes:
                for b in r.backends:
                    c = self._checks.setdefault(
                        b.session_id, _Check(due=now + r.health.initial_delay_s)
                    )
                    if c.due <= now:
                        c.due = now + r.health.interval_s
                        await self._check(r, b, c)
            await anyio.sleep(0.02)

    async def _check(self, route: Route, b: Backend, c: _Check) -> None:
        h = route.health
        try:
            with anyio.fail_after(h.timeout_s):
                status = await _get_status(b, h.path)
            ok, c.detail = 200 <= status < 400, f"HTTP {status}"
        except (OSError, TimeoutError, anyio.EndOfStream, anyio.IncompleteRead, ValueError) as e:
            ok, c.detail = False, f"check failed: {e!r}"
        c.passes, c.fails = (c.passes + 1, 0) if ok else (0, c.fails + 1)
        before = c.healthy
        if c.passes >= h.healthy_after:
            c.healthy = True
        elif c.fails >= h.unhealthy_after:
            c.healthy = False
        if c.healthy is not before:
            self._wake()


# How a client's going away shows on its stream (a reset: BrokenResourceError, OSError).
_CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


@asynccontextmanager
async def memory_proxy(port: int = 0) -> AsyncIterator[MemoryProxy]:
    """A MemoryProxy serving an empty table on loopback ``port`` (0: a free one), until
    exit."""
    proxy = MemoryProxy()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener, anyio.create_task_group() as tg:
        proxy._port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, proxy._handle)
        tg.start_soon(proxy._check_forever)
        yield proxy
        tg.cancel_scope.cancel()


def _allowed(route: Route, request: _Request) -> bool:
    if route.public:
        return True
    auth = request.header("authorization") or ""
    token = auth.removeprefix("Bearer ")
    return token != auth and hashlib.sha256(token.encode()).hexdigest() in route.token_sha256


async def _read_request(reader: BufferedByteReceiveStream) -> _Request | None:
    """The request, or None for a body not framed by Content-Length."""
    head = (await reader.receive_until(b"\r\n\r\n", HEAD_MAX)).decode("latin-1")
    line, *rest = head.split("\r\n")
    method, target, _version = line.split(" ", 2)
    headers = [(k.strip(), v.strip()) for k, v in (h.split(":", 1) for h in rest if h)]
    names = {k.lower() for k, _ in headers}
    if "transfer-encoding" in names:
        return None
    length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
    body = await reader.receive_exactly(length) if length else b""
    return _Request(method, target, headers, body)


def _upstream(route: Route, request: _Request) -> bytes:
    """The request as the replica gets it: prefix stripped, the proxy's token taken off
    (a public route's Authorization is the replica's own: passed on), one request."""
    target = request.target
    if not route.host:
        target = "/" + target.removeprefix(route.path_prefix)
    dropped = {"connection", "keep-alive"} | ({"authorization"} if not route.public else set())
    kept = [f"{k}: {v}" for k, v in request.headers if k.lower() not in dropped]
    head = "\r\n".join([f"{request.method} {target} HTTP/1.1", *kept, "Connection: close"])
    return (head + "\r\n\r\n").encode("latin-1") + request.body


async def _relay(client: ByteStream, backend: Backend, request: bytes) -> None:
    """Send ``request`` to ``backend`` and its answer back as it comes; the answer's head
    says ``Connection: close`` (this proxy serves one request a connection)."""
    async with await anyio.connect_tcp(backend.host, backend.port) as upstream:
        await upstream.send(request)
        reader = BufferedByteReceiveStream(upstream)
        head = (await reader.receive_until(b"\r\n\r\n", HEAD_MAX)).decode("latin-1")
        lines = [h for h in head.split("\r\n") if not h.lower().startswith("connection:")]
        await client.send(
            ("\r\n".join([*lines, "Connection: close"]) + "\r\n\r\n").encode("latin-1")
        )
        if reader.buffer:
            await client.send(bytes(reader.buffer))
        async for chunk in upstream:
            await client.send(chunk)


async def _answer(client: ByteStream, status: int) -> None:
    body = f"{_REASONS[status]}\n".encode()
    head = f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain\r\n"
    extra = "WWW-Authenticate: Bearer\r\n" if status == 401 else ""
    length = f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    await client.send((head + extra + length).encode() + body)


async def _get_status(backend: Backend, path: str) -> int:
    async with await anyio.connect_tcp(backend.host, backend.port) as s:
        await s.send(f"GET {path} HTTP/1.1\r\nHost: check\r\nConnection: close\r\n\r\n".encode())
        line = await BufferedByteReceiveStream(s).receive_until(b"\r\n", HEAD_MAX)
        return int(line.split(b" ")[1])


def _p95(samples: deque[float]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
