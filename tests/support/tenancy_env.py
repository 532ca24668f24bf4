"""A real nats-server with authentication on, fgpu's gatekeeper answering for it, and the
first tenancy: for tests of what identities may and may not do on the bus."""

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import nats
import nats.errors
from anyio.abc import TaskGroup, TaskStatus

from events import CreateServiceKey
from services.actors.access_audit import AccessAudit
from services.actors.bootstrap import FirstAdmin, bootstrap
from services.actors.gatekeeper import GatekeeperActor
from services.actors.reader_consumers import ReaderConsumersActor
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.jetstream_domains import JetStreamReaderConsumers
from services.adapters.nats_auth import GATE_USER, SETUP_USER, ServerAuth
from services.adapters.nats_callout import SystemKicker, serve_callout
from services.adapters.nats_server_log import follow_violations
from services.adapters.system_clock import SystemClock
from services.cli.home import fgpu_home
from services.client import Client
from services.domain.access.access_audit import AccessLimiter
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.access.permissions import inbox
from services.ports import ContainerRuntime, LogError
from services.wiring.identity import Identity
from services.wiring.parts import violations_to

__all__ = ["Secured", "secured_cluster", "start_actors"]


@dataclass
class Secured:
    url: str
    auth: ServerAuth
    root: FirstAdmin
    setup: JetStreamLog  # the administrator's static connection (stream, first tenancy)
    gatekeeper: GatekeeperActor
    tg: TaskGroup
    services: dict[str, tuple[str, str]] = field(default_factory=dict)  # kind -> key, secret
    errors: list[str] = field(default_factory=list)  # what the server told clients
    server_log: str = ""  # where the (first) server logs (permission violations, by identity)
    urls: list[str] = field(default_factory=list)  # each server's
    _gate: "_Gate | None" = None
    _told: anyio.Event = field(default_factory=anyio.Event)

    async def restart_gatekeeper(self, meanwhile: Callable[[], Awaitable[None]]) -> None:
        """Stop the gatekeeper, run ``meanwhile`` while none runs, and start a new one
        (which remembers nothing of the first); back once it has started."""
        assert self._gate is not None and self._gate.scope is not None
        self._gate.scope.cancel()
        await meanwhile()
        self.gatekeeper = await self.tg.start(self._gate.run)

    async def told(self, text: str, n: int) -> list[str]:
        """The first ``n`` errors the server told clients that hold ``text``, once told."""
        while len(found := [e for e in self.errors if text in e]) < n:
            await self._told.wait()
        return found[:n]

    async def client(self, access_key: str, secret: str, **options: Any) -> nats.NATS:
        """A plain nats-py client connected as ``access_key`` (raises on refusal)."""

        async def on_error(e: Exception) -> None:
            self.errors.append(str(e))
            self._told.set()
            self._told = anyio.Event()

        given = {"user": access_key, "password": secret, "inbox_prefix": inbox(access_key)}
        return await self.connect(**given, error_cb=on_error, **options)

    async def connect(self, **options: Any) -> nats.NATS:
        """A plain nats-py client with ``options``; a refused one is closed, and raises."""
        nc = nats.NATS()
        try:
            # No retry: a refusal raises (max_reconnect_attempts=0 would retry for ever).
            servers = self.url.split(",")
            await nc.connect(servers, allow_reconnect=False, connect_timeout=5, **options)
        except BaseException:
            await nc.close()  # its socket, else left to the collector's warning
            raise
        return nc

    async def log_as(self, access_key: str, secret: str) -> JetStreamLog:
        return await connect(
            self.url, user=access_key, password=secret, inbox_prefix=inbox(access_key)
        )

    async def stored_since(self, seq: int) -> list[str]:
        """The subjects of what the log stored after ``seq``, but the access audit (the
        gatekeeper writes it as connections come, whenever they come)."""
        found: list[str] = []
        async for batch in self.setup.read(seq):
            found += [r.subject for r in batch if not r.subject.startswith("fgpu.access.")]
        return found

    def admin(self) -> Client:
        return Client(self.setup, SystemClock(), self.root.access_key)


