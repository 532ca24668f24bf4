"""Two domains of tenants on a real log, projected and served by the read API (with the
storage service of their folders), each tenant's identifiers distinctive enough to be
searched for in any answer: for the tests of what each viewer may read.

Domain ``dlab7q`` (projects ``pa9k``, ``pb4m``): users ``ualice5r`` and ``ubob8t``, domain
admin ``udan2y``. Domain ``doth3z`` (project ``px2w``): user ``ueve6u``, domain admin
``ucarol1i``. The superadmin ``uroot4o`` (domain ``default``). Each person has a keypair;
alice, bob and eve a session running and a folder with a file in it, alice also a session
she destroyed, carol a folder of her project; each domain its groups, image allow-list,
alias and policies at every level.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal

from events import (
    AdminCommand,
    CreateDomain,
    CreateEndpoint,
    CreateGroup,
    CreateKeypair,
    CreateProject,
    CreateServiceKey,
    CreateUser,
    CreateVfolder,
    GroupSettings,
    PipelineSpec,
    PipelineTask,
    PolicyLevel,
    ResourcePolicy,
    RevisionSpec,
    Role,
    SetImageAlias,
    SetImages,
    SetPolicy,
    Slots,
)
from services.actors.bootstrap import FirstAdmin, bootstrap
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.adapters.vfolder_files import FolderFiles
from services.api.auth import TokenSigner
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus
from tests.support.api_stack import read_api
from tests.support.cluster import GIB, agent_config, running_cluster
from tests.support.plain_http import cookieless

__all__ = ["DOMAINS", "PEOPLE", "ROOT", "World", "world"]

IMAGE = "fgpu/busybox:latest"
SIGNER = TokenSigner(b"w" * 32)
ROOT = "uroot4o"
# domain -> its projects, its groups (open to those of its projects), its allowed image
# and an alias of it.
DOMAINS = {
    "dlab7q": (("pa9k", "pb4m"), {"glab3e": ("pa9k",), "gbob5n": ("pb4m",)}, "imlab8c", "allab"),
    "doth3z": (("px2w",), {"goth2k": ("px2w",)}, "imoth4d", "aloth"),
}
SHARED_GROUP = "gboth6j"  # open to a project of each domain
# Who is who: (user, domain, role, project, its folder's name or None).
PEOPLE = (
    ("ualice5r", "dlab7q", Role.USER, "pa9k", "fnalice"),
    ("ubob8t", "dlab7q", Role.USER, "pb4m", "fnbob"),
    ("udan2y", "dlab7q", Role.DOMAIN_ADMIN, "pa9k", None),
    ("ueve6u", "doth3z", Role.USER, "px2w", "fneve"),
    ("ucarol1i", "doth3z", Role.DOMAIN_ADMIN, "px2w", "fncarolproj"),
)
RUNNING = ("ualice5r", "ubob8t", "ueve6u")  # each has a session running
SERVING = ("ualice5r", "ueve6u")  # each has an endpoint with a replica running


@dataclass
class World:
    api: str
    nats: str
    keys: dict[str, tuple[str, str]]  # user -> access key, secret
    sessions: dict[str, list[str]]  # user -> its session ids
    folders: dict[str, str]  # user -> the id of its folder
    files: dict[str, str]  # folder id -> the path of the file in it
    admin_requests: dict[str, str]  # user -> the id of an admin request of theirs
    destroys: dict[str, str]  # user -> the id of a destroy request of theirs
    service: tuple[str, str]  # the scheduler's keypair
    tokens: dict[str, str] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)  # user -> a pipeline run of theirs
    endpoints: dict[str, tuple[str, str]] = field(default_factory=dict)  # user -> id, name
    http: httpx.Client = field(default_factory=cookieless)  # every request's (plain_http)

    def token(self, who: str) -> str:
        if who not in self.tokens:
            key, secret = self.keys[who]
            r = self.http.post(
                f"{self.api}/v1/auth/token", json={"access_key": key, "secret_key": secret}
            )
            assert r.status_code == 200, r.text
            self.tokens[who] = r.json()["token"]
        return self.tokens[who]

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(who)}"}

    def get(self, who: str, path: str, **params: Any) -> httpx.Response:
        return self.http.get(f"{self.api}{path}", params=params, headers=self.headers(who))

    def ok(self, who: str, path: str, **params: Any) -> Any:
        r = self.get(who, path, **params)
        assert r.status_code == 200, r.text
        return r.json()

    def identifiers(self, user: str) -> set[str]:
        """What names ``user`` and what is its own: its name, access key, sessions (and
        their names), its folder (name, id and file)."""
        found = {user, self.keys[user][0]}
        if user in self.sessions:
            found |= {*self.sessions[user], f"n{user}"}
        if user in self.runs:
            found |= {self.runs[user], f"pl{user}", f"t{user}"}
        found |= set(self.endpoints.get(user, ()))
        folder = self.folders.get(user)
        if folder is not None:
            found |= {folder, self.files[folder]}
            found |= {name for u, *_, name in PEOPLE if u == user and name is not None}
        return found

    def of_domain(self, domain: str) -> set[str]:
        """The identifiers of ``domain`` itself: its name, projects, groups, allowed image
        and alias, and those of each of its people."""
        projects, groups, image, alias = DOMAINS[domain]
        found = {domain, *projects, *groups, image, alias}
        for user, d, *_ in PEOPLE:
            if d == domain:
                found |= self.identifiers(user)
        return found


def _commands(keys: dict[str, tuple[str, str]], service: tuple[str, str]) -> list[AdminCommand]:
    commands: list[AdminCommand] = []
    for domain, (projects, groups, image, alias) in DOMAINS.items():
        commands.append(CreateDomain(domain=domain))
        commands += [CreateProject(domain=domain, project=p) for p in projects]
        commands += [
            CreateGroup(
                group=g, settings=GroupSettings(projects=tuple(f"{domain}/{p}" for p in ps))
            )
            for g, ps in groups.items()
        ]
        commands += [
            SetImages(domain=domain, images=(f"{image}/x", "fgpu/busybox")),
            SetImageAlias(domain=domain, alias=alias, image=f"{image}/x:1"),
            SetPolicy(
                level=PolicyLevel.DOMAIN,
                target=domain,
                policy=ResourcePolicy(total_slots=Slots(cpu=64_000, mem=64 * GIB, fgpu=10_000)),
            ),
            SetPolicy(
                level=PolicyLevel.PROJECT,
                target=f"{domain}/{projects[0]}",
                policy=ResourcePolicy(total_slots=Slots(cpu=64_000, mem=64 * GIB, fgpu=10_000)),
            ),
        ]
    commands.append(
        CreateGroup(
            group=SHARED_GROUP, settings=GroupSettings(projects=("dlab7q/pa9k", "doth3z/px2w"))
        )
    )
    for user, domain, role, project, _ in PEOPLE:
        commands.append(
            CreateUser(
                user=user, domain=domain, role=role, projects=(project,), default_project=project
            )
        )
        key, secret = keys[user]
        commands += [
            CreateKeypair(access_key=key, user=user, secret_hash=hash_secret(secret)),
            SetPolicy(
                level=PolicyLevel.KEYPAIR, target=key, policy=ResourcePolicy(max_sessions=50)
            ),
            SetPolicy(level=PolicyLevel.USER, target=user, policy=ResourcePolicy(max_sessions=50)),
        ]
    key, secret = service
    commands.append(
        CreateServiceKey(access_key=key, service="scheduler", secret_hash=hash_secret(secret))
    )
    return commands


async def _wait(events: JetStreamLog, done: Any, what: str) -> ClusterState:
    seen = ClusterState()
    with anyio.move_on_after(30):
        return await Client(events, SystemClock(), "observer").wait_until(done, seen)
    raise AssertionError(f"{what}: not within 30 s")


async def _people(world: World, events: JetStreamLog) -> None:
    """Sessions and folders of the people, as they would ask for them."""
    clock = SystemClock()
    clients = {user: Client(events, clock, world.keys[user][0]) for user, *_ in PEOPLE}
    one = Slots(cpu=500, mem=GIB, fgpu=20)
    for user in RUNNING:
        world.sessions[user] = await clients[user].create(image=IMAGE, slots=one, name=f"n{user}")
    for user in RUNNING:  # a pipeline run of each (no pipeline actor: its task waits)
        task = PipelineTask(name=f"t{user}", image=IMAGE, command=("true",), slots=one)
        spec = PipelineSpec(name=f"pl{user}", tasks=(task,))
        world.runs[user] = await clients[user].pipeline_run(spec)
    [gone] = await clients["ualice5r"].create(image=IMAGE, slots=one, name="nualice5r")
    world.sessions["ualice5r"].append(gone)
    for user, domain, _, project, folder in PEOPLE:
        if folder is None:
            continue
        vid = f"vf{folder}"
        owner = {"project": f"{domain}/{project}"} if folder.endswith("proj") else {"user": user}
        command = CreateVfolder(vfolder_id=vid, name=folder, **owner)
        world.admin_requests[user] = await clients[user].admin(command)
        world.folders[user] = vid
    for user in SERVING:
        world.endpoints[user] = (f"ep{user}", f"m{user}")
        spec = RevisionSpec(image=IMAGE, slots=one)
        ask = CreateEndpoint(endpoint_id=f"ep{user}", name=f"m{user}", revision=spec, replicas=1)
        await clients[user].serve(ask)
    ids = [s for user in RUNNING for s in world.sessions[user]]
    await _wait(
        events,
        lambda s: (
            all(i in s.sessions and s.sessions[i].status is SessionStatus.RUNNING for i in ids)
            and set(world.folders.values()) <= set(s.tenancy.vfolders)
            and all(
                any(r.host for r in ep.replicas.values()) for ep in s.serving.endpoints.values()
            )
            and len(s.serving.endpoints) == len(SERVING)
        ),
        "sessions running, folders made and endpoints served",
    )
    world.destroys["ualice5r"] = await clients["ualice5r"].destroy(gone)
    await _wait(
        events,
        lambda s: s.sessions.get(gone) is not None and s.sessions[gone].status.value != "RUNNING",
        "alice's session destroyed",
    )


async def _cluster(url: str, *, task_status: TaskStatus[World]) -> None:
    events = await connect(url, name="api-world")
    try:
        await events.create_or_update_stream()
        keys = {user: (new_access_key(), new_secret()) for user, *_ in PEOPLE}
        service = (new_access_key("SK"), new_secret())
        root: FirstAdmin | None = await bootstrap(
            events, SystemClock(), user=ROOT, extra=tuple(_commands(keys, service))
        )
        assert root is not None
        keys[ROOT] = (root.access_key, root.secret)
        world = World("", url, keys, {}, {}, {}, {}, {}, service)
        async with running_cluster(events, [(agent_config("a1"), DummyRuntime())]):
            await _people(world, events)
            task_status.started(world)
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await events.close()


def _upload(w: World) -> None:
    """A file into each folder, by its owner (carol: her project's)."""
    for user, folder in w.folders.items():
        path = f"docs/r{folder}.txt"
        r = w.http.put(
            f"{w.api}/v1/vfolders/{folder}/files/{path}",
            content=f"what {user} keeps".encode(),
            headers=w.headers(user),
        )
        assert r.status_code == 200, r.text
        w.files[folder] = path


def _caught_up(w: World) -> None:
    """Wait until the API has projected what the cluster did (and the folders' scans)."""
    deadline = time.monotonic() + 30
    while True:
        events = w.ok(ROOT, "/v1/events", limit=1000, type="vfolder.scanned.v1")["events"]
        if len(events) >= len(w.folders):
            return
        assert time.monotonic() < deadline, events
        time.sleep(0.05)


@contextmanager
def world(tmp: Path) -> Iterator[World]:
    """The world above, on a NATS server of its own, served by a read API (projections
    and folders under ``tmp``) until the block ends."""
    with nats_server.nats_server() as server, start_blocking_portal("asyncio") as portal:
        running, w = portal.start_task(_cluster, server.url)
        try:
            with (
                FolderFiles(tmp / "vfolders") as files,
                read_api(server.url, tmp / "p.duckdb", SIGNER, files) as api,
            ):
                w.api = api.url
                _upload(w)
                _caught_up(w)
                yield w
        finally:
            w.http.close()
            running.cancel()
