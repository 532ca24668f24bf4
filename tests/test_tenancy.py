"""Tenancy on the in-memory log: who may change what (the registrar checks roles), and
what a session may hold at its keypair, user, project and domain (the quota actor)."""

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from events import (
    AddMember,
    AdminApplied,
    AdminCommand,
    AdminRefused,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    PolicyLevel,
    RemoveUser,
    ResourcePolicy,
    RevokeKeypair,
    Role,
    SetPolicy,
    SetRole,
    Slots,
)
from services.actors.bootstrap import bootstrap
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.keys import hash_secret, secret_matches
from services.domain.state import ClusterState
from tests.cluster import GIB, agent_config, running_cluster

pytestmark = pytest.mark.anyio
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


async def test_a_cluster_starts_with_one_superadmin_once() -> None:
    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    assert await bootstrap(log, SystemClock()) is None  # written already: nothing more
    s = await Client(log, SystemClock(), first.access_key).state()
    kp = s.tenancy.keypairs[first.access_key]
    assert s.tenancy.users["admin"].role is Role.SUPERADMIN and kp.user == "admin"
    assert secret_matches(first.secret, kp.secret_hash)
    assert first.secret not in str(await Client(log, SystemClock(), "x").state())


async def test_roles_decide_who_may_change_what() -> None:
    async with tenants() as t:
        await t.people()
        dora, uma, oscar = t.client("AKdora"), t.client("AKuma"), t.client("AKoscar")
        refused = {
            "a domain admin creates a domain": (dora, CreateDomain(domain="mine")),
            "a domain admin makes a superadmin": (
                dora,
                CreateUser(user="eve", domain="research", role=Role.SUPERADMIN),
            ),
            "a domain admin acts in another domain": (
                oscar,
                AddMember(user="uma", project="nlp"),
            ),
            "a domain admin raises its domain's cap": (
                dora,
                SetPolicy(level=PolicyLevel.DOMAIN, target="research", policy=ResourcePolicy()),
            ),
            "a user adds itself to a project": (uma, AddMember(user="uma", project="nlp")),
            "a user makes a keypair for another": (
                uma,
                CreateKeypair(access_key="AKuma2", user="vic", secret_hash=HASH),
            ),
            "a user raises its own policy": (
                uma,
                SetPolicy(level=PolicyLevel.KEYPAIR, target="AKuma", policy=ResourcePolicy()),
            ),
            "a stranger's key": (t.client("AKnobody"), CreateDomain(domain="x")),
        }
        for what, (who, command) in refused.items():
            answer = await t.ask(who, command)
            assert isinstance(answer, AdminRefused) and answer.code == "forbidden", what
        s = await t.root.state()
        assert "mine" not in s.tenancy.domains and "eve" not in s.tenancy.users
        assert "nlp" not in s.tenancy.users["uma"].projects
        # What each role may do.
        await t.applied(dora, AddMember(user="uma", project="nlp"))
        await t.applied(dora, SetRole(user="vic", role=Role.DOMAIN_ADMIN))
        await t.applied(uma, CreateKeypair(access_key="AKuma2", user="uma", secret_hash=HASH))
        await t.applied(uma, RevokeKeypair(access_key="AKuma2"))
        answer = await t.ask(dora, CreateProject(domain="research", project="vision"))
        assert isinstance(answer, AdminRefused) and answer.code == "conflict"
        answer = await t.ask(dora, CreateProject(domain="research", project="no/slash"))
        assert isinstance(answer, AdminRefused) and answer.code == "invalid"


async def test_a_session_belongs_to_a_project_of_its_user() -> None:
    async with tenants() as t:
        await t.people()
        uma, vic = t.client("AKuma"), t.client("AKvic")
        sid, s = await t.session(uma)
        assert (s.sessions[sid].user, s.sessions[sid].project) == ("uma", "research/vision")
        assert s.sessions[sid].status.value == "PENDING" or s.sessions[sid].agent_id
        sid, s = await t.session(vic, project="nlp")
        assert s.sessions[sid].project == "research/nlp" and s.sessions[sid].quota_held
        sid, s = await t.session(uma, project="nlp")
        v = s.sessions[sid]
        assert (v.status.value, v.reason) == (
            "REJECTED",
            "user uma is not a member of project research/nlp",
        )
        sid, s = await t.session(t.client("AKstranger"))
        assert s.sessions[sid].reason == "access key AKstranger is unknown or revoked"


