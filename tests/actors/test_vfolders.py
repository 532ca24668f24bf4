"""Virtual folders on the in-memory log: who may create, share, trash and purge them (the
registrar), who may mount them (the quota actor, at admission), and how the agent mounts
them (read-only when asked, or when shared read-only)."""

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from events import (
    AdminApplied,
    AdminRefused,
    AgentRegistered,
    CreateVfolder,
    PurgeVfolders,
    RemoveVfolder,
    SessionRejected,
    SessionRequested,
    ShareVfolder,
    Slots,
    UnshareVfolder,
    VfolderMount,
    decode,
    encode,
)
from services.actors.agent import AgentActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import ContainerSpec
from services.domain.status import SessionStatus
from services.domain.tenancy.vfolders import MOUNT_ROOT
from services.ports import ContainerInfo
from tests.support.cluster import GIB, agent_config
from tests.support.tenants import Tenants, tenants

pytestmark = pytest.mark.anyio
IMAGE = "fgpu/busybox:latest"
AT = datetime(2024, 5, 17, 12, tzinfo=UTC)
HALF = Slots(cpu=1000, mem=GIB, fgpu=50)


def uma_data(**given: object) -> CreateVfolder:
    fields: dict[str, object] = {"vfolder_id": "vf-uma", "name": "data", "user": "uma", **given}
    return CreateVfolder(**fields)  # type: ignore[arg-type]


async def refused(t: Tenants, who: Client, command: object, code: str) -> str:
    answer = await t.ask(who, command)  # type: ignore[arg-type]
    assert isinstance(answer, AdminRefused), answer
    assert answer.code == code, answer.reason
    return answer.reason


async def test_a_folders_owner_and_its_domains_admins_manage_it_and_nobody_else() -> None:
    async with tenants() as t:
        await t.people()
        uma, vic, dora, oscar = (t.client(k) for k in ("AKuma", "AKvic", "AKdora", "AKoscar"))
        await refused(t, vic, uma_data(), "forbidden")  # a folder of another user
        await refused(t, uma, uma_data(name="../etc"), "invalid")
        await refused(t, uma, uma_data(quota_bytes=0), "invalid")
        await t.applied(uma, uma_data(quota_bytes=1 << 20))
        await refused(t, uma, uma_data(vfolder_id="vf-2"), "conflict")  # the name is taken
        await refused(t, vic, ShareVfolder(vfolder_id="vf-uma", target="user:vic"), "forbidden")
        await refused(t, oscar, RemoveVfolder(vfolder_id="vf-uma"), "forbidden")
        await refused(t, uma, ShareVfolder(vfolder_id="vf-uma", target="user:oscar"), "invalid")
        await t.applied(uma, ShareVfolder(vfolder_id="vf-uma", target="user:vic", access="ro"))
        await t.applied(uma, ShareVfolder(vfolder_id="vf-uma", target="project:research/nlp"))
        await t.applied(uma, UnshareVfolder(vfolder_id="vf-uma", target="project:research/nlp"))
        # Trashed by its domain's admin; emptied by an admin, never by a user.
        await t.applied(dora, RemoveVfolder(vfolder_id="vf-uma"))
        await refused(t, uma, PurgeVfolders(vfolder_ids=("vf-uma",)), "forbidden")
        await refused(t, oscar, PurgeVfolders(vfolder_ids=("vf-uma",)), "forbidden")
        s = await t.root.state()
        f = s.tenancy.vfolders["vf-uma"]
        assert f.state == "trashed" and f.shares == {"user:vic": "ro"} and f.quota_bytes == 1 << 20
        await t.applied(uma, uma_data(vfolder_id="vf-uma2"))  # the name is free again
        await t.applied(dora, PurgeVfolders(vfolder_ids=("vf-uma",)))
        s = await t.root.state()
        assert s.tenancy.vfolders["vf-uma"].state == "purged"
        assert s.tenancy.vfolders["vf-uma2"].state == "live"


