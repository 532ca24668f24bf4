"""The researchers' web UI: its page at ``/``, its files under ``/ui/assets``, signing in
and out (``/ui/session``), and what it does as its user (``/ui/sessions/...``).

Plain HTML, CSS and ES modules with no build step and nothing fetched from elsewhere. The
page reads through the read API's own routes (``/v1/sessions``, ``/v1/events/stream``),
which take the browser session's cookie as they take a bearer token (``guard.py``); the
routes here are those a cookie needs (sign-in, sign-out, the CSRF token) and the UI's
writes, each the user's own request published on the user's own connection to the bus
(``browser.Acting``; ``docs/architecture.md``, "The web UI and who acts").

Who may use each route (``tests/api/test_ui.py`` enumerates them):
- ``GET /``, ``GET /ui/assets/{name}``: anyone (the page and its files, ``ASSETS``, no
  data);
- ``POST /ui/session``: anyone with a live keypair's secret, from this origin's page;
- ``GET /ui/session``, ``DELETE /ui/session``: the browser session's holder (DELETE with
  its CSRF token);
- ``POST /ui/sessions/{id}/terminate``: a browser session whose viewer sees that session
  (its owner, its domain's admins, superadmins; else 404, as the read API answers), with
  its CSRF token; the log then judges the request as it judges the CLI's.
- ``POST /ui/sessions``: a browser session, with its CSRF token: a launch, the user's own
  session request (``ui_launch.py``); the log judges it as it judges the CLI's.
- one session's logs and terminal: ``ui_session.py``; its apps: ``ui_apps.py`` (served
  on the apps origin: ``app_proxy.py``);
- the administrators' writes (``/ui/admin/...``): a domain admin's or a superadmin's
  browser session, with its CSRF token (``ui_admin.py``; resource groups:
  ``ui_admin_groups.py``; image allow-lists and aliases: ``ui_admin_images.py``); the
  registrar then judges each as it judges the CLI's.
- a folder's creation and sharing: ``ui_folders.py`` (its files: the storage service's
  routes, ``vfolder_routes.py``, each write with the CSRF token as every cookie write).
- an endpoint's scaling and tokens: ``ui_serving.py``, on an endpoint its viewer sees
  (else 404); the serving actor then judges each as it judges the CLI's.

The launch form reads ``/v1/launch-options`` (``launch_routes.py``), a read API route as
any other: the CLI or a script may read the same.
"""

from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel

from services.api import (
    models,
    ui_admin,
    ui_admin_groups,
    ui_admin_images,
    ui_apps,
    ui_folders,
    ui_launch,
    ui_serving,
    ui_session,
)
from services.api.auth import Refused
from services.api.browser import COOKIE, MAX_AGE_S
from services.api.guard import Browser, Guard, identity, same_origin_problem
from services.api.params import NOT_FOUND, Ask
from services.api.session_routes import one_session
from services.api.ui_launch import acting_errors
from services.domain.tenancy.model import Tenancy

__all__ = ["ASSETS", "SECURITY_HEADERS", "SecurityHeaders", "mount"]

_DIR = Path(__file__).with_name("ui")
_JS, _CSS = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
# Every file the page may load, by its name under /ui/assets/ (and under ui/ here): no
# other is served. vendor/ holds the third-party ones, copied from npm by ``make web``
# (vendor/MANIFEST.json names each one's package, version and digest).
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "ui.js": _JS,
    "ui.css": _CSS,
    "launch.js": _JS,
    "session.js": _JS,
    "usage.js": _JS,
    "terminal.js": _JS,
    "admin.js": _JS,
    "admin_groups.js": _JS,
    "admin_images.js": _JS,
    "apps.js": _JS,
    "folders.js": _JS,
    "pipelines.js": _JS,
    "serving.js": _JS,
    "dag.js": _JS,
    "dag.css": _CSS,
    "upload.js": _JS,
    "vendor/xterm.mjs": _JS,
    "vendor/addon-fit.mjs": _JS,
    "vendor/xterm.css": _CSS,
}
# No inline script or style, no eval, no frame around it, no form posted elsewhere.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class UiSession(BaseModel):
    """A browser session: who it is, the token its writes carry, when it ends at most."""

    identity: models.Identity
    csrf: str
    expires_at: datetime


