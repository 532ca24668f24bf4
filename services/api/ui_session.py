"""One session in the web UI, as its user: its output followed (``/ui/sessions/{id}/logs``,
server-sent events) and a terminal in it (a ticket, then a WebSocket), each asked of the
session's agent on the user's own connection to the bus (``browser.Acting``), as ``fgpu
session logs`` and ``fgpu session shell`` ask. The session's details and story are the
read API's own (``/v1/sessions/{id}``, ``/v1/sessions/{id}/history``).

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

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
import duckdb
from anyio.streams.memory import MemoryObjectSendStream
from fastapi import FastAPI, HTTPException, Query, Request, WebSocket
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.websockets import WebSocketDisconnect

from projections import queries
from services.api.browser import TICKET_S, BrowserSession, NoActing, ShellRefused
from services.api.guard import Browser, Guard, same_origin_problem
from services.api.params import NOT_FOUND, Ask
from services.api.session_routes import one_session
from services.domain.access.visibility import Viewer
from services.ports import LogError

__all__ = ["LOGS_EVERY_S", "ShellTicket", "mount"]

LOGS_EVERY_S = 2.0  # how often an open logs page asks the agent again
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
        tail: Annotated[int, Query(ge=1, le=10_000)] = 500,
    ) -> StreamingResponse:
        """The session's output (its last ``tail`` lines), asked of its agent as the user
        asks with ``fgpu session logs``: an ``output`` event now and whenever it changes
        (asked again every ``LOGS_EVERY_S``), ``problem`` when the agent cannot answer,
        ``end`` once the session has ended and its last output was sent."""
        s, viewer = who
        await query(lambda con: one_session(con, session_id, viewer))  # else 404
        live = guard.still(request, viewer)
        body = _follow(
            query, guard, s, viewer, session_id, tail, lambda: live() and not stop.is_set()
        )
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


async def _follow(
    query: Ask[Any],
    guard: Guard,
    s: BrowserSession,
    viewer: Viewer,
    session_id: str,
    tail: int,
    live: Callable[[], bool],
) -> AsyncIterator[bytes]:
    yield b"retry: 5000\n\n"
    last: tuple[bool, str, str | None] | None = None
    while live():
        row = await query(_row(viewer, session_id))
        if row is None:  # out of the viewer's scope now
            return
        ended = row["status"] in _ENDED
        if row["agent_id"] is None:
            if ended:
                yield _sse("end", {"status": row["status"]})
                return
        else:
            try:
                acting = await guard.browsers.acting(s)
                reply = await acting.logs(row["agent_id"], session_id, tail)
            except (NoActing, ShellRefused, LogError) as e:
                yield _sse("problem", {"error": str(e)})
            else:
                now = (reply.ok, reply.logs, reply.error)
                if now != last:
                    last = now
                    yield _sse("output", {"ok": reply.ok, "logs": reply.logs, "error": reply.error})
                if ended:
                    yield _sse("end", {"status": row["status"]})
                    return
        await anyio.sleep(LOGS_EVERY_S)


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