async def test_a_mount_is_checked_at_admission_and_refused_with_a_reason() -> None:
    async with tenants() as t:
        await t.people()
        uma, vic = t.client("AKuma"), t.client("AKvic")
        await t.applied(uma, uma_data())
        mount = (VfolderMount(name="data"),)
        sid, s = await t.session(vic, mounts=mount)
        v = s.sessions[sid]
        assert v.status is SessionStatus.REJECTED
        assert v.reason == "user vic has no folder 'data' (or may not use it)"
        codes = [
            r.event.code
            async for batch in t.log.read(0)
            for r in batch
            if isinstance(r.event, SessionRejected) and r.event.session_id == sid
        ]
        assert codes == ["vfolder"]
        await t.applied(uma, ShareVfolder(vfolder_id="vf-uma", target="user:vic", access="ro"))
        sid, s = await t.session(vic, mounts=mount)
        assert s.sessions[sid].status is not SessionStatus.REJECTED
        assert s.sessions[sid].storage_hosts == ("local",)  # agents must mount its host
        sid, s = await t.session(uma, mounts=(*mount, VfolderMount(name="vf-uma")))
        assert s.sessions[sid].reason == f"two folders would be mounted at {MOUNT_ROOT}/data"
        sid, s = await t.session(uma, mounts=(VfolderMount(name="x" * 129),))
        assert (
            s.sessions[sid].reason == "mounts must be at most 16 folder names of 1-128 characters"
        )


class _Recording(DummyRuntime):
    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, ContainerSpec] = {}

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        self.specs[spec.labels["fgpu.session"]] = spec
        return await super().run(spec)


async def test_the_agent_binds_each_folder_read_only_when_asked_or_shared_so(
    tmp_path: Path,
) -> None:
    from services.actors.bootstrap import bootstrap
    from tests.support.cluster import running_cluster

    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    runtime = _Recording()
    config = dataclasses.replace(
        agent_config("a1", gpus=1, fgpu_per_gpu=100), vfolder_root=str(tmp_path)
    )
    async with running_cluster(log, [(config, runtime)]):
        t = Tenants(log, Client(log, SystemClock(), first.access_key))
        await t.people()
        uma, vic = t.client("AKuma"), t.client("AKvic")
        await t.applied(uma, uma_data(), uma_data(vfolder_id="vf-logs", name="logs"))
        await t.applied(uma, ShareVfolder(vfolder_id="vf-uma", target="user:vic", access="ro"))
        await t.applied(uma, ShareVfolder(vfolder_id="vf-logs", target="user:vic", access="rw"))
        asked = (VfolderMount(name="data"), VfolderMount(name="logs"))
        own, _ = await t.session(uma, mounts=(VfolderMount(name="data", read_only=True),))
        shared, _ = await t.session(vic, mounts=asked)
        with anyio.fail_after(10):
            await vic.wait_until(
                lambda s: all(
                    i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING
                    for i in (own, shared)
                )
            )
    binds = {
        sid: {
            (m.source, m.target, m.read_only)
            for m in runtime.specs[sid].mounts
            if "vf-" in m.source
        }
        for sid in (own, shared)
    }
    data, logs = str(tmp_path / "local" / "vf-uma"), str(tmp_path / "local" / "vf-logs")
    assert binds[own] == {(data, "/home/work/data", True)}
    assert binds[shared] == {(data, "/home/work/data", True), (logs, "/home/work/logs", False)}
    assert await anyio.Path(data).is_dir() and await anyio.Path(logs).is_dir()  # made by it


def test_a_request_from_before_mounts_decodes_with_none() -> None:
    e = SessionRequested(
        id="r", at=AT, actor="k", session_id="s", owner="k", image=IMAGE, slots=HALF
    )
    data = encode(e)
    assert b"mounts" in data
    old = data.replace(b',"mounts":[]', b"")
    assert b"mounts" not in old
    decoded = decode(old)
    assert isinstance(decoded, SessionRequested) and decoded.mounts == ()


def test_folder_commands_round_trip_in_admin_events() -> None:
    for command in (
        uma_data(quota_bytes=5, host="nfs1"),
        ShareVfolder(vfolder_id="vf", target="project:d/p", access="rw"),
        UnshareVfolder(vfolder_id="vf", target="user:x"),
        RemoveVfolder(vfolder_id="vf"),
        PurgeVfolders(vfolder_ids=("a", "b")),
    ):
        e = AdminApplied(id="x", at=AT, actor="registrar", requester="k", command=command)
        assert decode(encode(e)) == e


