"""One session in the web UI, as its user: its output followed (``/ui/sessions/{id}/logs``,
server-sent events) and a terminal in it (a ticket, then a WebSocket), each asked of the
session's agent on the user's own connection to the bus (``browser.Acting``), as ``fgpu
session logs --follow`` and ``fgpu session shell`` ask. The output comes over a channel
of the agent's as the container writes it, no faster than the page takes it: the agent
reads no more than a window ahead of what this server has sent the browser. The session's
details and story are the read API's own (``/v1/sessions/{id}``, ``/v1/sessions/{id}/history``).

The terminal's WebSocket (``docs/architecture.md``, "The web terminal"): a browser sends
the cookie with a WebSocket's handshake but no header of the page's own, and a page of any
site may open one. So the handshake must come from this origin (``Origin``, which a page
cannot forge, and ``Sec-Fetch-Site``), hold a live browser session (the cookie), and name a
ticket that the same browser session obtained for this session of the cluster by a POST
checked as every write is (origin and CSRF token): random, good for ``TICKET_S``, used up
by the first handshake that names it. Anything else is refused before the socket opens.
Once open, binary messages are the terminal's bytes both ways and a text message
``{"resize": [rows, cols]}`` resizes it; the socket closes when the shell does, with why.

Who may use each route (``tests/api/test_ui.py``):
- ``POST /ui/sessions/{id}/shell-ticket``, ``GET /ui/sessions/{id}/logs``: a browser
  session whose viewer sees that session (else 404, as the read API answers); the POST
  with its CSRF token. The agent then judges the user's key as it judges the CLI's (only
  the owner, or an administrator of its domain, may open a terminal);
- ``WEBSOCKET /ui/sessions/{id}/shell``: the same, with a ticket of its own.
"""

import codecs
import contextlib
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
import duckdb
from anyio.streams.memory import MemoryObjectSendStream
from fastapi import FastAPI, HTTPException, Query, Request, WebSocket
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from projections import queries
from services.api.browser import TICKET_S, Acting, BrowserSession, NoActing, ShellRefused
from services.api.guard import Browser, Guard, same_origin_problem
from services.api.params import NOT_FOUND, Ask
from services.api.session_routes import one_session
from services.domain.access.visibility import Viewer
from services.domain.channels import MAX_TAIL, OUTPUT_ENDED
from services.ports import LogError

__all__ = ["PLACED_EVERY_S", "ShellTicket", "mount"]

PLACED_EVERY_S = 1.0  # how often a page waiting for its session to be placed looks again
_KEEPALIVE_S = 15.0
Write = Callable[[bytes], Awaitable[None]]
_ENDED = frozenset({"TERMINATED", "CANCELLED", "ERROR", "REJECTED"})
_MAX_ROWS, _MAX_COLS = 500, 1000
_POLICY = 1008  # a WebSocket closed for breaking policy (before it opens: HTTP 403)
_NOT_OPENED = 4000  # opened, but no terminal came of it (the reason says why)


class ShellTicket(BaseModel):
    """A one-time ticket to open a terminal in one session over a WebSocket."""

    ticket: str
    expires_at: datetime


def mount(app: FastAPI, query: Ask[Any], guard: Guard, stop: anyio.Event) -> None:
    """The routes of one session's page on ``app``."""
    _logs(app, query, guard, stop)
    _shell(app, query, guard)


def _row(viewer: Viewer, session_id: str) -> Callable[[duckdb.DuckDBPyConnection], Any]:
    def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
        _, rows = queries.session_rows(con, session_id=session_id, scope=viewer.scope)
        return rows[0] if rows else None

    return work


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _logs(app: FastAPI, query: Ask[Any], guard: Guard, stop: anyio.Event) -> None:
    @app.get("/ui/sessions/{session_id}/logs", include_in_schema=False, responses=NOT_FOUND)
    async def logs(
        session_id: str,
        request: Request,
        who: Browser,
        tail: Annotated[int, Query(ge=1, le=MAX_TAIL)] = 500,
    ) -> StreamingResponse:
        """The session's output followed as the user follows it with ``fgpu session logs
        --follow``: ``reset`` (start again from empty), then an ``output`` event for each
        piece as the container writes it (its last ``tail`` lines first; once it has ended,
        what its agent kept); ``problem`` when the agent refuses or stops (the page's
        EventSource asks again), ``end`` once the session's output has ended."""
        s, viewer = who
        await query(lambda con: one_session(con, session_id, viewer))  # else 404
        live = guard.still(request, viewer)
        follow = _Follow(query, guard, s, viewer, session_id, tail)
        return _EventStream(follow.run, live, stop)