@asynccontextmanager
async def secured_cluster(
    services: tuple[str, ...] = (), limiter: AccessLimiter | None = None, *, servers: int = 1
) -> AsyncIterator[Secured]:
    """The server (or ``servers`` of them, clustered), the gatekeeper (its access audit
    limited by ``limiter``), a stream and the first tenancy (a superadmin), plus a keypair
    for each of ``services`` (``scheduler``, ``agent:a1``, ...)."""
    auth = ServerAuth.generate()
    async with AsyncExitStack() as stack:
        if servers == 1:
            server = nats_server.start(config=auth.config())
            stack.callback(server.stop)
            running = [server]
        else:
            cluster = nats_server.nats_cluster(servers, config=auth.config())
            running = list(stack.enter_context(cluster).values())
        urls = [s.url for s in running]
        url = ",".join(urls)
        setup = await _stream_made(url, auth)
        stack.push_async_callback(setup.close)
        keys = {kind: (new_access_key("SK"), new_secret()) for kind in services}
        extra = tuple(
            CreateServiceKey(access_key=key, service=kind, secret_hash=hash_secret(secret))
            for kind, (key, secret) in keys.items()
        )
        root = await bootstrap(setup, SystemClock(), extra=extra)
        assert root is not None
        tg = await stack.enter_async_context(anyio.create_task_group())
        gate = _Gate(url, auth, limiter, running[0].log_path)
        keeper = await tg.start(gate.run)
        yield Secured(
            url,
            auth,
            root,
            setup,
            keeper,
            tg,
            keys,
            server_log=running[0].log_path,
            urls=urls,
            _gate=gate,
        )
        tg.cancel_scope.cancel()


async def _stream_made(url: str, auth: ServerAuth) -> JetStreamLog:
    """The administrator's connection, once it has made the stream (a cluster's servers
    first elect who leads JetStream: until then it cannot)."""
    with anyio.fail_after(60):
        while True:
            setup = await connect(
                url, user=SETUP_USER, password=auth.setup_password, inbox_prefix=inbox(SETUP_USER)
            )
            try:
                await setup.create_or_update_stream()
                return setup
            except LogError:
                await setup.close()
                await anyio.sleep(0.2)  # a retry's pause: what is awaited is the stream


@dataclass
class _Gate:
    """A gatekeeper as ``fgpu up`` runs one (its own connections, audit and callout),
    which can be stopped and started again."""

    url: str
    auth: ServerAuth
    limiter: AccessLimiter | None
    server_log: str
    scope: anyio.CancelScope | None = None

    async def run(self, *, task_status: TaskStatus[GatekeeperActor]) -> None:
        with anyio.CancelScope() as self.scope:
            gate = await connect(
                self.url,
                user=GATE_USER,
                password=self.auth.gate_password,
                inbox_prefix=inbox(GATE_USER),
            )
            kicker = await SystemKicker.connect(self.url, self.auth)
            try:
                audit = AccessAudit(gate, SystemClock(), "nats", "gatekeeper", self.limiter)
                keeper = GatekeeperActor(gate, kicker, SystemClock(), audit=audit)
                readers = ReaderConsumersActor(gate, JetStreamReaderConsumers(gate.client))
                async with anyio.create_task_group() as tg:
                    await tg.start(audit.run)
                    await tg.start(keeper.run)
                    await tg.start(readers.run)
                    tg.start_soon(follow_violations, self.server_log, violations_to(audit, keeper))
                    await tg.start(serve_callout, self.url, self.auth, keeper.authorize)
                    task_status.started(keeper)
            finally:
                with anyio.CancelScope(shield=True):
                    await kicker.close()
                    await gate.close()


async def start_actors(
    c: Secured,
    stack: AsyncExitStack,
    *,
    intake: Callable[..., Any] | None = None,
    runtime: ContainerRuntime | None = None,
) -> None:
    """The actors of ``c``'s services, in their order, each on its own keypair (agents with
    dummy containers, or on ``runtime``; ``intake``: the intake's runner, ``run_intake``
    with the test's settings), until ``stack`` closes."""
    from services.adapters.dummy_runtime import DummyRuntime
    from services.wiring.parts import (
        connected,
        run_agent,
        run_domain_feed,
        run_intake,
        run_quota,
        run_registrar,
        run_scheduler,
        run_serving,
    )
    from tests.support.cluster import agent_config

    conns = {
        kind: await stack.enter_async_context(
            connected(c.url, f"fgpu-{kind.replace(':', '-')}", Identity(*keys))
        )
        for kind, keys in c.services.items()
    }
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    for kind, conn in conns.items():
        if kind == "intake":
            await tg.start(intake or run_intake, conn)
        elif kind == "quota":
            await tg.start(run_quota, conn.log)
        elif kind == "registrar":
            await tg.start(run_registrar, conn.log)
        elif kind == "serving":
            await tg.start(run_serving, conn.log)
        elif kind == "scheduler":
            await tg.start(run_scheduler, conn.log, conn.bus)
        elif kind == "domain-feed":
            await tg.start(run_domain_feed, conn)
        elif kind == "api":
            pass  # the read API's own key: its caller serves the API on it
        elif kind.startswith("agent:"):
            agent = agent_config(kind.partition(":")[2])
            # As ``fgpu agent`` keeps ended sessions' output: under $FGPU_HOME.
            agent_ = functools.partial(run_agent, output_root=fgpu_home() / "output")
            await tg.start(agent_, conn, runtime or DummyRuntime(), agent)
        else:
            raise ValueError(f"no actor of service {kind!r} here")
