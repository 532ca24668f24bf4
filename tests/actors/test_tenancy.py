"""Tenancy on the in-memory log: who may change what (the registrar checks roles), and
what a session may hold at its keypair, user, project and domain (the quota actor)."""

import pytest

from events import (
    AddMember,
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
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.keys import secret_matches
from tests.support.cluster import GIB
from tests.support.tenants import HASH, tenants

pytestmark = pytest.mark.anyio


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
