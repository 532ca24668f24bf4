"""The web UI's serving actions: scaling an endpoint, moving it to one of its revisions
(a rollback, or a roll forward), splitting its traffic between revisions, setting its
autoscaling rule, making and revoking its tokens, as the user's own requests.

Each publishes what ``fgpu serve scale|rollback --to|traffic|autoscale`` and ``fgpu serve
token create|revoke`` send, on the user's own connection to the bus
(``browser.Acting.serve``), in the user's name; the serving actor judges it as it judges
the CLI's (an endpoint's owner, its domain's administrators, a superadmin may), and the
answer waits a little (``DECIDED_WITHIN_S``) for that judgement, which comes back as the
log gave it.

A token is made here, as the CLI makes it: the answer shows it once, and only its
SHA-256 goes on the log; nothing here keeps it.

Who may use each route (``tests/api/test_ui_serving_writes.py``,
``tests/api/test_ui_adversarial.py``): ``POST /ui/endpoints/{ref}/scale``, ``.../point``,
``.../traffic``, ``.../autoscale``, ``.../tokens`` and ``.../tokens/{token_id}/revoke``:
a browser session, with its CSRF token (``guard.py``), on an endpoint its viewer sees as
``/v1/endpoints/{ref}`` shows it (else 404, before anything is sent); the serving actor
then decides whether the user may.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from events import (
    AutoscaleMetric,
    AutoscaleRule,
    CreateToken,
    PointEndpoint,
    RevokeToken,
    RolloutPolicy,
    ScaleEndpoint,
    ServeCommand,
    SetAutoscale,
    SetTraffic,
    TrafficShare,
)
from services.api.browser import BrowserSession
from services.api.endpoint_routes import seen_endpoint
from services.api.guard import Browser, Guard
from services.api.params import NOT_FOUND, Ask, form_request_id
from services.api.ui_admin import registrar_answer
from services.api.ui_launch import acting_errors
from services.domain.request_ids import new_request_id
from services.domain.serving.rules import MAX_REPLICAS, policy_problem, rule_problem
from services.domain.serving.tokens import new_token

__all__ = [
    "AutoscaleForm",
    "PointForm",
    "ScaleForm",
    "ServeAsked",
    "ShareIn",
    "TokenForm",
    "TrafficForm",
    "mount",
]

MAX_TOKEN_DAYS = 3650.0  # as ``fgpu serve token create --days`` allows


class ScaleForm(BaseModel):
    """How many replicas of the revision taking the traffic, as ``fgpu serve scale``
    (required: None is refused once the endpoint is found, so that a form about another's
    endpoint is answered 404 whatever it holds)."""

    replicas: int | None = Field(default=None, ge=0, le=MAX_REPLICAS)
    request_id: str | None = Field(default=None, max_length=64)


class PointForm(BaseModel):
    """Move all traffic and replicas to ``revision``, as ``fgpu serve rollback --to``
    (a rolling update unless ``at_once``; required fields are checked once the endpoint
    is found, so another's endpoint is answered 404 whatever the form holds)."""

    revision: int | None = Field(default=None, ge=1)
    at_once: bool = False
    max_surge: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max_unavailable: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    request_id: str | None = Field(default=None, max_length=64)

    def policy(self) -> RolloutPolicy | None:
        """The rollout's policy (None: at once). Raises HTTPException 422 with the serving
        rules' own line when it could not move."""
        if self.at_once:
            return None
        policy = RolloutPolicy(max_surge=self.max_surge, max_unavailable=self.max_unavailable)
        problem = policy_problem(policy)
        if problem is not None:
            raise HTTPException(422, problem)
        return policy


class ShareIn(BaseModel):
    revision: int = Field(ge=1)
    traffic: int = Field(ge=0, le=100)


class TrafficForm(BaseModel):
    """The traffic split, whole, as ``fgpu serve traffic`` (a revision not named runs no
    replica; ``replicas`` for a named one that has none). Whether the shares make 100 and
    name revisions the endpoint has is the serving actor's to judge, as the CLI's."""

    shares: list[ShareIn] = Field(default_factory=list, max_length=MAX_REPLICAS)
    replicas: int | None = Field(default=None, ge=0, le=MAX_REPLICAS)
    request_id: str | None = Field(default=None, max_length=64)


class AutoscaleForm(BaseModel):
    """An autoscaling rule, as ``fgpu serve autoscale`` (or ``off``: none). Judged by the
    serving rules' own ``rule_problem`` before anything is sent."""

    off: bool = False
    metric: AutoscaleMetric | None = None
    up: float | None = None
    down: float | None = None
    step: int = 1
    cooldown_s: float = 60.0
    min_replicas: int = 1
    max_replicas: int | None = None
    cold_start_s: float = 30.0
    request_id: str | None = Field(default=None, max_length=64)

    def rule(self) -> AutoscaleRule | None:
        """The rule (None: off). Raises HTTPException 422 with the rule's problem."""
        if self.off:
            return None
        metric, up, down, most = self.metric, self.up, self.down, self.max_replicas
        if metric is None or up is None or down is None or most is None:
            raise HTTPException(422, "give metric, up, down and max_replicas (or off)")
        rule = AutoscaleRule(
            metric=metric,
            up=up,
            down=down,
            step=self.step,
            cooldown_s=self.cooldown_s,
            min_replicas=self.min_replicas,
            max_replicas=most,
            cold_start_s=self.cold_start_s,
        )
        problem = rule_problem(rule)
        if problem is not None:
            raise HTTPException(422, problem)
        return rule


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


Asked = Callable[[BrowserSession, ServeCommand, str], Awaitable[ServeAsked]]


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

    _mount_replicas(app, query, asked)
    _mount_tokens(app, query, asked)


def _mount_replicas(app: FastAPI, query: Ask[Any], asked: Asked) -> None:
    """What runs: the replicas' count, the revision taking the traffic, the rule."""

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

    @app.post("/ui/endpoints/{ref}/point", include_in_schema=False, responses=NOT_FOUND)
    async def point(ref: str, who: Browser, form: PointForm | None = None) -> ServeAsked:
        """Move an endpoint the viewer sees to one of its revisions (what ``fgpu serve
        rollback --to`` sends): a rollback, or a roll forward to a newer one."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)
        if form is None or form.revision is None:
            raise HTTPException(422, "give revision: which")
        command = PointEndpoint(
            endpoint_id=ep.endpoint_id, revision=form.revision, rollout=form.policy()
        )
        return await asked(s, command, form_request_id(form.request_id))

    @app.post("/ui/endpoints/{ref}/traffic", include_in_schema=False, responses=NOT_FOUND)
    async def traffic(ref: str, who: Browser, form: TrafficForm | None = None) -> ServeAsked:
        """Split the traffic of an endpoint the viewer sees between its revisions (what
        ``fgpu serve traffic`` sends): blue/green."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)
        if form is None or not form.shares:
            raise HTTPException(422, "give shares: each revision's percent of the traffic")
        split = tuple(TrafficShare(revision=x.revision, traffic=x.traffic) for x in form.shares)
        command = SetTraffic(endpoint_id=ep.endpoint_id, shares=split, replicas=form.replicas)
        return await asked(s, command, form_request_id(form.request_id))

    @app.post("/ui/endpoints/{ref}/autoscale", include_in_schema=False, responses=NOT_FOUND)
    async def autoscale(ref: str, who: Browser, form: AutoscaleForm | None = None) -> ServeAsked:
        """Set the autoscaling rule of an endpoint the viewer sees (what ``fgpu serve
        autoscale`` sends), or turn it off."""
        s, viewer = who
        ep = await seen_endpoint(query, viewer.scope, ref)
        if form is None:
            raise HTTPException(422, "give a rule, or off")
        command = SetAutoscale(endpoint_id=ep.endpoint_id, rule=form.rule())
        return await asked(s, command, form_request_id(form.request_id))


def _mount_tokens(app: FastAPI, query: Ask[Any], asked: Asked) -> None:
    """Who may call it: tokens made and revoked."""

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
