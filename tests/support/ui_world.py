"""The web UI's world: a real NATS server with authentication on (the gatekeeper, the
intake), people with keypairs and a session each, and the read API serving the UI with
its writes on each user's own connection (``services.wiring.acting``). Run in a thread
of its own, for tests that speak HTTP or drive a browser."""

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from events import (
    AdminCommand,
    AnyEvent,
    CreateKeypair,
    CreateUser,
    GpuUsageSampled,
    PipelineRunRequested,
    PipelineSpec,
    RevokeKeypair,
    Role,
    ServeCommand,
    Slots,
)
from events import subjects as subj
from services.actors.bootstrap import system_applied
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.adapters.vfolder_files import FolderFiles
from services.api.serve import ReadApi, serve_read_api
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.provenance import Provenance, stamp
from services.ports import ContainerRuntime, EventLog
from services.wiring.acting import acting_on
from services.wiring.identity import Identity
from services.wiring.parts import connected
from tests.support.tenancy_env import Secured, secured_cluster, start_actors

__all__ = [
    "CLUSTER",
    "FOLDERS",
    "IMAGE",
    "PEOPLE",
    "RUNNING_SERVICES",
    "SLIVER",
    "UiWorld",
    "ui_world",
]

PEOPLE = ("alice", "bob", "mallory")
# The actors of a whole cluster: agent a1 has one mock GPU worth 2 fGPU (agent_config's).
CLUSTER = ("intake", "quota", "scheduler", "agent:a1")
IMAGE = "fgpu/busybox:latest"
SMALL = Slots(cpu=100, mem=1 << 28, fgpu=50)
SLIVER = Slots(cpu=100, mem=1 << 28, fgpu=1)
# The actors that run sessions: with these, a world's sessions reach RUNNING on agent a1.
RUNNING_SERVICES = ("intake", "registrar", "quota", "scheduler", "agent:a1")
# The actors that answer folders' requests (created, shared): the registrar's.
FOLDERS = ("intake", "registrar")
Runtime = Callable[[], AbstractAsyncContextManager[ContainerRuntime]]