class _Follow:
    """One page's follow of one session's output, as server-sent events."""

    def __init__(
        self,
        query: Ask[Any],
        guard: Guard,
        s: BrowserSession,
        viewer: Viewer,
        session_id: str,
        tail: int,
    ) -> None:
        self.query, self.guard, self.s, self.viewer = query, guard, s, viewer
        self.session_id, self.tail = session_id, tail

    async def run(self, write: Write) -> None:
        await write(b"retry: 5000\n\n")
        row = await self._placed()
        if row is None:  # out of the viewer's scope now
            return
        if row["agent_id"] is None:  # ended before it was placed: no output
            await write(_sse("end", {"status": row["status"], "reason": "it never ran"}))
            return
        try:
            acting = await self.guard.browsers.acting(self.s)
        except (NoActing, LogError) as e:
            await write(_sse("problem", {"error": str(e)}))
            return
        await write(_sse("reset", {}))
        if row["status"] in _ENDED:
            why = await self._kept(acting, row["agent_id"], write)
        else:
            try:
                why = await acting.follow(
                    row["agent_id"], self.session_id, self.tail, _Pieces(write).write
                )
            except ShellRefused as e:  # the page's EventSource asks again (and once the
                why = str(e)  # session has ended, its kept output is read instead)
        if why != OUTPUT_ENDED:
            await write(_sse("problem", {"error": why}))
            return
        row = await self.query(_row(self.viewer, self.session_id))
        status = None if row is None else row["status"]
        await write(_sse("end", {"status": status, "reason": why}))

    async def _placed(self) -> Any:
        """The session's row once it has an agent or has ended; None if out of scope. The
        projection is read here (no agent is asked) until then."""
        while True:
            row = await self.query(_row(self.viewer, self.session_id))
            if row is None or row["agent_id"] is not None or row["status"] in _ENDED:
                return row
            await anyio.sleep(PLACED_EVERY_S)

    async def _kept(self, acting: Acting, agent_id: str, write: Write) -> str:
        """An ended session's output as its agent kept it; OUTPUT_ENDED, else why not."""
        try:
            reply = await acting.logs(agent_id, self.session_id, self.tail)
        except (ShellRefused, LogError) as e:
            return str(e)
        if not reply.ok:
            return str(reply.error)
        if reply.logs:
            await write(_sse("output", {"text": reply.logs}))
        return OUTPUT_ENDED


