"""The auth callout on NATS: the server's authorization requests in, signed answers out;
and disconnecting a connection through the system account.

``serve_callout`` answers on ``$SYS.REQ.USER.AUTH`` as the static user ``fgpu-auth`` (in a
queue group, so several gatekeepers share the work), asking ``decide`` about each
request: a Grant becomes a user JWT with its permissions in its account (people's or the
services'), anything else
a refusal the server turns into "Authorization Violation". ``SystemKicker`` disconnects
a connection as the static system user (``$SYS.REQ.SERVER.<id>.KICK``).
"""

import contextlib
import json
from collections.abc import Awaitable, Callable

import anyio
import nats
import nats.errors
import structlog
from anyio.abc import TaskStatus
from nats.aio.client import Client
from nats.aio.msg import Msg

from services.adapters.nats_auth import AUTH_USER, SYS_USER, ServerAuth
from services.adapters.nats_jwt import (
    AuthRequest,
    JwtError,
    authorization_response,
    decode_request,
    user_jwt,
)
from services.ports import Connection, Grant

__all__ = ["Decide", "SystemKicker", "serve_callout"]

Decide = Callable[[str, str, Connection], Awaitable[Grant | str]]
log = structlog.get_logger()
_FOREIGN = (nats.errors.Error, TimeoutError, OSError)
_QUEUE = "fgpu-gatekeepers"


async def _connect(url: str, user: str, password: str, name: str) -> Client:
    """A connection as a static user; ``url`` may name several servers, comma-separated."""
    servers: str | list[str] = [u.strip() for u in url.split(",")] if "," in url else url
    return await nats.connect(
        servers, user=user, password=password, name=name, max_reconnect_attempts=-1
    )


async def serve_callout(
    url: str,
    auth: ServerAuth,
    decide: Decide,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer the server's authorization requests with ``decide`` until cancelled.
    Ready (``task_status``) once it listens."""
    nc = await _connect(url, AUTH_USER, auth.auth_password, "fgpu-gatekeeper")

    async def on_request(msg: Msg) -> None:
        try:
            request = decode_request(msg.data)
        except JwtError as e:
            log.warning("gatekeeper.bad_request", error=str(e))
            return  # not the server's: nothing to answer
        answer = await _answer(request, auth, decide)
        with contextlib.suppress(*_FOREIGN):
            await msg.respond(answer)

    try:
        await nc.subscribe("$SYS.REQ.USER.AUTH", queue=_QUEUE, cb=on_request)
        await nc.flush()
        task_status.started()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(*_FOREIGN):
            await nc.close()


async def _answer(request: AuthRequest, auth: ServerAuth, decide: Decide) -> bytes:
    connection = Connection(request.server_id, request.client_id)
    try:
        decision = await decide(request.user, request.password, connection)
    except Exception as e:  # a failing gatekeeper refuses; it lets nobody in by accident
        log.exception("gatekeeper.failed")
        decision = f"the gatekeeper failed: {type(e).__name__}"
    if isinstance(decision, str):
        log.info("gatekeeper.refused", access_key=request.user, why=decision)
        return authorization_response(request, auth.issuer_seed, error=decision)
    p = decision.permissions
    jwt = user_jwt(
        request,
        account=p.account,
        name=decision.name,
        publish=p.publish,
        subscribe=p.subscribe,
        deny_publish=p.deny_publish,
        responds=p.responds,
        expires=decision.expires,
        issuer_seed=auth.issuer_seed,
    )
    return authorization_response(request, auth.issuer_seed, jwt=jwt)


class SystemKicker:
    """Disconnects connections as the static system user (Kicker)."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc

    @classmethod
    async def connect(cls, url: str, auth: ServerAuth) -> "SystemKicker":
        return cls(await _connect(url, SYS_USER, auth.sys_password, "fgpu-gatekeeper-sys"))

    async def kick(self, connection: Connection) -> None:
        body = json.dumps({"cid": connection.client_id}).encode()
        subject = f"$SYS.REQ.SERVER.{connection.server_id}.KICK"
        try:
            await self._nc.request(subject, body, timeout=5)
        except _FOREIGN as e:  # gone already, or the server is: nothing left to end
            log.info("gatekeeper.kick_failed", client=connection.client_id, error=str(e))

    async def close(self) -> None:
        with contextlib.suppress(*_FOREIGN):
            await self._nc.close()