async def test_a_revoked_or_removed_key_gets_nothing_new() -> None:
    async with tenants() as t:
        await t.people()
        uma = t.client("AKuma")
        running, _ = await t.session(uma)
        await t.applied(t.root, RevokeKeypair(access_key="AKuma"))
        sid, s = await t.session(uma)
        assert s.sessions[sid].reason == "access key AKuma is unknown or revoked"
        assert s.sessions[running].status.value in ("SCHEDULED", "PREPARING", "RUNNING")
        answer = await t.ask(uma, CreateKeypair(access_key="AKback", user="uma", secret_hash=HASH))
        assert isinstance(answer, AdminRefused) and answer.code == "forbidden"
        await t.applied(t.root, RemoveUser(user="vic"))
        sid, s = await t.session(t.client("AKvic"))
        assert s.sessions[sid].status.value == "REJECTED"


@pytest.mark.parametrize(
    ("level", "target", "policy", "said"),
    [
        (
            PolicyLevel.KEYPAIR,
            "AKvic",
            ResourcePolicy(max_sessions=1),
            "keypair policy allows 1 concurrent sessions; 1 already held",
        ),
        (
            PolicyLevel.KEYPAIR,
            "AKvic",
            ResourcePolicy(max_priority=10),
            "keypair policy allows priority up to 10; asked 50",
        ),
        (
            PolicyLevel.USER,
            "vic",
            ResourcePolicy(total_slots=Slots(cpu=10_000, mem=10 * GIB, fgpu=75)),
            "user policy (vic) allows 0.75 fGPU, 10 cpu, 10G mem in total",
        ),
        (
            PolicyLevel.PROJECT,
            "research/vision",
            ResourcePolicy(total_slots=Slots(cpu=1 << 62, mem=1 << 62, fgpu=60)),
            "project policy (research/vision) allows 0.6 fGPU, unlimited cpu, unlimited mem",
        ),
        (
            PolicyLevel.DOMAIN,
            "research",
            ResourcePolicy(total_slots=Slots(cpu=1500, mem=1 << 62, fgpu=1 << 62)),
            "domain policy (research) allows unlimited fGPU, 1.5 cpu, unlimited mem",
        ),
    ],
)
async def test_each_level_s_policy_refuses_by_name(
    level: PolicyLevel, target: str, policy: ResourcePolicy, said: str
) -> None:
    async with tenants() as t:
        await t.people()
        vic = t.client("AKvic")
        await t.applied(t.root, SetPolicy(level=level, target=target, policy=policy))
        first, s = await t.session(vic)
        assert s.sessions[first].quota_held, s.sessions[first].reason
        second, s = await t.session(vic, priority=50)
        v = s.sessions[second]
        assert v.status.value == "REJECTED" and said in (v.reason or ""), v.reason


async def test_pending_limits_count_only_what_waits() -> None:
    async with tenants(gpus=1) as t:
        await t.people()
        vic = t.client("AKvic")
        policy = ResourcePolicy(max_pending_sessions=1)
        await t.applied(t.root, SetPolicy(level=PolicyLevel.KEYPAIR, target="AKvic", policy=policy))
        one = Slots(cpu=1000, mem=GIB, fgpu=100)  # the whole GPU
        await t.session(vic, slots=one)
        waits, s = await t.session(vic, slots=one)  # the first holds the GPU: this one waits
        refused, s = await t.session(vic, slots=one)
        assert s.sessions[waits].quota_held and s.sessions[waits].agent_id is None
        assert s.sessions[refused].reason == (
            "keypair policy allows 1 pending sessions; 1 already pending"
        )


async def test_a_lower_policy_ends_nothing_and_refuses_what_comes_next() -> None:
    async with tenants() as t:
        await t.people()
        vic = t.client("AKvic")
        a, _ = await t.session(vic)
        b, _ = await t.session(vic)
        policy = ResourcePolicy(max_sessions=1)
        await t.applied(t.root, SetPolicy(level=PolicyLevel.USER, target="vic", policy=policy))
        c, s = await t.session(vic)
        assert s.sessions[a].quota_held and s.sessions[b].quota_held
        assert "user policy (vic) allows 1 concurrent sessions; 2 already held" in (
            s.sessions[c].reason or ""
        )
