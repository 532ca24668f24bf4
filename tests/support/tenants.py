"""A cluster with tenancy on the in-memory log: a superadmin, domains, projects, users and
their keys, with the actors running."""

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass

import anyio

from events import (
    AdminApplied,
    AdminCommand,
    AdminRefused,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    Role,
    Slots,
)
from services.actors.bootstrap import bootstrap
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret
from services.domain.fold.cluster import ClusterState
from tests.support.cluster import GIB, agent_config, running_cluster

IMAGE = "fgpu/busybox:latest"


HALF = Slots(cpu=1000, mem=GIB, fgpu=50)


HASH = hash_secret("not used here")


@dataclass
class Tenants:
    log: MemoryLog
    root: Client  # the superadmin

    def client(self, access_key: str) -> Client:
        return Client(self.log, SystemClock(), access_key)

    async def ask(self, who: Client, command: AdminCommand) -> AdminApplied | AdminRefused:
        """``command`` asked by ``who``, and the registrar's answer."""
        seq = await self.log.last_seq()
        request_id = await who.admin(command)
        with anyio.fail_after(10):
            async with aclosing(self.log.tail(seq)) as batches:
                async for batch in batches:
                    for r in batch:
                        e = r.event
                        answer = isinstance(e, AdminApplied | AdminRefused)
                        if answer and e.causation_id == request_id:
                            return e  # type: ignore[return-value]
        raise AssertionError("the log ended")

    async def applied(self, who: Client, *commands: AdminCommand) -> None:
        for c in commands:
            answer = await self.ask(who, c)
            assert isinstance(answer, AdminApplied), answer

    async def session(self, who: Client, **given: object) -> tuple[str, ClusterState]:
        """A session asked by ``who``, once admitted or rejected."""
        kwargs: dict[str, object] = {"image": IMAGE, "slots": HALF, **given}
        [sid] = await who.create(**kwargs)  # type: ignore[arg-type]
        with anyio.fail_after(10):
            s = await who.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status.value != "REQUESTED"
            )
        return sid, s

    async def people(self) -> None:
        """Two domains; in research, projects vision and nlp; dora its domain admin, uma a
        user of vision, vic a user of vision and nlp; in ops, oscar its domain admin."""
        await self.applied(
            self.root,
            CreateDomain(domain="research"),
            CreateProject(domain="research", project="vision"),
            CreateProject(domain="research", project="nlp"),
            CreateDomain(domain="ops"),
            CreateProject(domain="ops", project="infra"),
            CreateUser(user="dora", domain="research", role=Role.DOMAIN_ADMIN),
            CreateUser(user="uma", domain="research", projects=("vision",)),
            CreateUser(user="vic", domain="research", projects=("vision", "nlp")),
            CreateUser(user="oscar", domain="ops", role=Role.DOMAIN_ADMIN, projects=("infra",)),
            CreateKeypair(access_key="AKdora", user="dora", secret_hash=HASH),
            CreateKeypair(access_key="AKuma", user="uma", secret_hash=HASH),
            CreateKeypair(access_key="AKvic", user="vic", secret_hash=HASH),
            CreateKeypair(access_key="AKoscar", user="oscar", secret_hash=HASH),
        )


@asynccontextmanager
async def tenants(gpus: int = 4) -> AsyncIterator[Tenants]:
    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    config = agent_config("a1", gpus=gpus, fgpu_per_gpu=100)
    async with running_cluster(log, [(config, DummyRuntime())]):
        yield Tenants(log, Client(log, SystemClock(), first.access_key))
