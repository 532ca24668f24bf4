"""A live projection equals a rebuild from the start of the log, row for row.

Real actors (quota, scheduler, agents on the dummy runtime) over a real NATS server run a
random workload (hypothesis) while the projector follows the log, and is killed and
restarted along the way. Then ``rebuild`` (the bulk reader) makes a second store from the
start of the log: both hold exactly the same rows, and the rows say what the fold says.
"""

from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import AsyncExitStack, aclosing, contextmanager
from pathlib import Path
from typing import NoReturn
from unittest.mock import patch

import anyio
import hypothesis.strategies as st
import pytest
from anyio.abc import TaskGroup
from hypothesis import HealthCheck, given, settings

from events import (
    AddMember,
    AdminCommand,
    CreateEndpoint,
    CreateKeypair,
    CreateProject,
    CreateUser,
    PolicyLevel,
    RawBatch,
    ResourcePolicy,
    RevisionSpec,
    ScaleEndpoint,
    SetPolicy,
    Slots,
)
from projections import ProjectionStore, Projector, rebuild
from projections.compare import differences
from services.actors.agent import AgentActor
from services.actors.bootstrap import bootstrap
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.actors.serving import ServingActor
from services.adapters import jetstream, raw_reader
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import hash_secret
from services.domain.fold.cluster import ClusterState
from services.domain.tenancy.admin import DEFAULT
from services.ports import BulkLog
from tests.support.cluster import GIB, agent_config
from tests.support.nats_env import fresh_stream

IMAGE = "fgpu/busybox:latest"
OWNERS = ("alice", "bob")
Step = tuple[str, int, int]  # (what, a, b)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(0, 1), st.sampled_from([25, 50, 100, 150, 300])),
        st.tuples(st.just("destroy"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("policy"), st.integers(0, 1), st.integers(1, 3)),
        st.tuples(st.just("restart"), st.just(0), st.just(0)),
        st.tuples(st.just("bad"), st.just(0), st.just(0)),
        # With tenancy: a project (a new one, or one of a domain that is not), a user's
        # policy; its answer (applied or refused) is projected too.
        st.tuples(st.just("admin"), st.integers(0, 3), st.integers(1, 3)),
        # An endpoint of an owner: made at first, then scaled (replicas are its sessions).
        st.tuples(st.just("serve"), st.integers(0, 1), st.integers(0, 3)),
    ),
    min_size=4,
    max_size=12,
)


def _settled(ids: list[str], seen: int) -> Callable[[ClusterState], bool]:
    """Every session at rest and every request answered, in a fold that has read at least
    up to ``seen``."""

    def done(s: ClusterState) -> bool:
        # Unanswered destroys and admin requests, bad payloads not yet refused.
        if s.last_seq < seen or s.destroys or s.admin_requests or s.malformed:
            return False
        if s.serving.requests or not _replicas_settled(s):
            return False
        for i in ids:
            v = s.sessions.get(i)
            if v is None:
                return False
            stable = v.status.value in ("RUNNING", "REJECTED", "CANCELLED", "TERMINATED", "ERROR")
            if not stable and not (v.status.value == "PENDING" and v.waiting is not None):
                return False
        return True

    return done


def _replicas_settled(s: ClusterState) -> bool:
    """Every replica's session at rest too, and the serving actor done with it: each
    wanted slot filled (or stalled), no replica provisioning a running session."""
    for ep in s.serving.endpoints.values():
        filled = {(r.revision, r.ordinal) for r in ep.replicas.values()}
        wanted = {(t.revision, k) for t in ep.targets for k in range(t.replicas)}
        if any(f"{rev}/{k}" not in ep.stalled for rev, k in wanted - filled):
            return False
        for r in ep.replicas.values():
            v = s.sessions.get(r.session_id)
            if v is None or r.phase.value in ("draining",):
                return False
            if v.status.value == "RUNNING" and r.phase.value == "provisioning":
                return False
            waits = v.status.value == "PENDING" and v.waiting is not None
            if v.status.value != "RUNNING" and not waits:
                return False
    return True


