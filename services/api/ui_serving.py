"""The web UI's serving actions: scaling an endpoint, making and revoking its tokens, as
the user's own requests.

Each publishes what ``fgpu serve scale`` and ``fgpu serve token create|revoke`` send, on
the user's own connection to the bus (``browser.Acting.serve``), in the user's name; the
serving actor judges it as it judges the CLI's (an endpoint's owner, its domain's
administrators, a superadmin may), and the answer waits a little (``DECIDED_WITHIN_S``)
for that judgement, which comes back as the log gave it.

A token is made here, as the CLI makes it: the answer shows it once, and only its
SHA-256 goes on the log; nothing here keeps it.

Who may use each route (``tests/api/test_ui_serving_writes.py``,
``tests/api/test_ui_adversarial.py``):
- ``POST /ui/endpoints/{ref}/scale``, ``POST /ui/endpoints/{ref}/tokens`` and ``POST
  /ui/endpoints/{ref}/tokens/{token_id}/revoke``: a browser session, with its CSRF token
  (``guard.py``), on an endpoint its viewer sees as ``/v1/endpoints/{ref}`` shows it (else
  404, before anything is sent); the serving actor then decides whether the user may.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import CreateToken, RevokeToken, ScaleEndpoint, ServeCommand
from services.api.browser import BrowserSession
from services.api.endpoint_routes import seen_endpoint
from services.api.guard import Browser, Guard
from services.api.params import NOT_FOUND, Ask, form_request_id
from services.api.ui_admin import registrar_answer
from services.api.ui_launch import acting_errors
from services.domain.request_ids import new_request_id
from services.domain.serving.rules import MAX_REPLICAS
from services.domain.serving.tokens import new_token

__all__ = ["ScaleForm", "ServeAsked", "TokenForm", "mount"]

MAX_TOKEN_DAYS = 3650.0  # as ``fgpu serve token create --days`` allows


class ScaleForm(BaseModel):
    """How many replicas of the revision taking the traffic, as ``fgpu serve scale``
    (required: None is refused once the endpoint is found, so that a form about another's
    endpoint is answered 404 whatever it holds)."""

    replicas: int | None = Field(default=None, ge=0, le=MAX_REPLICAS)
    request_id: str | None = Field(default=None, max_length=64)


class TokenForm(BaseModel):
    """A new token, good for ``days``. No request id: a token asked for again would be
    another token, never the one already on the log."""

    days: float = Field(default=30.0, gt=0, le=MAX_TOKEN_DAYS)


class ServeAsked(BaseModel):
    """A serve request on the log, and the serving actor's answer if it came in time."""

    request_id: str
    decided: bool = Field(description="the serving actor answered within the wait")
    applied: bool
    code: str | None = Field(description="forbidden, invalid or conflict, as the log gave it")
    refused: str | None = Field(description="the refusal's reason, as the log gave it")
    token: str | None = Field(None, description="a new token: shown in this answer alone")
    token_id: str | None = None
    expires_at: datetime | None = None


def mount(
    app: FastAPI, query: Ask[Any], guard: Guard, moved: Callable[[int], Awaitable[int]]
) -> None:
    """The serving actions on ``app``; ``moved(seq)`` returns once the projections are past
    ``seq``."""

    async def asked(s: BrowserSession, command: ServeCommand, rid: str) -> ServeAsked:
        with acting_errors():
            acting = await guard.browsers.acting(s)
            request_id = await acting.serve(command, rid)
        row = await registrar_answer(query, moved, request_id)  # serve answers beside
        applied = row is not None and bool(row["applied"])
        return ServeAsked(
            request_id=request_id,
            decided=row is not None,
            applied=applied,
            code=None if row is None else row["code"],
            refused=None if row is None or applied else row["reason"],
        )

    @app.post("/ui/endpoints/{ref}/scale", include_in_schema=False, responses=NOT_FOUND)
    async def scale(ref: str, who: Browser, form: ScaleForm | None = None) -> ServeAsked:
        """Run this many replicas of an endpoint the viewer sees (what ``fgpu serve
        scale`` sends), and wait a little for the serving actor's answer."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)  # else 404, nothing sent
        if form is None or form.replicas is None:
            raise HTTPException(422, "give replicas: how many")
        command = ScaleEndpoint(endpoint_id=ep.endpoint_id, replicas=form.replicas)
        return await asked(s, command, form_request_id(form.request_id))

    @app.post("/ui/endpoints/{ref}/tokens", include_in_schema=False, responses=NOT_FOUND)
    async def token(ref: str, who: Browser, form: TokenForm | None = None) -> ServeAsked:
        """Make a token for an endpoint the viewer sees (what ``fgpu serve token create``
        sends): the answer holds it, once."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)
        days = (form or TokenForm()).days
        value, token_id, digest = new_token()
        until = datetime.now(UTC) + timedelta(days=days)
        command = CreateToken(
            endpoint_id=ep.endpoint_id, token_id=token_id, sha256=digest, expires_at=until
        )
        answer = await asked(s, command, new_request_id())
        made = {"token_id": token_id, "expires_at": until}
        if not answer.applied:  # refused, or undecided: its id alone, to revoke it by if made
            return answer.model_copy(update=made)
        return answer.model_copy(update={**made, "token": value})

    @app.post(
        "/ui/endpoints/{ref}/tokens/{token_id}/revoke",
        include_in_schema=False,
        responses=NOT_FOUND,
    )
    async def revoke(ref: str, token_id: str, who: Browser) -> ServeAsked:
        """Revoke a token of an endpoint the viewer sees (what ``fgpu serve token
        revoke`` sends)."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)
        command = RevokeToken(endpoint_id=ep.endpoint_id, token_id=token_id)
        return await asked(s, command, new_request_id())
