"""Pulling from a real registry: Debian's docker-registry on a loopback port with two tags
of one image (``scripts/registry-up``), a real Docker engine, a real log and read API.

An agent that lacks both tags runs a session of each: each goes PULLING, then RUNNING,
and runs its own tag's content; ``fgpu images ls`` then shows both tags, with distinct ids
and digests. Skipped without an engine or a registry (FGPU_REGISTRY), unless
FGPU_REQUIRE_DOCKER=1 (scripts/test, CI), where a missing registry fails.
"""

import json
import os
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path

import aiodocker
import anyio
import pytest
from aiodocker.exceptions import DockerError
from typer.testing import CliRunner

from events import Slots
from services.adapters import nats_server
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.cli.main import app
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.status import ENDED, SessionStatus
from services.ports import ImageNotFound
from tests.support.api_stack import read_api
from tests.support.cluster import GIB, agent_config, running_cluster
from tests.support.docker_env import require_docker, skip_or_fail

S = SessionStatus
TOOL = "fgpu/tool"  # the name scripts/registry-up pushes, under two tags
DEADLINE_S = 120.0  # a pull and a start on a loaded machine; a healthy one takes seconds


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # aiodocker is asyncio-only


@pytest.fixture
def registry() -> str:
    require_docker()
    found = os.environ.get("FGPU_REGISTRY")
    if not found:
        skip_or_fail('no FGPU_REGISTRY: run eval "$(scripts/registry-up)"')
    assert found is not None
    return found


@pytest.fixture
async def runtime(registry: str) -> AsyncIterator[DockerRuntime]:
    """The engine, holding neither tag under any registry's name: the agent must pull them.

    Deleting only this registry's tags is not enough: the same image kept under another
    name (a registry of an earlier run, on another port), or its layers kept by a
    container left from one, make the pull find everything there and download nothing."""
    docker = aiodocker.Docker()
    try:
        tools = {
            image["Id"]
            for image in await docker.images.list()
            if any(f"/{TOOL}:" in tag for tag in image.get("RepoTags") or ())
        }
        for c in await docker.containers.list(all=True):
            if c["ImageID"] in tools or f"/{TOOL}:" in c["Image"]:
                await _gone(c.delete(force=True))
        for image_id in tools:
            await _gone(docker.images.delete(image_id, force=True))
    finally:
        await docker.close()
    async with DockerRuntime() as rt:
        yield rt


async def _gone(deleting: Awaitable[object]) -> None:
    """Delete; already gone is as good."""
    try:
        await deleting
    except DockerError as e:
        if e.status != 404:
            raise


@pytest.mark.anyio
async def test_a_tag_the_registry_lacks_is_not_found_and_one_it_has_is_told_as_it_comes(
    registry: str, runtime: DockerRuntime
) -> None:
    told: list[tuple[int, int]] = []

    async def progress(current: int, total: int) -> None:
        told.append((current, total))

    with anyio.fail_after(DEADLINE_S):
        with pytest.raises(ImageNotFound):
            await runtime.pull(f"{registry}/fgpu/tool:3", progress)
        await runtime.pull(f"{registry}/fgpu/tool:1", progress)
        held = {i.ref: i for i in await runtime.image_details()}
    pulled = held[f"{registry}/fgpu/tool:1"]
    assert pulled.digest is not None and pulled.digest.startswith("sha256:")
    assert told and told[-1][0] == told[-1][1] > 0  # the last says all of it came
    assert [c for c, _ in told] == sorted(c for c, _ in told)  # never backwards


def _running(s: ClusterState, ids: list[str]) -> bool:
    return all(i in s.sessions and s.sessions[i].status is S.RUNNING for i in ids)


def _ended(s: ClusterState, ids: list[str]) -> bool:
    return all(i in s.sessions and s.sessions[i].status in ENDED for i in ids)


@pytest.mark.anyio
async def test_two_tags_are_pulled_side_by_side_and_each_runs_its_own_content(
    registry: str, runtime: DockerRuntime, tmp_path: Path
) -> None:
    refs = [f"{registry}/fgpu/tool:{tag}" for tag in ("1", "2")]
    config = replace(agent_config("a1"), registry=registry)
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        try:
            await events.create_or_update_stream()
            client = Client(events, SystemClock(), "alice")
            async with running_cluster(events, [(config, runtime)]):
                ids = [
                    (await client.create(image=ref, slots=_SLOTS, command=("sleep", "3600")))[0]
                    for ref in refs
                ]
                with anyio.fail_after(DEADLINE_S):
                    s = await client.wait_until(lambda s: _running(s, ids))
                    s = await client.wait_until(lambda s: set(refs) <= s.agents["a1"].images, s)
                shown = [
                    await runtime.exec(s.sessions[i].container_id or "", ["cat", "/version"])
                    for i in ids
                ]
                with read_api(server.url, tmp_path / "p.duckdb") as api:
                    listed = CliRunner().invoke(app, ["--api", api.url, "images", "ls", "--json"])
                for i in ids:
                    await client.destroy(i)
                with anyio.fail_after(DEADLINE_S):
                    s = await client.wait_until(lambda s: _ended(s, ids), s)
        finally:
            await events.close()
    assert [r.stdout for r in shown] == [b"1\n", b"2\n"]
    for i in ids:
        walked = [t.status for t in s.sessions[i].history]
        assert walked[walked.index(S.PREPARING) :][:3] == [S.PREPARING, S.PULLING, S.RUNNING]
    assert listed.exit_code == 0, listed.output
    images = {i["name"]: i for i in json.loads(listed.stdout)}
    tags = {t["tag"]: t for t in images[f"{registry}/fgpu/tool"]["tags"]}
    assert set(tags) == {"1", "2"}
    for t in tags.values():
        assert t["agents"] == ["a1"] and len(t["ids"]) == 1 and len(t["digests"]) == 1
    assert tags["1"]["ids"] != tags["2"]["ids"]
    assert tags["1"]["digests"] != tags["2"]["digests"]
    assert tags["2"]["size"] > tags["1"]["size"]  # tag 2 carries the larger payload


_SLOTS = Slots(cpu=500, mem=GIB, fgpu=50)
