"""Serving on a real server with authentication: a user's serve request goes through the
intake on the user's own connection, the serving actor (on its own service keypair)
answers it and asks for the replicas in the owner's name, and they run; another user's
request on the same endpoint is refused by the serving actor, and nothing of it is
asked for."""

from contextlib import AsyncExitStack

import anyio
import pytest

from events import (
    CreateEndpoint,
    CreateKeypair,
    CreateUser,
    RevisionSpec,
    ScaleEndpoint,
    ServeRefused,
    SessionRequested,
    SessionRunning,
    Slots,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.fold.cluster import ClusterState
from services.domain.tenancy.admin import DEFAULT
from tests.support.tenancy_env import Secured, secured_cluster, start_actors

pytestmark = pytest.mark.anyio
SERVICES = ("intake", "quota", "scheduler", "serving", "agent:a1")
SPEC = RevisionSpec(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=1 << 26, fgpu=25))


async def _person(c: Secured, stack: AsyncExitStack, name: str) -> Client:
    """A user of the default project, and its client on its own connection, through the
    intake as the CLI's."""
    key, secret = new_access_key(), new_secret()
    for command in (
        CreateUser(user=name, domain=DEFAULT, projects=(DEFAULT,)),
        CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret)),
    ):
        await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))
    log = await c.log_as(key, secret)
    stack.push_async_callback(log.close)
    return Client(log, SystemClock(), key, sender=JetStreamSender(log.client, key))


def _running_replicas(s: ClusterState) -> int:
    return sum(
        1
        for v in s.sessions.values()
        if v.status.value == "RUNNING" and v.session_type.value == "inference"
    )


async def test_a_users_endpoint_is_served_under_identity_and_another_user_is_refused() -> None:
    async with secured_cluster(services=SERVICES) as c, AsyncExitStack() as stack:
        await start_actors(c, stack)
        ana = await _person(c, stack, "ana")
        eve = await _person(c, stack, "eve")
        watcher = Client(c.setup, SystemClock(), "observer")
        await ana.serve(CreateEndpoint(endpoint_id="ep-ana", name="ana", revision=SPEC, replicas=2))
        with anyio.fail_after(60):
            s = await watcher.wait_until(lambda s: _running_replicas(s) == 2)
        replicas = [v for v in s.sessions.values() if v.session_type.value == "inference"]
        assert {(v.owner, v.user) for v in replicas} == {(ana.access_key, "ana")}
        rid = await eve.serve(ScaleEndpoint(endpoint_id="ep-ana", replicas=9))
        with anyio.fail_after(30):
            # The fold notes each answer (no one clears the watcher's notes).
            await watcher.wait_until(lambda s: rid in s.admin_answered)
        asked = []
        async for batch in c.setup.read(0):
            asked += [r.event for r in batch]
        refused = [e for e in asked if isinstance(e, ServeRefused) and e.causation_id == rid]
        assert [(e.code, e.reason) for e in refused] == [
            ("forbidden", "no endpoint ep-ana of yours")
        ]
        assert sum(isinstance(e, SessionRequested) for e in asked) == 2
        assert sum(isinstance(e, SessionRunning) and e.host == "127.0.0.1" for e in asked) == 2
