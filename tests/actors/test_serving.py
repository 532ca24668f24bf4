"""The serving actor on a real NATS server with the dummy runtime: endpoints judged,
replicas asked for once each, scaled, replaced, and nothing asked twice across a restart;
who may act on an endpoint."""

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import pytest

from events import (
    AddRevision,
    AnyEvent,
    CreateDomain,
    CreateEndpoint,
    CreateKeypair,
    CreateProject,
    CreateToken,
    CreateUser,
    RemoveEndpoint,
    ReplicaPhase,
    RevisionSpec,
    RevokeKeypair,
    Role,
    ScaleEndpoint,
    ServeCommand,
    ServeRefused,
    SessionRequested,
    Slots,
    encode,
)
from events import subjects as subj
from services.actors.bootstrap import bootstrap, publish_secrets_key
from services.actors.serving import ServingActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.sealed_box import SealedBoxKey, seal
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret
from services.domain.container_spec import LABEL_SESSION
from services.domain.fold.cluster import ClusterState
from services.domain.serving.routes import route_table
from services.domain.serving.state import EndpointView
from tests.support.cluster import GIB, agent_config, running_cluster
from tests.support.routers import report_health

pytestmark = pytest.mark.anyio
SPEC = RevisionSpec(
    image="fgpu/busybox:latest",
    command=("sleep", "3600"),
    port=8000,
    slots=Slots(cpu=500, mem=GIB, fgpu=25),
)
HASH = hash_secret("not used here")
# A guard against a hang, not a time a step must take: on a host shared with another
# worker's stacks and Docker, a step of a rollout once took over 15 s (alone, under 1 s;
# the cause was not found).
HANG_S = 60.0


@dataclass
class World:
    log: JetStreamLog
    root: Client
    runtime: DummyRuntime

    def client(self, key: str) -> Client:
        return Client(self.log, SystemClock(), key)

    async def answer(self, who: Client, command: ServeCommand) -> AnyEvent:
        """The serving actor's first answer to ``command`` asked by ``who``."""
        seq = await self.log.last_seq()
        rid = await who.serve(command)
        with anyio.fail_after(HANG_S):
            async with aclosing(self.log.tail(seq)) as batches:
                async for batch in batches:
                    for r in batch:
                        if r.event.causation_id == rid and r.subject == subj.SERVING:
                            return r.event
        raise AssertionError("the log ended")

    async def until(self, who: Client, ok: Callable[[ClusterState], bool]) -> ClusterState:
        with anyio.fail_after(HANG_S):
            return await who.wait_until(ok)


@asynccontextmanager
async def world(log: JetStreamLog, secrets: SealedBoxKey | None = None) -> AsyncIterator[World]:
    """The tenancy below; with ``secrets``, its public half on the log and the agent
    opening sealed values with it."""
    first = await bootstrap(log, SystemClock())
    assert first is not None
    if secrets is not None:
        await publish_secrets_key(log, SystemClock(), secrets.public_key)
    config = agent_config("a1", gpus=2, fgpu_per_gpu=100)
    runtime = DummyRuntime()
    async with running_cluster(log, [(config, runtime)], serving=False, secrets=secrets):
        w = World(log, Client(log, SystemClock(), first.access_key), runtime)
        for c in (
            CreateDomain(domain="research"),
            CreateProject(domain="research", project="nlp"),
            CreateDomain(domain="ops"),
            CreateUser(user="uma", domain="research", projects=("nlp",), default_project="nlp"),
            CreateUser(user="vic", domain="research", projects=("nlp",)),
            CreateUser(user="oscar", domain="ops", role=Role.DOMAIN_ADMIN),
            CreateUser(user="dora", domain="research", role=Role.DOMAIN_ADMIN),
            CreateKeypair(access_key="AKuma", user="uma", secret_hash=HASH),
            CreateKeypair(access_key="AKvic", user="vic", secret_hash=HASH),
            CreateKeypair(access_key="AKoscar", user="oscar", secret_hash=HASH),
            CreateKeypair(access_key="AKdora", user="dora", secret_hash=HASH),
        ):
            await w.root.admin(c)
        await w.until(w.root, lambda s: "AKdora" in s.tenancy.keypairs)
        yield w


@asynccontextmanager
async def serving(log: JetStreamLog) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(ServingActor(log, SystemClock()).run)
        yield
        tg.cancel_scope.cancel()


def endpoint(s: ClusterState, name: str) -> EndpointView:
    return s.serving.endpoints[s.serving.names[name]]


def replicas_of(s: ClusterState, name: str) -> list[str]:
    return list(endpoint(s, name).replicas) if name in s.serving.names else []