class Terminating(BaseModel):
    """A terminate request on the log: its id (``/v1/destroys/{request_id}`` answers it)."""

    request_id: str


Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every answer of a UI path (``/`` and
    ``/ui/...``), whatever route or error made it. Other paths (the API's JSON, its
    OpenAPI pages) are left as they were."""

    def __init__(self, app: Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]):
        self.app = app
        self._headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/" or path.startswith("/ui/")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in self._headers}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + self._headers
            await send(message)

        await self.app(scope, receive, with_headers)


def mount(
    app: FastAPI,
    query: Ask[Any],
    guard: Guard,
    moved: Callable[[int], Awaitable[int]],
    stop: anyio.Event,
    tenancy: Callable[[], Tenancy],
) -> None:
    """The UI's routes on ``app``, its browser sessions kept by ``guard``; ``moved(seq)``
    returns once the projections are past ``seq``; its streams end on ``stop``;
    ``tenancy``: the tenancy as folded now (whose folders are whose)."""
    app.add_middleware(SecurityHeaders)
    _pages(app)
    _sign_in_out(app, guard)
    _acts(app, query, guard)
    ui_launch.mount(app, query, guard, moved)
    registrar = ui_admin.Registrar(query, guard, moved)
    ui_admin.mount(app, registrar)
    ui_admin_groups.mount(app, registrar, tenancy)
    ui_admin_images.mount(app, registrar)
    ui_session.mount(app, query, guard, stop)
    ui_apps.mount(app, query, guard)
    ui_folders.mount(app, query, guard, moved, tenancy)
    ui_serving.mount(app, query, guard, moved)


def _pages(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(_DIR / "index.html", media_type=ASSETS["index.html"])

    @app.get("/ui/assets/{name:path}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, f"no UI file {name!r}")
        return FileResponse(_DIR / name, media_type=ASSETS[name])


def _sign_in_out(app: FastAPI, guard: Guard) -> None:
    @app.post("/ui/session", include_in_schema=False)
    async def sign_in(body: models.TokenRequest, request: Request, response: Response) -> UiSession:
        """Sign in with a keypair: a browser session, its cookie set."""
        problem = same_origin_problem(request)
        if problem is not None:
            guard.recorder.refused(body.access_key, "sign in (UI)", problem, _client(request))
            raise HTTPException(403, problem)
        try:
            viewer, _, _ = await guard.auth.login(body.access_key, body.secret_key)
        except Refused as e:
            guard.recorder.refused(body.access_key, "sign in (UI)", e.reason, _client(request))
            raise HTTPException(e.status, e.reason) from e
        s = await guard.browsers.start(viewer.access_key, body.secret_key)
        guard.recorder.granted(viewer.access_key, f"user:{viewer.user}", _client(request))
        response.set_cookie(
            COOKIE,
            s.id,
            max_age=MAX_AGE_S,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return UiSession(identity=identity(viewer), csrf=s.csrf, expires_at=_at(s.expires))

    @app.get("/ui/session", include_in_schema=False)
    async def current(who: Browser) -> UiSession:
        """The browser session of this cookie: who, and its CSRF token (for a page
        loaded again)."""
        s, viewer = who
        return UiSession(identity=identity(viewer), csrf=s.csrf, expires_at=_at(s.expires))

    @app.delete("/ui/session", include_in_schema=False, status_code=204)
    async def sign_out(who: Browser, request: Request, response: Response) -> None:
        """Sign out: the session ends on the server, its connection closed, its cookie
        cleared."""
        await guard.browsers.end(who[0].id)
        response.delete_cookie(
            COOKIE, path="/", secure=request.url.scheme == "https", httponly=True, samesite="strict"
        )


def _acts(app: FastAPI, query: Ask[Any], guard: Guard) -> None:
    @app.post("/ui/sessions/{session_id}/terminate", include_in_schema=False, responses=NOT_FOUND)
    async def terminate(session_id: str, who: Browser) -> Terminating:
        """Ask to end a session the viewer sees, as the user's own request (what
        ``fgpu session rm`` sends)."""
        s, viewer = who
        await query(lambda con: one_session(con, session_id, viewer))  # else 404
        with acting_errors():
            acting = await guard.browsers.acting(s)
            return Terminating(request_id=await acting.destroy(session_id))


def _at(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _client(request: Request) -> str | None:
    return request.client.host if request.client is not None else None
