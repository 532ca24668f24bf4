"""Resource groups through the real actors on the in-memory log: only a superadmin changes
them, the quota actor refuses what a group does not allow, and the scheduler keeps each
group's sessions on its agents."""

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from events import (
    AdminRefused,
    CreateGroup,
    GroupSettings,
    QueueOrder,
    RemoveGroup,
    UpdateGroup,
)
from services.actors.bootstrap import bootstrap
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.system_clock import SystemClock
from services.client import Client
from tests.support.cluster import agent_config, running_cluster
from tests.support.tenants import Tenants

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def grouped() -> AsyncIterator[Tenants]:
    """The people of ``Tenants.people``; agent ``a1`` in the default group, ``f1`` in
    ``fast`` (which no administrator has created yet)."""
    from services.adapters.memory_log import MemoryLog

    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    plain = agent_config("a1", gpus=2, fgpu_per_gpu=100)
    fast = dataclasses.replace(agent_config("f1", gpus=1, fgpu_per_gpu=100), group="fast")
    async with running_cluster(log, [(plain, DummyRuntime()), (fast, DummyRuntime())]):
        t = Tenants(log, Client(log, SystemClock(), first.access_key))
        await t.people()
        yield t


async def test_only_a_superadmin_changes_groups() -> None:
    async with grouped() as t:
        dora, uma = t.client("AKdora"), t.client("AKuma")
        create = CreateGroup(group="fast", settings=GroupSettings())
        for who in (dora, uma):  # a domain admin, a user
            answer = await t.ask(who, create)
            assert isinstance(answer, AdminRefused) and answer.code == "forbidden"
            answer = await t.ask(who, UpdateGroup(group="default", settings=GroupSettings()))
            assert isinstance(answer, AdminRefused) and answer.code == "forbidden"
        assert "fast" not in (await t.root.state()).tenancy.groups
        await t.applied(t.root, create)
        answer = await t.ask(dora, RemoveGroup(group="fast"))
        assert isinstance(answer, AdminRefused) and answer.code == "forbidden"
        s = await t.root.state()
        assert s.tenancy.groups["fast"] == GroupSettings()


async def test_an_update_made_from_settings_since_changed_is_refused_as_a_conflict() -> None:
    """Two admins read the group, each changes one field: the second change, made from
    what it read, would undo the first, so it is refused; made again from the group as
    it now is, it keeps both."""
    async with grouped() as t:
        read = GroupSettings(projects=("research/nlp",))
        await t.applied(t.root, CreateGroup(group="fast", settings=read))
        idle = GroupSettings(projects=("research/nlp",), idle_timeout_s=600)
        await t.applied(t.root, UpdateGroup(group="fast", settings=idle, expected=read))
        drf = GroupSettings(projects=("research/nlp",), queue=QueueOrder.DRF)
        answer = await t.ask(t.root, UpdateGroup(group="fast", settings=drf, expected=read))
        assert isinstance(answer, AdminRefused) and answer.code == "conflict"
        assert answer.reason == "resource group fast changed since it was read"
        assert (await t.root.state()).tenancy.groups["fast"] == idle
        both = GroupSettings(projects=("research/nlp",), idle_timeout_s=600, queue=QueueOrder.DRF)
        await t.applied(t.root, UpdateGroup(group="fast", settings=both, expected=idle))
        await t.applied(t.root, UpdateGroup(group="fast", settings=read))  # no expectation
        assert (await t.root.state()).tenancy.groups["fast"] == read


async def test_bad_group_settings_are_refused_with_the_reason() -> None:
    async with grouped() as t:
        bad = {
            "no placement policy 'fastest'": GroupSettings(policy="fastest"),
            "the default lifetime must not be over the maximum": GroupSettings(
                default_lifetime_s=600, max_lifetime_s=60
            ),
            "no project research/robots": GroupSettings(projects=("research/robots",)),
            "the idle timeout must be at least 1 s": GroupSettings(idle_timeout_s=0),
        }
        for reason, settings in bad.items():
            answer = await t.ask(t.root, CreateGroup(group="fast", settings=settings))
            assert isinstance(answer, AdminRefused) and answer.code == "invalid"
            assert reason in answer.reason
        answer = await t.ask(t.root, RemoveGroup(group="default"))
        assert isinstance(answer, AdminRefused) and "cannot be removed" in answer.reason
        await t.applied(t.root, CreateGroup(group="fast", settings=GroupSettings()))
        answer = await t.ask(t.root, CreateGroup(group="fast", settings=GroupSettings()))
        assert isinstance(answer, AdminRefused) and answer.code == "conflict"


