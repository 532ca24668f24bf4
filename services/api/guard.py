"""The read API's door: signing in, and the viewer every other route reads as.

``Who`` is the dependency each route of ``/v1`` takes (a bearer token); ``WhoStreaming``
also takes the token as ``?access_token=`` (a browser's EventSource sends no headers).
A refusal is a 401 (no token, a bad or expired one, a revoked key) and is recorded by the
``AccessRecorder``, which writes the audit events, rate-limited, off the request's path.
"""

from datetime import UTC, datetime
from typing import Annotated, Protocol

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api import models
from services.api.auth import MAX_TOKEN, Authenticator, Refused
from services.domain.access.visibility import Viewer

__all__ = ["AccessRecorder", "Guard", "Who", "WhoStreaming", "identity", "mount"]


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


def _client(request: Request) -> str | None:
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


class Guard:
    """Signs viewers in and checks every request's token; kept in ``app.state.guard``."""

    def __init__(self, auth: Authenticator, recorder: AccessRecorder | None = None) -> None:
        self.auth = auth
        self.recorder: AccessRecorder = recorder or _Unrecorded()

    def viewer(self, request: Request, token: str | None) -> Viewer:
        """Who ``request`` with ``token`` reads as. Raises HTTPException (401)."""
        try:
            return self.auth.viewer(token)
        except Refused as e:
            what = f"{request.method} {request.url.path}"
            self.recorder.refused(_key_of(token), what, e.reason, _client(request))
            raise HTTPException(e.status, e.reason, headers={"WWW-Authenticate": "Bearer"}) from e


def _guard(request: Request) -> Guard:
    guard: Guard = request.app.state.guard
    return guard


async def _who(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Viewer:
    return _guard(request).viewer(request, creds.credentials if creds else None)


async def _who_streaming(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    access_token: Annotated[
        str | None,
        Query(max_length=MAX_TOKEN, description="the token, for a browser's EventSource"),
    ] = None,
) -> Viewer:
    return _guard(request).viewer(request, creds.credentials if creds else access_token)


Who = Annotated[Viewer, Depends(_who)]
WhoStreaming = Annotated[Viewer, Depends(_who_streaming)]


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
