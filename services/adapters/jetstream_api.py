"""Requests to JetStream's API (``$JS.API.<endpoint>``) and their answers, for the adapters
that speak it without nats-py's JetStream context: the log (``jetstream``) and the
consumers reads go through (``jetstream_readers``).

Only the log port's errors come out: a refusal by its code (``nats_client.js_error``),
anything else through ``NatsClient.call``.
"""

import asyncio
import json
from typing import Any

import nats.errors

from services.adapters.nats_client import NatsClient, NoResponders, js_error
from services.ports import LogError

__all__ = ["TIMEOUT_S", "answer", "request"]

TIMEOUT_S = 10  # a request's answer; a lost one must not hang the caller
_ASK_AGAIN_S = 2.0  # an API question not answered by then is asked again (leader elections)


def answer(what: str, data: bytes) -> dict[str, Any]:
    """A JetStream answer's body, or its error as the port's. Raises LogError."""
    try:
        body = json.loads(data)
    except ValueError as e:
        raise LogError(f"{what}: an answer that is no JSON: {data[:200]!r}") from e
    if not isinstance(body, dict):
        raise LogError(f"{what}: an answer of no known form: {data[:200]!r}")
    err = body.get("error")
    if err:
        raise js_error(what, err.get("err_code"), err.get("description"))
    return body


async def request(
    client: NatsClient, what: str, endpoint: str, body: bytes = b""
) -> dict[str, Any]:
    """A request to ``$JS.API.<endpoint>``; its answer. Raises LogError.

    Asked again every ``_ASK_AGAIN_S`` until ``TIMEOUT_S``: while a cluster elects a new
    leader its API does not answer, and a question asked again is answered as soon as it
    has one, not at the end of the first question's timeout. Only for idempotent
    endpoints: info, create or update to one configuration, delete."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    try:
        with client.call(what):
            while True:
                left = deadline - loop.time()
                try:
                    reply = await client.nc.request(
                        f"$JS.API.{endpoint}", body, timeout=min(_ASK_AGAIN_S, left)
                    )
                    break
                except nats.errors.TimeoutError:
                    if deadline - loop.time() <= 0.05:
                        raise
    except NoResponders as e:
        raise LogError(f"{what}: no JetStream answers on this server") from e
    return answer(what, reply.data)