def phases(s: ClusterState, name: str) -> list[ReplicaPhase]:
    if name not in s.serving.names:
        return []
    return sorted(r.phase for r in endpoint(s, name).replicas.values())


async def replica_requests(log: JetStreamLog) -> Counter[str]:
    asked: Counter[str] = Counter()
    async for batch in log.read(0):
        for r in batch:
            if isinstance(r.event, SessionRequested) and r.event.actor == "serving":
                asked[r.event.session_id] += 1
    return asked


def create(name: str, replicas: int = 2) -> CreateEndpoint:
    return CreateEndpoint(endpoint_id=f"ep-{name}", name=name, revision=SPEC, replicas=replicas)


async def test_an_endpoint_gets_its_replicas_once_each_and_they_take_traffic_when_healthy(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        answer = await w.answer(uma, create("sentiment"))
        assert not isinstance(answer, ServeRefused), answer
        warm = [ReplicaPhase.WARMING] * 2
        s = await w.until(uma, lambda s: phases(s, "sentiment") == warm)
        ep = endpoint(s, "sentiment")
        assert {(r.host, r.port) for r in ep.replicas.values()} == {("127.0.0.1", 8000)}
        owners = {s.sessions[sid].owner for sid in ep.replicas}
        assert owners == {"AKuma"}  # the owner's sessions, charged to the owner
        table = route_table(s.serving, datetime.now(UTC))
        assert [b.weight for b in table.routes[0].backends] == [0, 0]
        await report_health(log, ep.endpoint_id, ep.replicas, healthy=True)
        healthy = [ReplicaPhase.HEALTHY] * 2
        s = await w.until(uma, lambda s: phases(s, "sentiment") == healthy)
        [route] = route_table(s.serving, datetime.now(UTC)).routes
        assert route.path_prefix == "/e/sentiment/"
        assert [b.weight for b in route.backends] == [100, 100]
        assert sorted((await replica_requests(log)).values()) == [1, 1]


async def test_scaling_up_and_down_and_a_replica_that_ends_is_replaced(log: JetStreamLog) -> None:
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        await w.answer(uma, create("scaled", replicas=1))
        s = await w.until(uma, lambda s: phases(s, "scaled") == [ReplicaPhase.WARMING])
        await w.answer(uma, ScaleEndpoint(endpoint_id="ep-scaled", replicas=3))
        s = await w.until(uma, lambda s: phases(s, "scaled") == [ReplicaPhase.WARMING] * 3)
        await w.answer(uma, ScaleEndpoint(endpoint_id="ep-scaled", replicas=1))
        s = await w.until(uma, lambda s: phases(s, "scaled") == [ReplicaPhase.WARMING])
        [first] = endpoint(s, "scaled").replicas
        await uma.destroy(first)  # the replica's session ends under it
        s = await w.until(
            uma,
            lambda s: (
                phases(s, "scaled") == [ReplicaPhase.WARMING]
                and first not in replicas_of(s, "scaled")
            ),
        )
        [replacement] = endpoint(s, "scaled").replicas.values()
        assert (replacement.ordinal, replacement.generation) == (0, 1)
        assert set((await replica_requests(log)).values()) == {1}


async def test_a_restarted_actor_asks_for_no_replica_twice(log: JetStreamLog) -> None:
    async with world(log) as w:
        uma = w.client("AKuma")
        async with serving(log):
            await w.answer(uma, create("again", replicas=3))
            await w.until(uma, lambda s: phases(s, "again") == [ReplicaPhase.WARMING] * 3)
        async with serving(log):
            await w.answer(uma, ScaleEndpoint(endpoint_id="ep-again", replicas=4))
            await w.until(uma, lambda s: phases(s, "again") == [ReplicaPhase.WARMING] * 4)
        asked = await replica_requests(log)
        assert len(asked) == 4 and set(asked.values()) == {1}


async def test_only_the_owner_and_its_domains_admins_act_on_an_endpoint(log: JetStreamLog) -> None:
    async with world(log) as w, serving(log):
        uma, vic, oscar, dora = (w.client(k) for k in ("AKuma", "AKvic", "AKoscar", "AKdora"))
        await w.answer(uma, create("private", replicas=1))
        later = datetime.now(UTC) + timedelta(days=1)
        token = CreateToken(
            endpoint_id="ep-private", token_id="t1", sha256="a" * 64, expires_at=later
        )
        scale = ScaleEndpoint(endpoint_id="ep-private", replicas=5)
        for stranger in (vic, oscar):  # another user of its project; another domain's admin
            for c in (scale, token):
                refused = await w.answer(stranger, c)
                assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
                assert refused.reason == "no endpoint ep-private of yours"
        assert not isinstance(
            await w.answer(dora, ScaleEndpoint(endpoint_id="ep-private", replicas=2)), ServeRefused
        )
        await w.root.admin(RevokeKeypair(access_key="AKuma"))
        await w.until(uma, lambda s: s.tenancy.user_of("AKuma") is None)
        refused = await w.answer(uma, token)
        assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
        assert endpoint(await uma.state(), "private").tokens == {}


async def test_an_unhealthy_replica_is_drained_and_replaced_and_a_removed_endpoint_stops(
    log: JetStreamLog,
) -> None:
    async with world(log) as w, serving(log):
        uma = w.client("AKuma")
        await w.answer(uma, create("flaky", replicas=2))
        s = await w.until(uma, lambda s: phases(s, "flaky") == [ReplicaPhase.WARMING] * 2)
        ep = endpoint(s, "flaky")
        await report_health(log, ep.endpoint_id, ep.replicas, healthy=True)
        s = await w.until(uma, lambda s: phases(s, "flaky") == [ReplicaPhase.HEALTHY] * 2)
        sick = min(ep.replicas)
        await report_health(log, ep.endpoint_id, [sick], healthy=False)
        s = await w.until(
            uma,
            lambda s: (
                sick not in replicas_of(s, "flaky")
                and phases(s, "flaky") == sorted([ReplicaPhase.HEALTHY, ReplicaPhase.WARMING])
            ),
        )
        assert s.sessions[sick].status.value == "TERMINATED"  # destroyed once drained
        [route] = route_table(s.serving, datetime.now(UTC)).routes
        assert sick not in {b.session_id for b in route.backends}
        replicas = list(endpoint(s, "flaky").replicas)
        await w.answer(uma, RemoveEndpoint(endpoint_id="ep-flaky"))
        s = await w.until(
            uma,
            lambda s: (
                all(
                    sid in s.sessions and s.sessions[sid].status.value == "TERMINATED"
                    for sid in replicas
                )
                and "ep-flaky" not in s.serving.endpoints
            ),
        )
        assert route_table(s.serving, datetime.now(UTC)).routes == ()


HF = "hf_serving-s3cr3t-42"


async def test_a_revisions_replicas_get_the_owners_secret_and_only_the_owner_names_it(
    log: JetStreamLog,
) -> None:
    """The owner's revision naming its secret: each replica's session carries the name,
    the agent puts the value in its environment, and no record holds the value. A
    revision naming a secret the owner lacks, or one named both in clear and as a
    secret, is invalid; one naming the owner's secrets asked by an administrator of its
    domain (who may otherwise change the endpoint) is refused."""
    key = SealedBoxKey.generate()
    async with world(log, secrets=key) as w, serving(log):
        uma, dora = w.client("AKuma"), w.client("AKdora")
        await uma.secret_set("hf", seal(key.public_key, HF))
        await w.until(uma, lambda s: "hf" in s.secrets.of("AKuma"))
        spec = msgspec.structs.replace(
            SPEC,
            command=("sh", "-c", "echo token=$HF_TOKEN; sleep 3600"),
            secret_env=(("HF_TOKEN", "hf"),),
        )
        c = CreateEndpoint(endpoint_id="ep-sec", name="sec", revision=spec, replicas=2)
        answer = await w.answer(uma, c)
        assert not isinstance(answer, ServeRefused), answer
        s = await w.until(uma, lambda s: phases(s, "sec") == [ReplicaPhase.WARMING] * 2)
        for sid in endpoint(s, "sec").replicas:
            assert s.sessions[sid].secret_env == (("HF_TOKEN", "hf"),)
            [box] = await w.runtime.list({LABEL_SESSION: sid})
            assert f"token={HF}" in await w.runtime.logs(box.id)
        on_log = b"".join([encode(r.event) async for b in log.read(0) for r in b])
        assert HF.encode() not in on_log

        missing = msgspec.structs.replace(spec, secret_env=(("DB", "db"),))
        both = msgspec.structs.replace(spec, env=(("HF_TOKEN", "x"),))
        for bad, said in (
            (missing, "no secret db of AKuma's (fgpu secret set db)"),
            (both, "HF_TOKEN is given both in clear and as a secret"),
        ):
            refused = await w.answer(uma, AddRevision(endpoint_id="ep-sec", revision=bad))
            assert isinstance(refused, ServeRefused) and refused.code == "invalid"
            assert refused.reason == said
        refused = await w.answer(dora, AddRevision(endpoint_id="ep-sec", revision=spec))
        assert isinstance(refused, ServeRefused) and refused.code == "forbidden"
        assert "its owner's to add" in refused.reason
        plain = AddRevision(endpoint_id="ep-sec", revision=SPEC)
        assert not isinstance(await w.answer(dora, plain), ServeRefused)
