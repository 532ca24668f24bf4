"""Reads through consumers of the reader's own names: a replay or a tail of the log, the
bulk reader's.

- A connection with an access key (the user it connected as) reads through the consumers
  its permissions name, ``permissions.reader_names``, and through no other: one identity
  can make, change, delete or pull from no other's. A connection without one (anonymous,
  a token: an open server, which pins nothing) reads through fresh names.
- A read takes a free name: it makes its consumer with JetStream's create action, which
  refuses a name the server holds (another read's, in this process or in another of the
  same key) where a plain create would change that consumer; the read then tries
  another. A nonce in the configuration makes each read's its own: the create action
  hands back an existing consumer of the same configuration instead of refusing it.
- Its consumer is a pull consumer without acknowledgements, deleted when the read ends.
  One left behind (its process gone, its connection lost, its deletion unanswered) is the
  server's to drop, once no pull request has waited on it for ``INACTIVE_S``. A read
  keeps a request waiting while its caller takes the batches; one whose caller stops
  taking them for that long finds its consumer gone.
- A read fails (LogError) rather than hand out less than it promised: when the connection
  was lost since it began, when a delivery is missing (a gap in the consumer's sequence),
  when its consumer is gone. The caller reads again.

Every call into nats-py goes through ``NatsClient.call``: only LogError comes out.
"""

import asyncio
import json
import random
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
from nats.aio.msg import Msg

from events import subjects as subj
from services.adapters import jetstream_api
from services.adapters.jetstream_pull import Puller, ack_seqs
from services.adapters.nats_client import ConsumerExists, NatsClient
from services.domain.access.permissions import reader_names
from services.ports import LogError

__all__ = ["INACTIVE_S", "deliveries", "read_consumer", "reader_names_of"]

INACTIVE_S = 60.0
_DELETE_S = 2.0  # a read's end waits this long at most for its consumer's deletion


def reader_names_of(client: NatsClient) -> tuple[str, ...] | None:
    """The names ``client``'s reads go through, in the order to try them (another each
    call, so that reads at once seldom ask for the same); None when its permissions name
    none (no user, or a user no consumer name can carry): fresh names then."""
    user = _user(client)
    if user is None or not subj.is_token(user):
        return None
    names = list(reader_names(user))
    random.shuffle(names)
    return tuple(names)


def _user(client: NatsClient) -> str | None:
    """The user ``client`` connected as, as nats-py chooses it: the options first, then
    the URL (where a user alone is a token); None for a token or nobody."""
    c = client.credentials
    if c.user is not None and c.password is not None:
        return c.user
    url = client.nc.connected_url
    if c.token is None and url is not None and url.password is not None:
        return url.username
    return None


@asynccontextmanager
async def read_consumer(
    client: NatsClient, stream: str, filter_subject: str, after: int, what: str
) -> AsyncIterator[str]:
    """A consumer of ``stream`` for one read, of the messages on ``filter_subject`` after
    ``after``, made under a free name of ``client``'s; its name, for the block; deleted
    after (see the module for one that is not). Raises LogError if every name is taken or
    the server refuses."""
    nonce = uuid.uuid4().hex
    config: dict[str, Any] = {
        "description": f"fgpu read {nonce}",
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": after + 1,
        "ack_policy": "none",
        "filter_subject": filter_subject,
        "inactive_threshold": int(INACTIVE_S * 1e9),
        "mem_storage": True,
        "num_replicas": 1,
    }
    names = reader_names_of(client) or (f"read-{nonce}",)
    for name in names:
        body = {"stream_name": stream, "config": {**config, "name": name}, "action": "create"}
        endpoint = f"CONSUMER.CREATE.{stream}.{name}.{filter_subject}"
        try:
            await jetstream_api.request(client, what, endpoint, json.dumps(body).encode())
        except ConsumerExists:
            continue  # another read's
        break
    else:
        raise LogError(
            f"{what}: {_user(client)} reads through {len(names)} consumers at once "
            "at most, and every one is taken; reading again later"
        )
    epoch = client.epoch
    try:
        yield name
    finally:
        # Only on the connection that made it: after a lost connection the server may have
        # dropped it and another read of the key taken the name again. Shielded, briefly:
        # a read cancelled (its task's end) frees its name at once too.
        if client.epoch == epoch:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_DELETE_S), suppress(LogError):
                await jetstream_api.request(
                    client, f"{what}: delete its consumer", f"CONSUMER.DELETE.{stream}.{name}"
                )


async def deliveries(
    client: NatsClient,
    stream: str,
    name: str,
    what: str,
    *,
    wait_s: float | None = None,
) -> AsyncGenerator[list[Msg], None]:
    """The messages of ``name`` (a consumer ``read_consumer`` made), in order, in batches
    of what has arrived, for as long as the caller reads.

    Raises LogError if the connection was lost since the read began, a delivery is
    missing, the consumer is gone or the server refuses; TimedOut (a LogError) if no
    message comes within ``wait_s`` (None: no limit).
    """
    epoch = client.epoch
    pull = Puller(client.nc, name, stream=stream)
    delivered = 0
    try:
        with client.call(what, since=epoch):
            await pull.start()
        while True:
            with client.call(what, since=epoch):
                msgs = await asyncio.wait_for(pull.next_batch(), timeout=wait_s)
            for msg in msgs:
                cseq = ack_seqs(msg.reply)[1]
                if cseq != delivered + 1:  # a fresh consumer, no redeliveries: 1, 2, ...
                    raise LogError(f"{what}: consumer {name} delivered {cseq} after {delivered}")
                delivered = cseq
            yield msgs
    finally:
        if pull.sub is not None:
            await client.unsubscribe(pull.sub)