async def test_admission_checks_the_group_and_placement_keeps_to_it() -> None:
    async with grouped() as t:
        uma, vic = t.client("AKuma"), t.client("AKvic")
        sid, s = await t.session(uma, group="fast")
        missing = s.sessions[sid].reason
        assert missing == "no resource group fast open to project research/vision"
        only_nlp = GroupSettings(
            projects=("research/nlp",), max_lifetime_s=3600, queue=QueueOrder.DRF
        )
        await t.applied(t.root, CreateGroup(group="fast", settings=only_nlp))
        sid, s = await t.session(uma, group="fast")  # uma is in vision only
        # closed to uma's project: the same words as before it existed, so a refusal
        # tells nobody of a group they cannot see
        assert s.sessions[sid].reason == missing
        sid, s = await t.session(vic, group="fast", project="nlp", lifetime_s=7200)
        assert (
            s.sessions[sid].reason
        ) == "a lifetime of 7200 s is over resource group fast's maximum of 3600 s"
        fast = [
            (await t.session(vic, group="fast", project="nlp", slots=_fgpu(100)))[0]
            for _ in range(2)
        ]
        plain, _ = await t.session(vic, slots=_fgpu(100))
        with anyio.fail_after(10):
            s = await vic.wait_until(
                lambda s: all(
                    sid in s.sessions and s.sessions[sid].agent_id is not None
                    for sid in (fast[0], plain)
                )
            )
        assert (s.sessions[fast[0]].agent_id, s.sessions[plain].agent_id) == ("f1", "a1")
        # f1's one device is taken: the second waits, though a1 has one free.
        assert s.sessions[fast[1]].status.value == "PENDING"
        assert s.agents["a1"].free.fgpu == 100


def _fgpu(quanta: int) -> object:
    from events import Slots
    from tests.support.cluster import GIB

    return Slots(cpu=1000, mem=GIB, fgpu=quanta)


def test_who_sees_a_group_open_to_some_projects() -> None:
    """A superadmin every group; a domain admin those open to a project of its domain; a
    user those open to one of its projects."""
    from events import CreateDomain, CreateKeypair, CreateProject, CreateUser, Role
    from services.domain.access.visibility import sees_group, viewer_of
    from services.domain.tenancy.admin import apply
    from services.domain.tenancy.model import Tenancy

    t = Tenancy()
    made = [
        CreateDomain(domain="lab"),
        CreateProject(domain="lab", project="p1"),
        CreateProject(domain="lab", project="p2"),
        CreateDomain(domain="ops"),
        CreateUser(user="root", domain="lab", role=Role.SUPERADMIN),
        CreateUser(user="dora", domain="lab", role=Role.DOMAIN_ADMIN),
        CreateUser(user="oscar", domain="ops", role=Role.DOMAIN_ADMIN),
        CreateUser(user="uma", domain="lab", projects=("p1",)),
        CreateUser(user="vic", domain="lab", projects=("p2",)),
    ]
    for c in made:
        apply(t, c)
    for user in ("root", "dora", "oscar", "uma", "vic"):
        apply(t, CreateKeypair(access_key=f"AK{user}", user=user, secret_hash="x"))
    open_to = ("lab/p1",)
    seen = {}
    for user in ("root", "dora", "oscar", "uma", "vic"):
        viewer = viewer_of(t, f"AK{user}")
        assert not isinstance(viewer, str), viewer
        seen[user] = (sees_group(t, viewer, open_to), sees_group(t, viewer, None))
    assert seen == {
        "root": (True, True),
        "dora": (True, True),
        "oscar": (False, True),
        "uma": (True, True),
        "vic": (False, True),
    }