async def test_folders_and_mounts_survive_a_snapshot() -> None:
    from services.domain.fold.state_codec import decode_state, encode_state

    async with tenants() as t:
        await t.people()
        uma = t.client("AKuma")
        await t.applied(uma, uma_data(quota_bytes=7))
        await t.applied(uma, ShareVfolder(vfolder_id="vf-uma", target="project:research/nlp"))
        sid, s = await t.session(uma, mounts=(VfolderMount(name="data", read_only=True),))
    restored = decode_state(encode_state(s))
    assert restored.tenancy.vfolders == s.tenancy.vfolders
    assert restored.tenancy.vfolders["vf-uma"].shares == {"project:research/nlp": "ro"}
    assert restored.sessions[sid].mounts == (VfolderMount(name="data", read_only=True),)


def test_a_sessions_story_says_what_it_mounts() -> None:
    from projections.story import story

    e = SessionRequested(
        id="r",
        at=AT,
        actor="k",
        session_id="s",
        owner="k",
        image=IMAGE,
        slots=HALF,
        mounts=(VfolderMount(name="data"), VfolderMount(name="refs", read_only=True)),
    )
    [line] = story([(1, e)], {"r"})
    assert line.text.endswith("to run fgpu/busybox:latest, mounting data, refs (read-only)")


async def test_a_projects_folder_is_its_members_and_made_by_its_domains_admins() -> None:
    from services.domain.tenancy.vfolders import access_of, mount_plan

    async with tenants() as t:
        await t.people()
        uma, dora = t.client("AKuma"), t.client("AKdora")
        shared = CreateVfolder(vfolder_id="vf-nlp", name="corpus", project="research/nlp")
        await refused(t, uma, shared, "forbidden")  # a user makes only its own
        await t.applied(dora, shared)
        s = await t.root.state()
        f = s.tenancy.vfolders["vf-nlp"]
        assert (f.user, f.project, f.domain) == (None, "research/nlp", "research")
        users = s.tenancy.users
        assert access_of(users["vic"], f) == "rw"  # a member of nlp
        assert access_of(users["uma"], f) is None  # of vision only
        assert access_of(users["dora"], f) is None  # manages it, does not read it
        plan = mount_plan(s.tenancy, "AKvic", (VfolderMount(name="corpus"),))
        assert not isinstance(plan, str)
        assert [(p.target, p.read_only) for p in plan] == [("/home/work/corpus", False)]


@pytest.mark.parametrize(
    ("root", "hosts", "said"),
    [
        (None, ("nfs",), ()),  # no folders here: whatever the hosts, it mounts none
        ("/srv/vf", None, None),  # every host's folders are under the root
        ("/srv/vf", ("nfs", "local"), ("nfs", "local")),
    ],
)
async def test_an_agent_says_whose_folders_it_mounts(
    root: str | None, hosts: tuple[str, ...] | None, said: tuple[str, ...] | None
) -> None:
    log = MemoryLog()
    config = dataclasses.replace(agent_config("a1"), vfolder_root=root, storage_hosts=hosts)
    await AgentActor(log, DummyRuntime(), SystemClock(), config).register()
    [registered] = [r.event async for batch in log.read(0) for r in batch]
    assert isinstance(registered, AgentRegistered)
    assert registered.storage_hosts == said


async def test_an_agent_refuses_a_folder_of_a_storage_host_it_does_not_mount(
    tmp_path: Path,
) -> None:
    """The scheduler places by storage host; a session admitted before sessions said
    theirs could still reach an agent that mounts other hosts. It is refused there, and
    no empty directory stands in for the folder."""
    async with tenants() as t:
        await t.people()
        uma = t.client("AKuma")
        await t.applied(uma, uma_data())  # on storage host "local"
        sid, s = await t.session(uma, mounts=(VfolderMount(name="data"),))
    config = dataclasses.replace(
        agent_config("a1"), vfolder_root=str(tmp_path), storage_hosts=("nfs",)
    )
    agent = AgentActor(MemoryLog(), DummyRuntime(), SystemClock(), config)
    agent.state = s
    assert await agent._vfolders(s.sessions[sid]) == "agent a1 does not mount storage host local"
    assert not (tmp_path / "local").exists()
    anywhere = dataclasses.replace(config, storage_hosts=None)
    every = AgentActor(MemoryLog(), DummyRuntime(), SystemClock(), anywhere)
    every.state = s
    [mount] = await every._vfolders(s.sessions[sid])  # type: ignore[misc]
    assert mount.target == "/home/work/data" and (tmp_path / "local").is_dir()
