"""The auth callout on NATS: the server's authorization requests in, signed answers out;
and the servers' connections listed and ended through the system account.

``serve_callout`` answers on ``$SYS.REQ.USER.AUTH`` as the static user ``fgpu-auth`` (in a
queue group, so several gatekeepers share the work), asking ``decide`` about each
request: a Grant becomes a user JWT with its permissions in its account (people's or the
services'), named by the access key the client gave, anything else a refusal the server
turns into "Authorization Violation". ``SystemKicker`` asks every server which connections a key
holds and disconnects them, as the static system user.
"""

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import nats
import nats.errors
import structlog
from anyio.abc import TaskStatus
from nats.aio.client import Client
from nats.aio.msg import Msg

from services.adapters.nats_auth import AUTH_USER, SYS_USER, ServerAuth
from services.adapters.nats_client import connect_or_close
from services.adapters.nats_jwt import (
    AuthRequest,
    JwtError,
    authorization_response,
    decode_request,
    user_jwt,
)
from services.ports import Connection, ConnectionsUnknown, Grant

__all__ = ["Decide", "SystemKicker", "serve_callout"]

Decide = Callable[[str, str], Awaitable[Grant | str]]
log = structlog.get_logger()
_FOREIGN = (nats.errors.Error, TimeoutError, OSError)
_QUEUE = "fgpu-gatekeepers"
_PAGE = 1024  # connections a server lists in one answer (its own default)
_ASK_S = 2.0  # how long a server has to answer the system account
_KICKS_AT_ONCE = 64


async def _connect(url: str, user: str, password: str, name: str) -> Client:
    """A connection as a static user; ``url`` may name several servers, comma-separated."""
    servers: str | list[str] = [u.strip() for u in url.split(",")] if "," in url else url
    nc = Client()
    await connect_or_close(
        nc, servers, user=user, password=password, name=name, max_reconnect_attempts=-1
    )
    return nc


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
    try:
        decision = await decide(request.user, request.password)
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
        # The name the servers know the connection by (in their lists and logs): its
        # access key, so that they can be asked for every connection of a key.
        name=request.user,
        publish=p.publish,
        subscribe=p.subscribe,
        deny_publish=p.deny_publish,
        responds=p.responds,
        expires=decision.expires,
        issuer_seed=auth.issuer_seed,
    )
    return authorization_response(request, auth.issuer_seed, jwt=jwt)


class SystemKicker:
    """The servers' account of their clients, and their disconnection, asked of them as
    the static system user (Kicker).

    Every server of a cluster is asked: the one that answers first names the others it
    is routed to (a NATS cluster is a full mesh), then each lists its own connections
    (``$SYS.REQ.SERVER.<id>.CONNZ``, filtered by name, a page at a time) and ends those
    it is told to (``$SYS.REQ.SERVER.<id>.KICK``: there is no form that reaches every
    server). Nothing names an account: the name is the filter."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc

    @classmethod
    async def connect(cls, url: str, auth: ServerAuth) -> "SystemKicker":
        return cls(await _connect(url, SYS_USER, auth.sys_password, "fgpu-gatekeeper-sys"))

    async def held(self, name: str | None = None) -> dict[Connection, str]:
        found: dict[Connection, str] = {}
        servers = await self._servers()
        async with anyio.create_task_group() as tg:
            for server_id in servers:
                tg.start_soon(self._held_on, server_id, name, found)
        return found

    async def _servers(self) -> set[str]:
        """The ids of every server of the cluster. Raises ConnectionsUnknown."""
        answer = await self._ask("$SYS.REQ.SERVER.PING.ROUTEZ", {})
        try:
            routes = answer["data"].get("routes") or ()
            return {answer["server"]["id"], *(r["remote_id"] for r in routes)}
        except (KeyError, TypeError, AttributeError) as e:
            raise ConnectionsUnknown(
                f"the cluster's routes: an answer of another form ({e})"
            ) from e

    async def _held_on(
        self, server_id: str, name: str | None, found: dict[Connection, str]
    ) -> None:
        """Add what ``server_id`` holds (of ``name``) to ``found``, page after page; one
        that closes meanwhile may shift a later page past another: the caller asks again
        until none is left. Raises ConnectionsUnknown."""
        offset = 0
        while True:
            query: dict[str, object] = {"auth": True, "offset": offset, "limit": _PAGE}
            if name is not None:
                query["user"] = name
            answer = await self._ask(f"$SYS.REQ.SERVER.{server_id}.CONNZ", query)
            try:
                page = answer["data"].get("connections") or []
                for c in page:
                    found[Connection(server_id, int(c["cid"]))] = str(c.get("authorized_user", ""))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ConnectionsUnknown(
                    f"{server_id}'s clients: an answer of another form ({e})"
                ) from e
            if len(page) < _PAGE:
                return
            offset += len(page)

    async def _ask(self, subject: str, query: dict[str, object]) -> dict[str, Any]:
        """The server's answer to ``query`` on ``subject``. Raises ConnectionsUnknown."""
        try:
            msg = await self._nc.request(subject, json.dumps(query).encode(), timeout=_ASK_S)
            answer = json.loads(msg.data)
        except (*_FOREIGN, ValueError) as e:
            raise ConnectionsUnknown(f"{subject}: {type(e).__name__}: {e}") from e
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), dict):
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise ConnectionsUnknown(f"{subject}: {error}")
        return answer

    async def kick(self, connections: Iterable[Connection]) -> None:
        at_once = anyio.CapacityLimiter(_KICKS_AT_ONCE)
        async with anyio.create_task_group() as tg:
            for c in connections:
                tg.start_soon(self._kick, c, at_once)

    async def _kick(self, connection: Connection, at_once: anyio.CapacityLimiter) -> None:
        body = json.dumps({"cid": connection.client_id}).encode()
        subject = f"$SYS.REQ.SERVER.{connection.server_id}.KICK"
        async with at_once:
            try:
                await self._nc.request(subject, body, timeout=_ASK_S)
            except _FOREIGN as e:  # gone already, or the server is: held() tells
                log.info("gatekeeper.kick_failed", client=connection.client_id, error=str(e))

    async def close(self) -> None:
        with contextlib.suppress(*_FOREIGN):
            await self._nc.close()