@dataclass
class UiWorld:
    url: str  # the API's, http://host:port
    keys: dict[str, tuple[str, str]]  # user -> access key, secret
    sessions: dict[str, str]  # user -> the id of a session of theirs
    c: Secured
    api: ReadApi
    portal: BlockingPortal
    clients: list[httpx.Client] = field(default_factory=list)

    def http(self, **options: Any) -> httpx.Client:
        """An HTTP client of the API, closed with the world."""
        http = httpx.Client(base_url=self.url, timeout=10, **options)
        self.clients.append(http)
        return http

    def sign_in(self, who: str, **headers: str) -> tuple[httpx.Client, str]:
        """An HTTP client holding ``who``'s browser session (its cookie), and the session's
        CSRF token."""
        key, secret = self.keys[who]
        http = self.http()
        r = http.post(
            "/ui/session",
            json={"access_key": key, "secret_key": secret},
            headers={"Origin": self.url, **headers},
        )
        assert r.status_code == 200, r.text
        return http, r.json()["csrf"]

    def create(self, who: str, **ask: Any) -> str:
        """A new session of ``who``'s, on the log."""

        return self.portal.call(lambda: _create(self.c, *self.keys[who], **ask))

    def pipeline_run(self, who: str, spec: PipelineSpec) -> str:
        """A pipeline run of ``who``'s, asked for as the CLI asks; back once the read API
        has folded it."""

        async def asked() -> str:
            key, secret = self.keys[who]
            options = Identity(key, secret).options()
            async with nats_connection(self.c.url, name="test-user", **options) as conn:
                sender = conn.sender(key)
                client = Client(conn.log, SystemClock(), key, sender=sender, secret=secret)
                run_id = await client.pipeline_run(spec)
            with anyio.fail_after(30):
                seq = await _seq_of_run(self.c.setup, run_id)
                await self.api.projector.wait_beyond(seq - 1)
            return run_id

        return self.portal.call(asked)

    def serve(self, who: str, command: ServeCommand) -> AnyEvent:
        """``command`` asked of the serving actor as ``who`` (its own connection, as the
        CLI asks); the actor's answer (its first event caused by the request, a
        ``ServeRefused`` if refused), once the read API has folded it."""

        async def asked() -> AnyEvent:
            key, secret = self.keys[who]
            after = await self.c.setup.last_seq()
            options = Identity(key, secret).options()
            async with nats_connection(self.c.url, name="test-user", **options) as conn:
                client = Client(conn.log, SystemClock(), key, sender=conn.sender(key))
                rid = await client.serve(command)
            with anyio.fail_after(30):
                seq, answer = await _answer_to(self.c.setup, after, rid)
                await self.api.projector.wait_beyond(seq - 1)
            return answer

        return self.portal.call(asked)

    def add_person(self, user: str, domain: str, role: Role, projects: tuple[str, ...]) -> None:
        """``user`` made (as the first tenancy is), with a keypair in ``keys``."""
        key, secret = new_access_key(), new_secret()
        self.apply(CreateUser(user=user, domain=domain, role=role, projects=projects))
        self.apply(CreateKeypair(access_key=key, user=user, secret_hash=hash_secret(secret)))
        self.keys[user] = (key, secret)

    def revoke(self, who: str) -> None:
        """Revoke ``who``'s keypair; back once the read API has folded it."""
        self.apply(RevokeKeypair(access_key=self.keys[who][0]))

    def apply(self, command: AdminCommand) -> None:
        """``command`` applied (as the first tenancy is); back once the read API has
        folded it."""

        async def applied() -> None:
            e = system_applied(command, SystemClock())
            seq = await self.c.setup.append(subj.TENANCY, e)
            with anyio.fail_after(30):
                await self.api.projector.wait_beyond(seq - 1)

        self.portal.call(applied)

    def sample(
        self,
        session_id: str,
        *,
        used: int,
        limit: int,
        agent: str = "a1",
        charged_ns: int | None = None,
        at: datetime | None = None,
    ) -> None:
        """A GPU usage sample of ``session_id``'s device 0, as its agent publishes them
        (with the agent's keypair, on the session's usage subject), taken ``at`` (now if
        not given: a test that reads a rate gives its samples' times); back once the read
        API has folded it."""

        async def sampled() -> None:
            when = SystemClock().now() if at is None else at
            prov = Provenance(f"agent:{agent}", when, None, session_id)
            e = stamp(
                GpuUsageSampled,
                prov,
                session_id=session_id,
                agent_id=agent,
                gpu_index=0,
                mem_used=used,
                mem_peak=used,
                mem_limit=limit,
                launches=0,
                throttled_ns=0,
                oom_refusals=0,
                charged_ns=charged_ns,
            )
            keys = Identity(*self.c.services[f"agent:{agent}"])
            async with connected(self.c.url, f"fgpu-test-{agent}-usage", keys) as conn:
                seq = await conn.log.append(subj.usage(agent, session_id), e)
            with anyio.fail_after(30):
                await self.api.projector.wait_beyond(seq - 1)

        self.portal.call(sampled)

    def wait_for(self, after: int, found: Callable[[str, AnyEvent], bool]) -> tuple[str, AnyEvent]:
        """The first record after ``after`` that is ``found`` (subject, event), once the log
        holds it (30 s at most)."""

        async def first() -> tuple[str, AnyEvent]:
            with anyio.fail_after(30):
                async with aclosing(self.c.setup.tail(after)) as batches:
                    async for batch in batches:
                        for r in batch:
                            if found(r.subject, r.event):
                                return r.subject, r.event
            raise AssertionError("the log ended")

        return self.portal.call(first)

    def stored_since(self, seq: int) -> list[tuple[str, AnyEvent]]:
        """What the log stored after ``seq`` (subject, event)."""

        async def read() -> list[tuple[str, AnyEvent]]:
            last = await self.c.setup.last_seq()
            found: list[tuple[str, AnyEvent]] = []
            if last <= seq:
                return found
            async for batch in self.c.setup.read(seq):
                found += [(r.subject, r.event) for r in batch]
                if batch[-1].seq >= last:
                    break
            return found

        return self.portal.call(read)

    def last_seq(self) -> int:
        return self.portal.call(self.c.setup.last_seq)

    def wait_until(self, session_id: str, *kinds: type[AnyEvent]) -> None:
        """Back once the log holds an event of one of ``kinds`` for ``session_id`` and the
        read API has projected it (30 s at most)."""

        async def projected() -> None:
            with anyio.fail_after(30):
                async with aclosing(self.c.setup.tail(0)) as batches:
                    async for batch in batches:
                        for r in batch:
                            if isinstance(r.event, kinds) and (
                                getattr(r.event, "session_id", None) == session_id
                            ):
                                await self.api.projector.wait_beyond(r.seq - 1)
                                return
            raise AssertionError("the log ended")

        self.portal.call(projected)


