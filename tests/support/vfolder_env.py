"""The storage service for tests: its routes on a tenancy given outright (alice owns folder
``data``, shared read-only with bob; bob owns ``bobs``; mallory and eve are strangers),
reached through httpx in the process or through uvicorn on a loopback port, with real
keypair sign-ins and the real folder helper."""

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import duckdb
import httpx
import uvicorn
from fastapi import FastAPI

from events import (
    AddMember,
    AdminCommand,
    CreateDomain,
    CreateKeypair,
    CreateProject,
    CreateUser,
    CreateVfolder,
    ShareVfolder,
    VfolderScanned,
)
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.memory_log import MemoryLog
from services.api.app import create_app
from services.api.auth import TokenSigner
from services.api.vfolder_routes import Storage
from services.domain.access.keys import hash_secret
from services.domain.tenancy.admin import apply
from services.domain.tenancy.model import Tenancy
from tests.support.cli_stack import remove_agent_containers
from tests.support.docker_env import require_docker

__all__ = ["FOLDER", "SECRET", "Api", "Source", "app_of", "engine", "served", "tenancy"]

SECRET = "s3cret-for-tests"
HASH = hash_secret(SECRET)
FOLDER = "/v1/vfolders/vf-alice"


class Source:
    """What the API reads through; only the tenancy matters to these routes."""

    def __init__(self, t: Tenancy) -> None:
        self.t = t

    @property
    def last_seq(self) -> int:
        return 0

    def cursor(self) -> duckdb.DuckDBPyConnection:
        raise AssertionError("the storage routes read no projection")

    async def wait_beyond(self, seq: int) -> int:
        await anyio.sleep_forever()
        return seq

    def tenancy(self) -> Tenancy:
        return self.t


def tenancy(*more: AdminCommand) -> Tenancy:
    """alice, bob and mallory in lab (alice's folder ``data``, 100 bytes, shared with bob
    read-only; bob's folder ``bobs``); eve in another domain."""
    t = Tenancy()
    commands: list[AdminCommand] = [
        CreateDomain(domain="lab"),
        CreateProject(domain="lab", project="a"),
        CreateDomain(domain="other"),
    ]
    for user, domain in (("alice", "lab"), ("bob", "lab"), ("mallory", "lab"), ("eve", "other")):
        commands += [
            CreateUser(user=user, domain=domain),
            CreateKeypair(access_key=f"AK{user}", user=user, secret_hash=HASH),
        ]
    commands += [
        AddMember(user="alice", project="a"),
        CreateVfolder(vfolder_id="vf-alice", name="data", user="alice", quota_bytes=100),
        ShareVfolder(vfolder_id="vf-alice", target="user:bob", access="ro"),
        CreateVfolder(vfolder_id="vf-bob", name="bobs", user="bob"),
        *more,
    ]
    for c in commands:
        apply(t, c)
    return t


def app_of(t: Tenancy, storage: Storage) -> FastAPI:
    return create_app(Source(t), signer=TokenSigner(b"k" * 32), storage=storage)


class Api:
    """Requests as a user (signed in once), on folder ``data`` unless a path says."""

    def __init__(self, client: httpx.AsyncClient, log: MemoryLog, storage: Storage) -> None:
        self.client = client
        self.log = log
        self.storage = storage
        self.tokens: dict[str, str] = {}

    async def as_(self, who: str) -> dict[str, str]:
        if who not in self.tokens:
            r = await self.client.post(
                "/v1/auth/token", json={"access_key": f"AK{who}", "secret_key": SECRET}
            )
            assert r.status_code == 200, r.text
            self.tokens[who] = r.json()["token"]
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def put(self, who: str, path: str, body: bytes, **params: Any) -> httpx.Response:
        url = f"{FOLDER}/files/{path}"
        return await self.client.put(url, content=body, params=params, headers=await self.as_(who))

    async def get(self, who: str, path: str, **kw: Any) -> httpx.Response:
        headers = {**await self.as_(who), **kw.pop("headers", {})}
        return await self.client.get(path, headers=headers, **kw)

    async def delete(self, who: str, path: str, **params: Any) -> httpx.Response:
        url = f"{FOLDER}/files/{path}"
        return await self.client.delete(url, params=params, headers=await self.as_(who))

    async def move(self, who: str, path: str, to: str, **params: Any) -> httpx.Response:
        params = {"path": path, "to": to, **params}
        return await self.client.post(f"{FOLDER}/move", params=params, headers=await self.as_(who))

    async def stat(self, who: str, path: str) -> dict[str, Any]:
        r = await self.get(who, f"{FOLDER}/stat", params={"path": path})
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    async def names(self, who: str, directory: str = "") -> set[str]:
        r = await self.get(who, f"{FOLDER}/files", params={"path": directory})
        assert r.status_code == 200, r.text
        return {e["name"] for e in r.json()}

    async def scans(self) -> list[VfolderScanned]:
        return [
            r.event
            async for batch in self.log.read(0)
            for r in batch
            if isinstance(r.event, VfolderScanned)
        ]


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the test's task group decides when it stops


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a free loopback port for the block; its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    config.load()
    server = _Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[sock])
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.main_loop)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            server.should_exit = True
    finally:
        await server.shutdown(sockets=[sock])
        sock.close()


@contextlib.asynccontextmanager
async def engine(*agents: str) -> AsyncIterator[DockerRuntime]:
    """The Docker engine (the test skipped without one, or failed under
    FGPU_REQUIRE_DOCKER=1); the containers labelled as ``agents``' removed afterwards."""
    require_docker()
    async with DockerRuntime() as rt:
        yield rt
    for agent in agents:
        remove_agent_containers(agent)