class _Pieces:
    """Bytes of output as ``output`` events of text (a character split between two
    pieces is joined again)."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def write(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if text:
            await self._write(_sse("output", {"text": text}))


class _EventStream(StreamingResponse):
    """Server-sent events written by ``run`` as they come, each ``write`` returning once
    the server has taken it (so a reader that does not read holds the writer still).
    Ends when ``run`` returns, the reader leaves, it may read no more (``live``: signed
    out, key revoked) or the server stops; a comment every ``_KEEPALIVE_S`` keeps
    proxies from closing a quiet stream."""

    def __init__(
        self,
        run: Callable[[Write], Awaitable[None]],
        live: Callable[[], bool],
        stop: anyio.Event,
    ) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(iter(()), media_type="text/event-stream", headers=headers)
        self._run, self._live, self._stop = run, live, stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})

        async def write(data: bytes) -> None:
            if not self._live() or self._stop.is_set():
                raise anyio.BrokenResourceError("this reader may read no more")
            try:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            except OSError as e:
                raise anyio.BrokenResourceError("the reader left") from e

        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_gone, receive, self._stop, write, tg.cancel_scope)
            with contextlib.suppress(anyio.BrokenResourceError):
                await self._run(write)
            tg.cancel_scope.cancel()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_gone(
    receive: Receive, stop: anyio.Event, write: Write, scope: anyio.CancelScope
) -> None:
    """Cancel ``scope`` once the reader has left, may read no more, or the server stops."""
    async with anyio.create_task_group() as tg:

        async def left() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        async def stopped() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        async def kept_alive() -> None:
            with contextlib.suppress(anyio.BrokenResourceError):
                while True:
                    await anyio.sleep(_KEEPALIVE_S)
                    await write(b": keep-alive\n\n")
            tg.cancel_scope.cancel()

        for task in (left, stopped, kept_alive):
            tg.start_soon(task)
    scope.cancel()


def _shell(app: FastAPI, query: Ask[Any], guard: Guard) -> None:
    @app.post(
        "/ui/sessions/{session_id}/shell-ticket", include_in_schema=False, responses=NOT_FOUND
    )
    async def ticket(session_id: str, who: Browser) -> ShellTicket:
        """A one-time ticket for the terminal's WebSocket (this route is a write: its
        origin and CSRF token are checked)."""
        s, viewer = who
        await query(lambda con: one_session(con, session_id, viewer))  # else 404
        word = guard.browsers.ticket(s, session_id)
        until = datetime.fromtimestamp(guard.browsers.now() + TICKET_S, UTC)
        return ShellTicket(ticket=word, expires_at=until)

    @app.websocket("/ui/sessions/{session_id}/shell")
    async def shell(
        websocket: WebSocket, session_id: str, ticket: str = "", rows: int = 24, cols: int = 80
    ) -> None:
        """A terminal in the session, as ``fgpu session shell`` opens one (see the
        module's docstring for who may, and what goes over it)."""
        admitted = await _admitted(websocket, guard, session_id, ticket)
        if admitted is None:
            return
        s, viewer = admitted
        await websocket.accept()
        # Opened from here on: what stops it now is told to the page, as the reason.
        row = await query(_row(viewer, session_id))
        if row is None or row["status"] != "RUNNING" or row["agent_id"] is None:
            status = "gone" if row is None else row["status"]
            await _close(websocket, _NOT_OPENED, f"session {session_id} is not running ({status})")
            return
        size = (min(max(rows, 1), _MAX_ROWS), min(max(cols, 1), _MAX_COLS))
        sizes_in, sizes_out = anyio.create_memory_object_stream[tuple[int, int]](4)
        end = _SocketEnd(websocket, size, sizes_in)
        try:
            acting = await guard.browsers.acting(s)
            with sizes_out, sizes_in:
                why = await acting.shell(row["agent_id"], session_id, end, sizes_out)
        except (NoActing, ShellRefused, LogError) as e:
            await _close(websocket, _NOT_OPENED, f"not opened: {e}")
            return
        await _close(websocket, 1000, why)


async def _admitted(
    websocket: WebSocket, guard: Guard, session_id: str, ticket: str
) -> tuple[BrowserSession, Viewer] | None:
    """The browser session of a terminal's handshake and who it is, if it may open; None
    if it may not (refused before it opens: the browser sees a failed handshake)."""
    problem = same_origin_problem(websocket)
    if problem is not None:
        guard.refused(websocket, None, problem)
        await _refuse(websocket, problem)
        return None
    try:
        s, viewer = await guard.browser(websocket)
    except HTTPException as e:  # recorded by the guard
        await _refuse(websocket, str(e.detail))
        return None
    if not guard.browsers.redeem(s, ticket, session_id):
        problem = "no valid ticket: ask for one (POST .../shell-ticket) each time"
        guard.refused(websocket, s.access_key, problem)
        await _refuse(websocket, problem)
        return None
    return s, viewer


async def _refuse(websocket: WebSocket, problem: str) -> None:
    """Refuse a handshake: the socket never opens (the browser sees HTTP 403)."""
    await websocket.close(code=_POLICY, reason=problem[:120])


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    """Close, saying why (a close frame's reason holds 123 bytes)."""
    text = reason.encode()[:120].decode(errors="ignore")
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):  # it went first
        await websocket.close(code=code, reason=text)


class _SocketEnd:
    """The browser's end of a terminal: binary messages are keys and output, a text
    message ``{"resize": [rows, cols]}`` a new size."""

    def __init__(
        self,
        websocket: WebSocket,
        size: tuple[int, int],
        sizes: MemoryObjectSendStream[tuple[int, int]],
    ) -> None:
        self._ws, self._size, self._sizes = websocket, size, sizes

    def size(self) -> tuple[int, int]:
        return self._size

    async def read(self) -> bytes | None:
        while True:
            try:
                message = await self._ws.receive()
            except (RuntimeError, WebSocketDisconnect) as e:
                raise anyio.BrokenResourceError("the browser closed the terminal") from e
            if message["type"] == "websocket.disconnect":
                raise anyio.BrokenResourceError("the browser closed the terminal")
            data = message.get("bytes")
            if data:
                return bytes(data)
            size = _resize(message.get("text"))
            if size is not None:
                self._size = size
                # Sizes pile up while the bus is slow: a later one follows.
                with contextlib.suppress(anyio.WouldBlock):
                    self._sizes.send_nowait(size)

    async def write(self, data: bytes) -> None:
        try:
            await self._ws.send_bytes(data)
        except (RuntimeError, OSError, WebSocketDisconnect) as e:
            raise anyio.BrokenResourceError("the browser closed the terminal") from e


def _resize(text: str | None) -> tuple[int, int] | None:
    """The size a text message asks for; None if it is not a resize (ignored)."""
    try:
        rows, cols = json.loads(text or "")["resize"]
    except (ValueError, TypeError, KeyError):
        return None
    if not (isinstance(rows, int) and isinstance(cols, int)):
        return None
    return min(max(rows, 1), _MAX_ROWS), min(max(cols, 1), _MAX_COLS)