@contextmanager
def _reads_in_a_child() -> Iterator[list[int]]:
    """Raw reads of any length in the reader's child process, for the block: yields the
    sequences that the child handed out. This process's protocol parser is disabled for
    the block (the child, a fresh interpreter, has its own): a read here fails."""
    in_child = raw_reader.read_in_child
    read: list[int] = []

    async def counted(src: raw_reader.Source) -> AsyncGenerator[RawBatch, None]:
        async with aclosing(in_child(src)) as batches:
            async for raw in batches:
                read.extend(raw.seqs)
                yield raw

    def in_this_process(src: raw_reader.Source) -> NoReturn:
        raise AssertionError("a raw read parsed the log in this process, not in its child")

    with (
        patch.object(jetstream, "CHILD_READ_FROM", 0),
        patch.object(raw_reader, "read_in_child", counted),
        patch.object(raw_reader, "_read", in_this_process),
    ):
        yield read


class _InOrder:
    """The log with its bulk reader hidden: a rebuild from it reads in order."""

    def __init__(self, log: JetStreamLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> object:
        if name == "read_raw":
            raise AttributeError(name)
        return getattr(self._log, name)


class _Live:
    """A projector on its own store, which can be killed and started again."""

    def __init__(self, log: JetStreamLog, path: Path, tg: TaskGroup) -> None:
        self.log, self.path, self.tg = log, path, tg
        self.scope: anyio.CancelScope | None = None
        self.store: ProjectionStore | None = None
        self.projector: Projector | None = None

    async def start(self) -> None:
        self.store = ProjectionStore(self.path, snapshot_every=7)
        self.projector = Projector(self.log, self.store)
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        scope, projector, done = self.scope, self.projector, self.done

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                with scope:
                    await projector.run(task_status=task_status)
            finally:
                done.set()

        await self.tg.start(run)

    async def stop(self) -> None:
        """Kill the projector between two awaits, as a crash would, then close its file."""
        assert self.scope is not None and self.store is not None
        self.scope.cancel()
        await self.done.wait()  # a batch being written in its thread finishes first
        await anyio.to_thread.run_sync(self.store.close)


async def _tenancy(log: JetStreamLog, clock: SystemClock) -> Client:
    """The first tenancy, with alice and bob users of the default project whose keypairs
    are their names; the superadmin's client."""
    extra = [
        command
        for owner in OWNERS
        for command in (
            CreateUser(user=owner, domain=DEFAULT, projects=(DEFAULT,)),
            CreateKeypair(access_key=owner, user=owner, secret_hash=hash_secret(owner)),
        )
    ]
    first = await bootstrap(log, clock, extra=tuple(extra))
    assert first is not None
    return Client(log, clock, first.access_key)


def _admin_command(a: int, b: int) -> AdminCommand:
    if a == 0:
        return CreateProject(domain=DEFAULT, project=f"p{b}")
    if a == 1:
        return CreateProject(domain="nowhere", project="p")  # refused: no such domain
    if a == 2:
        policy = ResourcePolicy(max_sessions=b)
        return SetPolicy(level=PolicyLevel.USER, target=OWNERS[b % 2], policy=policy)
    return AddMember(user=OWNERS[b % 2], project=f"p{b}")


async def _serve(client: Client, name: str, replicas: int, made: set[str]) -> None:
    """The owner's endpoint ``name``: made at ``replicas`` the first time, then scaled."""
    if name in made:
        await client.serve(ScaleEndpoint(endpoint_id=f"ep-{name}", replicas=replicas))
        return
    spec = RevisionSpec(image=IMAGE, slots=Slots(cpu=100, mem=GIB, fgpu=25))
    await client.serve(
        CreateEndpoint(endpoint_id=f"ep-{name}", name=name, revision=spec, replicas=replicas)
    )
    made.add(name)


async def _workload(url: str, tmp: Path, plan: list[Step], tenancy: bool) -> None:
    log = await connect(url)
    await fresh_stream(log)
    clock = SystemClock()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(log.close)
        tg = await stack.enter_async_context(anyio.create_task_group())
        await tg.start(RegistrarActor(log, clock).run)
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(ServingActor(log, clock).run)
        for n in range(2):
            config = agent_config(f"a{n}", gpus=2, fgpu_per_gpu=200)
            await tg.start(AgentActor(log, DummyRuntime(), clock, config).run)
        live = _Live(log, tmp / "live.duckdb", tg)
        await live.start()
        # A second projector of the same log (another `fgpu api`), never restarted: the
        # two must not take each other's records.
        other = _Live(log, tmp / "other.duckdb", tg)
        await other.start()
        clients = [Client(log, clock, o) for o in OWNERS]
        root = await _tenancy(log, clock) if tenancy else None
        ids: list[str] = []
        made: set[str] = set()
        for what, a, b in plan:
            if what == "create":
                slots = Slots(cpu=100, mem=GIB, fgpu=b)
                ids += await clients[a].create(image=IMAGE, slots=slots, count=3)
            elif what == "destroy" and ids:
                target = ids[a % len(ids)]
                await clients[OWNERS.index("alice" if a % 3 else "bob")].destroy(target)
            elif what == "policy":
                await clients[0].set_policy(OWNERS[a], max_sessions=b, max_slots=None)
            elif what == "restart":
                await live.stop()
                await live.start()
            elif what == "bad":
                await log.js.publish("fgpu.req.alice.s0bad", b"{not an event")
            elif what == "admin" and root is not None:
                await root.admin(_admin_command(a, b))
            elif what == "serve":
                await _serve(clients[a], f"m{a}", b, made)
        with anyio.fail_after(30):
            await clients[0].wait_until(_settled(ids, await log.last_seq()))
        end = await log.last_seq()
        assert live.projector is not None
        assert other.projector is not None
        with anyio.fail_after(10):
            await live.projector.wait_beyond(end - 1)
            await other.projector.wait_beyond(end - 1)
        await live.stop()
        await other.stop()
        tg.cancel_scope.cancel()

    log = await connect(url)
    try:
        result = await rebuild(log, tmp / "rebuilt.duckdb", snapshot_every=7)
        # Again as a long log is read: by the reader's child process, payloads canonical.
        # Small batches, three a transaction, as a long rebuild writes them.
        with _reads_in_a_child() as by_child:
            await rebuild(
                log,
                tmp / "rebuilt-by-child.duckdb",
                batch=5,
                batches_per_transaction=3,
                snapshot_every=7,
            )
        # And in order, as a log without a bulk reader (or one that cannot serve) is read.
        assert not isinstance(_InOrder(log), BulkLog)
        await rebuild(_InOrder(log), tmp / "rebuilt-in-order.duckdb", snapshot_every=7)
        truth = await Client(log, clock, "alice").state()
    finally:
        await log.close()
    assert result.events == end
    assert differences(tmp / "live.duckdb", tmp / "rebuilt.duckdb") == {}
    assert differences(tmp / "other.duckdb", tmp / "rebuilt.duckdb") == {}
    assert by_child == list(range(1, end + 1))  # every message, read by the child
    assert differences(tmp / "live.duckdb", tmp / "rebuilt-by-child.duckdb") == {}
    assert differences(tmp / "live.duckdb", tmp / "rebuilt-in-order.duckdb") == {}
    store = ProjectionStore(tmp / "rebuilt.duckdb", snapshot_every=7)
    try:
        found = dict(store.con.execute("SELECT session_id, status FROM sessions").fetchall())
        assert found == {sid: v.status.value for sid, v in truth.sessions.items()}
        used = dict(store.con.execute("SELECT agent_id, alloc_fgpu FROM agents").fetchall())
        assert used == {aid: a.allocated.fgpu for aid, a in truth.agents.items()}
        members = dict(store.con.execute("SELECT user, projects FROM users").fetchall())
        assert members == {u: list(v.projects) for u, v in truth.tenancy.users.items()}
        served = {row[0] for row in store.con.execute("SELECT name FROM endpoints").fetchall()}
        assert served == set(truth.serving.names)
    finally:
        store.close()


@pytest.mark.slow
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=steps, tenancy=st.booleans())
def test_a_live_projection_equals_a_rebuild_row_for_row(
    nats_url: str, tmp_path_factory: pytest.TempPathFactory, plan: list[Step], tenancy: bool
) -> None:
    tmp = tmp_path_factory.mktemp("rebuild")
    anyio.run(_workload, nats_url, tmp, plan, tenancy, backend="asyncio")
