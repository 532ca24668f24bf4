"""The stack wired once (services.wiring.stack), run without the CLI: on a server of its
own it makes the stream, a superadmin once, a keypair per service, and runs every part."""

import socket
from collections.abc import Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from services.actors.bootstrap import FirstAdmin
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.nats_auth import ServerAuth
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.log_space import Watermark
from services.ports import EventLog
from services.testing.memory_proxy import memory_proxy
from services.wiring.identity import Identity
from services.wiring.stack import ACTORS, AgentPart, OwnServer, ServePart, Stack, StackConfig
from tests.support.cluster import agent_config

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _dummy():  # type: ignore[no-untyped-def]
    yield DummyRuntime()


async def test_a_stack_on_its_own_server_starts_every_part(tmp_path: Path) -> None:
    from events import CreateServiceKey
    from events import subjects as subj
    from services.actors.bootstrap import system_applied
    from services.adapters.system_clock import SystemClock

    admins: list[FirstAdmin] = []
    asked: list[list[str]] = []

    async def keys(log: EventLog, kinds: list[str]) -> Mapping[str, Identity]:
        asked.append(kinds)
        made = {k: Identity(new_access_key("SK"), new_secret()) for k in kinds}
        for kind, me in made.items():
            assert me.secret is not None
            command = CreateServiceKey(
                access_key=me.access_key, service=kind, secret_hash=hash_secret(me.secret)
            )
            await log.append(subj.TENANCY, system_applied(command, SystemClock()))
        return made

    auth = ServerAuth.generate()
    server = nats_server.start(str(tmp_path / "store"), config=auth.config())
    try:
        own = OwnServer(server, auth, keys, Watermark.parse("1m"), first_admin=admins.append)
        agent = AgentPart(agent_config("s1"), _dummy)
        serve = ServePart(memory_proxy)
        config = StackConfig(
            server.url, archive_dir=tmp_path / "archive", own=own, agent=agent, serve=serve
        )
        with anyio.fail_after(60), anyio.CancelScope() as scope:
            async with Stack(config).running() as started:
                scope.cancel()  # the parts run until cancelled
                await anyio.sleep_forever()
    finally:
        server.stop()
    assert started.api is None and started.watch is not None
    assert [a.user for a in admins] == ["admin"]
    assert asked == [[*ACTORS, "agent:s1", "router:local"]]
    assert started.proxy is not None  # the router started on its own keypair's reads
    with pytest.raises(OSError):  # and its proxy stopped with the stack
        socket.create_connection(started.proxy.address, timeout=5).close()