async def _answer_to(log: EventLog, after: int, request_id: str) -> tuple[int, AnyEvent]:
    """The first record after ``after`` caused by request ``request_id`` (seq, event)."""
    async with aclosing(log.tail(after)) as batches:
        async for batch in batches:
            for r in batch:
                if r.event.causation_id == request_id:
                    return r.seq, r.event
    raise AssertionError("the log ended")


async def _seq_of_run(log: EventLog, run_id: str) -> int:
    """The sequence of the record that asks for run ``run_id``, once the log holds it."""
    async with aclosing(log.tail(0)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, PipelineRunRequested) and r.event.run_id == run_id:
                    return r.seq
    raise AssertionError("the log ended")


async def _create(c: Secured, key: str, secret: str, **ask: Any) -> str:
    """A session asked for by ``key`` as the CLI asks (its own connection, the intake),
    once the log holds it."""
    options = Identity(key, secret).options()
    async with nats_connection(c.url, name="test-user", **options) as conn:
        client = Client(conn.log, SystemClock(), key, sender=conn.sender(key), secret=secret)
        slots = ask.pop("slots", SMALL)
        [sid] = await client.create(image=ask.pop("image", IMAGE), slots=slots, **ask)
    with anyio.fail_after(30):
        await Client(c.setup, SystemClock(), key).wait_until(lambda s: sid in s.sessions)
    return sid


async def _run(
    db: Path,
    services: tuple[str, ...],
    runtime: Runtime | None,
    vfolders: Path | None,
    *,
    task_status: TaskStatus[tuple[Secured, ReadApi, dict[str, Any]]],
) -> None:
    # The storage service appends its scans as the read API's own service key may.
    keys_of = (*services, "api") if vfolders is not None else services
    async with secured_cluster(services=keys_of) as c, AsyncExitStack() as stack:
        keys = {u: (new_access_key(), new_secret()) for u in PEOPLE}
        commands: list[AdminCommand] = []
        for user, (key, secret) in keys.items():
            commands.append(
                CreateUser(user=user, domain="default", projects=("default",), default_project=None)
            )
            commands.append(
                CreateKeypair(access_key=key, user=user, secret_hash=hash_secret(secret))
            )
        for command in commands:
            await c.setup.append(subj.TENANCY, system_applied(command, SystemClock()))
        engine = None if runtime is None else await stack.enter_async_context(runtime())
        await start_actors(c, stack, runtime=engine)
        # On an agent (RUNNING_SERVICES: one GPU), each asks for a sliver: all run.
        first = SLIVER if services == RUNNING_SERVICES or runtime is not None else SMALL
        sessions = {u: await _create(c, *keys[u], name=f"{u}-1", slots=first) for u in PEOPLE}
        files, log = None, c.setup
        if vfolders is not None:
            files = stack.enter_context(FolderFiles(vfolders))
            me = Identity(*c.services["api"])
            log = (await stack.enter_async_context(connected(c.url, "fgpu-api", me))).log
        async with anyio.create_task_group() as tg:
            serve = functools.partial(
                serve_read_api, act=acting_on(c.url), apps_port=0, vfolders=files
            )
            api = await tg.start(serve, log, db)
            task_status.started((c, api, {"keys": keys, "sessions": sessions}))
            await anyio.sleep_forever()


@contextmanager
def ui_world(
    tmp: Path,
    services: tuple[str, ...] = ("intake",),
    runtime: Runtime | None = None,
    *,
    vfolders: bool = False,
) -> Iterator[UiWorld]:
    """The world, its actors those of ``services`` (the intake alone: sessions are asked
    for and never judged; ``CLUSTER``: judged, placed and run on one agent whose one mock
    GPU is worth 2 fGPU; ``RUNNING_SERVICES``: the same with the registrar, on dummy
    containers or ``runtime``'s; ``FOLDERS``: the intake and the registrar, which answers
    folders' requests). With ``vfolders``, the API is the storage service too, of folders
    under ``tmp``."""
    with start_blocking_portal("asyncio") as portal:
        where = tmp / "vfolders" if vfolders else None
        run = functools.partial(_run, tmp / "p.duckdb", services, runtime, where)
        running, (c, api, made) = portal.start_task(run)
        world = UiWorld(api.url, made["keys"], made["sessions"], c, api, portal)
        try:
            yield world
        finally:
            for http in world.clients:
                http.close()
            running.cancel()
