"""The read API's door: signing in, and the viewer every other route reads as.

``Who`` is the dependency each route of ``/v1`` takes: a bearer token, else the web UI's
browser session cookie (``browser.py``); ``WhoStreaming`` also takes the token as
``?access_token=`` (a browser's EventSource sends no headers). A request that the cookie
authenticates and that may change something (any method but GET, HEAD, OPTIONS) must also
come from this origin (``Origin``, ``Sec-Fetch-Site``) and carry the session's CSRF token
(``X-CSRF-Token``), or it is refused (403): a bearer token is never sent by a browser on its
own, a cookie is. A refusal is a 401 (no token, a bad or expired one, a revoked key, an
ended browser session) or that 403, and is recorded by the ``AccessRecorder``, which writes
the audit events, rate-limited, off the request's path.
"""

import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Protocol

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from services.api import models
from services.api.auth import MAX_TOKEN, Authenticator, Refused
from services.api.browser import COOKIE, BrowserSession, BrowserSessions
from services.domain.access.visibility import Viewer

__all__ = [
    "CSRF_HEADER",
    "AccessRecorder",
    "Browser",
    "Guard",
    "Who",
    "WhoStreaming",
    "identity",
    "mount",
    "same_origin_problem",
]

CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class AccessRecorder(Protocol):
    """Where sign-ins and refusals are told, to be audited (``AccessAudit``). Never
    blocks."""

    def granted(self, owner: str, identity: str, client: str | None = None) -> None: ...

    def refused(
        self, owner: str | None, what: str, reason: str, client: str | None = None
    ) -> None: ...


class _Unrecorded:
    def granted(self, owner: str, identity: str, client: str | None = None) -> None:
        pass

    def refused(self, owner: str | None, what: str, reason: str, client: str | None = None) -> None:
        pass


def _client(request: HTTPConnection) -> str | None:
    return request.client.host if request.client is not None else None


_bearer = HTTPBearer(
    auto_error=False,
    description="a token from POST /v1/auth/token (none needed on a cluster with no tenancy)",
)


def identity(v: Viewer) -> models.Identity:
    sees = "everything" if v.scope.everything else "domain" if v.scope.domain else "own"
    return models.Identity(
        access_key=v.access_key, user=v.user, role=v.role.value, domain=v.domain, sees=sees
    )


def _key_of(token: str | None) -> str | None:
    """The access key a token claims (unchecked), to name in the audit log."""
    parts = (token or "").split(".")
    return parts[1][:64] if len(parts) == 4 else None


def own_origin(request: HTTPConnection) -> str:
    """This server's origin as the request reached it (scheme: TLS, or a proxy's word; a
    WebSocket's ws and wss are http's and https's)."""
    scheme = {"ws": "http", "wss": "https"}.get(request.url.scheme, request.url.scheme)
    return f"{scheme}://{request.url.netloc}"


