"""The apps origin: a session's apps (Jupyter, TensorBoard, any service its image
declares) served through this host, on a listener of their own (``fgpu up --apps-port``,
``fgpu api --apps-port``), each HTTP request and WebSocket relayed over an app channel
opened as the user, on the user's own connection (``browser.Acting.app``), as ``fgpu
session app`` opens each connection: the agent judges the user's key and writes every
opening and closing on the log. No port of the agent or of the container is opened.

Why another origin, and what stops an app's page (hostile: the container's) from acting
as its user: ``docs/architecture.md``, "Apps through the proxy". In short: the UI's pages
and their CSRF token live on the UI's origin, which an app's script cannot read; every UI
write checks that it came from the UI's origin; the app gets none of fgpu's cookies.

Who may use each route (``tests/api/test_ui_apps.py`` tries the others):
- ``GET /open?ticket=``: the browser that asked the UI for that ticket (its UI cookie
  names the same browser session), once, within ``app_grants.TICKET_S``: it sets the
  grant's cookie for that one app and sends the browser to it;
- ``/apps/{session}/{service}/...`` (any method, and WebSockets from this origin's own
  pages): a live grant for that very session and service, whose browser session lives
  and whose user owns the session; then the agent judges the user's key.
"""

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import anyio
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocket

from projections import queries
from services.api.app_grants import APP_COOKIE, GRANT_S, AppGrant, AppGrants, cookie_values
from services.api.app_relay import Pipe, forwarded, relay_http
from services.api.app_socket import relay_socket
from services.api.auth import Refused
from services.api.browser import COOKIE, Acting, NoActing, ShellRefused
from services.api.guard import Guard, own_origin
from services.api.params import Ask
from services.domain.access.visibility import Viewer
from services.ports import LogError

__all__ = ["AppsOrigin"]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_APP = re.compile(r"^/apps/([A-Za-z0-9_-]{1,64})/([A-Za-z0-9_.-]{1,64})(/.*)?$")
_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class _No(Exception):
    """A request refused: its status and why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


class AppsOrigin:
    """The apps origin's ASGI app, over the UI's ``guard`` (its browser sessions), its
    reads (``query``) and the ``grants`` its ticket route hands out."""

    def __init__(self, query: Ask[Any], guard: Guard, grants: AppGrants) -> None:
        self.query, self.guard, self.grants = query, guard, grants

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        path: str = scope["path"]
        try:
            if scope["type"] == "http" and path == "/open":
                await self._open(scope, send)
                return
            found = _APP.match(path)
            if found is None:
                raise _No(404, "no such app: open it from the web UI")
            sid, service, rest = found.groups()
            if rest is None and scope["type"] == "http":  # relative links need the slash
                await _answer(send, 308, b"", [(b"location", f"{path}/".encode())])
                return
            acting, agent_id = await self._admitted(scope, sid, service)
        except _No as no:
            if no.status in (401, 403):  # refusals are audited; a 404 (a favicon) is not
                self.guard.refused(HTTPConnection(scope), None, no.why)
            await _refuse(scope, receive, send, no)
            return
        prefix = f"/apps/{sid}/{service}"
        target = _target(scope, len(prefix))
        host = _host(scope)
        headers = forwarded(scope["headers"], host.encode(), prefix)
        if scope["type"] == "http":
            await _proxy_http(
                scope, receive, send, acting, (agent_id, sid, service), target, headers
            )
        else:
            websocket = WebSocket(scope, receive, send)
            await _proxy_socket(websocket, acting, (agent_id, sid, service), host, target, headers)

    async def _open(self, scope: MutableMapping[str, Any], send: Send) -> None:
        """Exchange a ticket for the grant's cookie, and go to the app."""
        ticket = parse_qs(scope.get("query_string", b"").decode()).get("ticket", [""])[0]
        conn = HTTPConnection(scope)
        redeemed = self.grants.redeem(ticket)
        if redeemed is None:
            raise _No(403, "no valid ticket: open the app from the web UI again")
        word, grant = redeemed
        # The browser that asked for the ticket, and no other: its UI cookie (cookies
        # ignore ports) names the same browser session. A ticket leaked to another
        # browser opens nothing there.
        if grant.browser not in cookie_values(conn.headers.get("cookie", ""), COOKIE):
            raise _No(403, "this ticket is another browser's: open the app from the web UI")
        path = f"/apps/{grant.session_id}/{grant.service}/"
        secure = "; Secure" if conn.url.scheme == "https" else ""
        cookie = (
            f"{APP_COOKIE}={word}; Path={path}; Max-Age={int(GRANT_S)}; HttpOnly; "
            f"SameSite=Strict{secure}"
        )
        await _answer(
            send, 303, b"", [(b"location", path.encode()), (b"set-cookie", cookie.encode())]
        )

    async def _admitted(
        self, scope: MutableMapping[str, Any], sid: str, service: str
    ) -> tuple[Acting, str]:
        """The user's connection and the session's agent, if this request may reach the
        app. Raises _No."""
        conn = HTTPConnection(scope)
        if scope["type"] == "websocket" and conn.headers.get("origin") != own_origin(conn):
            raise _No(403, "a WebSocket to an app opens from the app's own pages")
        grant = self.grants.admit(
            cookie_values(conn.headers.get("cookie", ""), APP_COOKIE), sid, service
        )
        if grant is None:
            raise _No(403, "no grant for this app here: open it from the web UI")
        viewer, acting = await self._user(grant)
        row = await self.query(lambda con: _own_row(con, sid, viewer))
        if row is None:
            raise _No(404, f"no session {sid!r} of yours")
        if row["status"] != "RUNNING" or row["agent_id"] is None:
            raise _No(409, f"session {sid} is not running ({row['status']})")
        return acting, str(row["agent_id"])

    async def _user(self, grant: AppGrant) -> tuple[Viewer, Acting]:
        """Who the grant's browser session is, and its connection. Raises _No."""
        s = await self.guard.browsers.get(grant.browser)
        if s is None:
            raise _No(401, "the web UI's session ended: sign in and open the app again")
        try:
            viewer = self.guard.auth.holder(s.access_key)
        except Refused as e:
            await self.guard.browsers.end(s.id)
            raise _No(401, e.reason) from e
        try:
            return viewer, await self.guard.browsers.acting(s)
        except (NoActing, LogError) as e:
            raise _No(503, f"cannot act as you now: {e}") from e


