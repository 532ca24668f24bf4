"""Requests to JetStream's API (``$JS.API.<endpoint>``) and their answers, for the adapters
that speak it without nats-py's JetStream context: the log (``jetstream``) and the
consumers reads go through (``jetstream_readers``).

Only the log port's errors come out: a refusal by its code (``nats_client.js_error``),
anything else through ``NatsClient.call``.

While a cluster elects a leader (a server holding one was lost: nats-server's followers
wait 4-9 s of silence before they vote) the API does not answer, or answers that
JetStream is unavailable; a question is asked again every ``ASK_AGAIN_S`` and the first
real answer to any of its asks is taken, so a caller goes on as soon as there is a leader.
"""

import asyncio
import json
from typing import Any

from nats.aio.msg import Msg

from services.adapters.nats_client import JsErr, NatsClient, NoResponders, TimedOut, js_error
from services.ports import LogError

__all__ = ["ASK_AGAIN_S", "TIMEOUT_S", "answer", "request"]

TIMEOUT_S = 10  # a request's answer; a lost one must not hang the caller
# A question not answered by then is asked again (leader elections). Short, as nats.go's
# publish retries on no responders are (250 ms, ADR-22): an ask is one small message,
# and an earlier ask's late answer is still taken.
ASK_AGAIN_S = 0.25
NOBODY_S = 0.5  # asks nobody took for this long: nobody answers this question


def answer(what: str, data: bytes) -> dict[str, Any]:
    """A JetStream answer's body, or its error as the port's. Raises LogError."""
    body = _body(what, data)
    err = body.get("error")
    if err:
        raise js_error(what, err.get("err_code"), err.get("description"))
    return body


def _body(what: str, data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as e:
        raise LogError(f"{what}: an answer that is no JSON: {data[:200]!r}") from e
    if not isinstance(body, dict):
        raise LogError(f"{what}: an answer of no known form: {data[:200]!r}")
    return body


async def request(
    client: NatsClient, what: str, endpoint: str, body: bytes = b""
) -> dict[str, Any]:
    """A request to ``$JS.API.<endpoint>``; its answer. Raises LogError (TimedOut when
    none came in ``TIMEOUT_S``).

    Asked again every ``ASK_AGAIN_S`` until answered (see the module), so only for
    idempotent endpoints: info, create or update to one configuration, delete. An answer
    that JetStream is unavailable (an election) is waited past, and is the error only
    when no other came."""
    try:
        with client.call(what):
            return await _asked(client, what, f"$JS.API.{endpoint}", body)
    except NoResponders as e:
        raise LogError(f"{what}: no JetStream answers on this server") from e


async def _asked(client: NatsClient, what: str, subject: str, body: bytes) -> dict[str, Any]:
    """The first answer to ``body`` on ``subject`` but 'unavailable', asked again every
    ``ASK_AGAIN_S`` on one inbox. Raises LogError; runs inside ``client.call``."""
    nc = client.nc
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    inbox = nc.new_inbox()
    answers: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_answer(msg: Msg) -> None:
        answers.put_nowait(msg)

    sub = await nc.subscribe(inbox, cb=on_answer)
    unavailable: LogError | None = None
    nobody_since: float | None = None  # the first ask nobody took, of those since an answer
    try:
        ask_at = loop.time()
        while True:
            now = loop.time()
            if now >= deadline:
                raise unavailable or TimedOut(f"{what}: no answer within {TIMEOUT_S} s")
            if now >= ask_at:
                await nc.publish(subject, body, reply=inbox)
                ask_at = now + ASK_AGAIN_S
            try:
                msg = await asyncio.wait_for(answers.get(), min(ask_at, deadline) - now)
            except TimeoutError:
                continue
            if msg.headers and msg.headers.get("Status") == "503":
                # Nobody took it: no JetStream here, or none yet (a server's API can miss
                # the first ask after its interest was made, seen under load): said only
                # once asks have gone untaken for NOBODY_S.
                nobody_since = now if nobody_since is None else nobody_since
                if now - nobody_since >= NOBODY_S:
                    raise NoResponders(f"{what}: nobody answered")
                continue
            got = _body(what, msg.data)
            err = got.get("error") or {}
            if err.get("err_code") == JsErr.CLUSTER_NOT_AVAILABLE:
                unavailable = js_error(what, err["err_code"], err.get("description"))
                continue
            return answer(what, msg.data)
    finally:
        await client.unsubscribe(sub)