def same_origin_problem(request: HTTPConnection) -> str | None:
    """Why ``request`` may not be a page of this origin's own (None: it is). A browser
    sends ``Origin`` with every POST, PUT, PATCH and DELETE, and ``Sec-Fetch-Site`` with
    every request, and a page cannot forge either."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"a request from another site (Sec-Fetch-Site: {site[:32]})"
    origin = request.headers.get("origin")
    if origin is None:
        return "no Origin header: a write through the web UI comes from its own page"
    if origin != own_origin(request):
        return f"a request from another origin ({origin[:100]})"
    return None


class Guard:
    """Signs viewers in and checks every request's token or browser session; kept in
    ``app.state.guard``."""

    def __init__(
        self,
        auth: Authenticator,
        recorder: AccessRecorder | None = None,
        browsers: BrowserSessions | None = None,
    ) -> None:
        self.auth = auth
        self.recorder: AccessRecorder = recorder or _Unrecorded()
        self.browsers = browsers or BrowserSessions(lambda: 0.0)

    def _refuse(self, request: HTTPConnection, key: str | None, e: Refused) -> HTTPException:
        what = f"{request.scope.get('method', 'WEBSOCKET')} {request.url.path}"
        self.recorder.refused(key, what, e.reason, _client(request))
        return HTTPException(e.status, e.reason, headers={"WWW-Authenticate": "Bearer"})

    def viewer(self, request: Request, token: str | None) -> Viewer:
        """Who ``request`` with ``token`` reads as. Raises HTTPException (401)."""
        try:
            return self.auth.viewer(token)
        except Refused as e:
            raise self._refuse(request, _key_of(token), e) from e

    async def browser(self, request: HTTPConnection) -> tuple[BrowserSession, Viewer]:
        """The browser session of ``request``'s cookie and who it reads as, as the
        tenancy stands now (a revoked key or a removed user ends the session); for a
        request that may change something, checked against CSRF (a WebSocket is checked
        by its caller: it carries no header of the page's). Raises HTTPException (401:
        none, ended; 403: a write without its token, or from another origin)."""
        sid = request.cookies.get(COOKIE, "")
        s = await self.browsers.get(sid) if sid else None
        if s is None:
            raise self._refuse(request, None, Refused(401, "sign in: the browser session ended"))
        try:
            viewer = self.auth.holder(s.access_key)
        except Refused as e:
            await self.browsers.end(s.id)
            raise self._refuse(request, s.access_key, e) from e
        if request.scope["type"] == "http" and request.scope["method"] not in SAFE_METHODS:
            problem = same_origin_problem(request)
            given = request.headers.get(CSRF_HEADER, "")
            if problem is None and not hmac.compare_digest(given.encode(), s.csrf.encode()):
                problem = f"no valid {CSRF_HEADER} header: this write is not the UI's own"
            if problem is not None:
                raise self._refuse(request, s.access_key, Refused(403, problem))
        return s, viewer

    def refused(self, request: HTTPConnection, key: str | None, why: str) -> None:
        """Record a refusal of ``request`` (by ``key``, if known) for the audit."""
        what = f"{request.scope.get('method', 'WEBSOCKET')} {request.url.path}"
        self.recorder.refused(key, what, why, _client(request))

    def still(self, request: HTTPConnection, viewer: Viewer) -> Callable[[], bool]:
        """Whether the reader of ``request`` may read on (a stream asks as it goes): its
        keypair lives, and the browser session it came with, if any, has not ended."""
        sid = None if request.headers.get("authorization") else request.cookies.get(COOKIE)
        if sid is None:
            return lambda: self.auth.live(viewer)
        return lambda: self.auth.live(viewer) and self.browsers.holds(sid)


def _guard(request: Request) -> Guard:
    guard: Guard = request.app.state.guard
    return guard


async def _viewer(request: Request, token: str | None) -> Viewer:
    guard = _guard(request)
    if token is None and COOKIE in request.cookies and not guard.auth.open:
        return (await guard.browser(request))[1]
    return guard.viewer(request, token)


async def _who(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Viewer:
    return await _viewer(request, creds.credentials if creds else None)


async def _who_streaming(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    access_token: Annotated[
        str | None,
        Query(max_length=MAX_TOKEN, description="the token, for a browser's EventSource"),
    ] = None,
) -> Viewer:
    return await _viewer(request, creds.credentials if creds else access_token)


async def _browser(request: Request) -> tuple[BrowserSession, Viewer]:
    return await _guard(request).browser(request)


Who = Annotated[Viewer, Depends(_who)]
WhoStreaming = Annotated[Viewer, Depends(_who_streaming)]
# A browser session (the cookie) only: for what the UI does as its user.
Browser = Annotated[tuple[BrowserSession, Viewer], Depends(_browser)]


def mount(app: FastAPI, guard: Guard) -> None:
    """Keep ``guard`` for ``Who``; add ``POST /v1/auth/token`` and ``GET /v1/auth/whoami``."""
    app.state.guard = guard

    @app.post(
        "/v1/auth/token",
        tags=["auth"],
        responses={
            400: {"model": models.Problem, "description": "a body that is not JSON"},
            401: {"model": models.Problem, "description": "refused"},
        },
    )
    async def token(body: models.TokenRequest, request: Request) -> models.Token:
        """Sign in with a keypair: a bearer token for this API, good for an hour (or until
        the keypair is revoked). Only people sign in: services read the log."""
        try:
            viewer, token, expires = await guard.auth.login(body.access_key, body.secret_key)
        except Refused as e:
            guard.recorder.refused(body.access_key, "sign in", e.reason, _client(request))
            raise HTTPException(e.status, e.reason) from e
        guard.recorder.granted(viewer.access_key, f"user:{viewer.user}", _client(request))
        return models.Token(
            token=token,
            expires_at=datetime.fromtimestamp(expires, UTC),
            identity=identity(viewer),
        )

    @app.get("/v1/auth/whoami", tags=["auth"])
    async def whoami(viewer: Who) -> models.Identity:
        """Who this request reads as."""
        return identity(viewer)