def _own_row(con: Any, sid: str, viewer: Viewer) -> dict[str, Any] | None:
    """The session's row if it is the viewer's own (an app is its owner's alone)."""
    _, rows = queries.session_rows(con, session_id=sid, scope=viewer.scope)
    if not rows or rows[0]["owner"] != viewer.access_key:
        return None
    return rows[0]


def _host(scope: MutableMapping[str, Any]) -> str:
    """The Host the browser asked for."""
    for name, value in scope["headers"]:
        if name == b"host":
            return str(value.decode("latin-1"))
    return "localhost"


def _target(scope: MutableMapping[str, Any], cut: int) -> str:
    """The request's path under the app's prefix, with its query, as the app gets it."""
    raw = scope.get("raw_path") or scope["path"].encode()
    path = raw.decode("latin-1")[cut:] or "/"
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


async def _proxy_http(
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    acting: Acting,
    where: tuple[str, str, str],
    target: str,
    headers: list[tuple[bytes, bytes]],
) -> None:
    refused: list[str] = []
    with Pipe() as pipe:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_channel, acting, where, pipe, refused)
            started = await relay_http(scope, receive, send, pipe, target, headers)
            tg.cancel_scope.cancel()  # the answer is whole: the channel closes (End is sent)
    if not started:
        why = refused[0] if refused else "the app closed the connection without answering"
        await _answer(send, 502, why.encode(), [(b"content-type", b"text/plain; charset=utf-8")])


async def _proxy_socket(
    websocket: WebSocket,
    acting: Acting,
    where: tuple[str, str, str],
    host: str,
    target: str,
    headers: list[tuple[bytes, bytes]],
) -> None:
    with Pipe() as pipe:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_channel, acting, where, pipe, [])
            await relay_socket(websocket, pipe, host, target, headers)
            tg.cancel_scope.cancel()


async def _channel(
    acting: Acting, where: tuple[str, str, str], pipe: Pipe, refused: list[str]
) -> None:
    """The app channel of one connection, until it closes; a refusal is kept in
    ``refused``. Either way the proxy's side hears the end."""
    agent_id, sid, service = where
    try:
        await acting.app(agent_id, sid, service, pipe)
    except ShellRefused as e:
        refused.append(f"the app was not opened: {e}")
    finally:
        pipe.closed()


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers + _HEADERS})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _refuse(scope: MutableMapping[str, Any], receive: Receive, send: Send, no: _No) -> None:
    if scope["type"] == "websocket":
        await WebSocket(scope, receive, send).close(code=1008, reason=no.why[:120])
        return
    body = no.why.encode()
    await _answer(send, no.status, body, [(b"content-type", b"text/plain; charset=utf-8")])
