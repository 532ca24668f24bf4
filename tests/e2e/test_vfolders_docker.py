"""Virtual folders in real containers: two agents mount one folder, so a file one session
writes on one agent is read by another session on the other; a folder mounted read-only
(asked so, or shared so) refuses writes. Real Docker, in-process actors on a memory log;
the folders are directories under a root both agents share, as a shared filesystem is."""

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from events import CreateVfolder, ShareVfolder, Slots, VfolderMount
from services.actors.bootstrap import bootstrap
from services.adapters.docker_runtime import DockerRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from tests.support.cluster import agent_config, running_cluster
from tests.support.tenants import Tenants
from tests.support.vfolder_env import engine

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
AGENTS = ("vfa", "vfb")
IMAGE = "fgpu/busybox:latest"
WHOLE = Slots(cpu=100, mem=64 << 20, fgpu=100)  # one agent's whole GPU: one each


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    async with engine(*AGENTS) as rt:
        yield rt


async def _ended(who: Client, sid: str) -> ClusterState:
    def done(s: ClusterState) -> bool:
        v = s.sessions.get(sid)
        return v is not None and v.status.value in ("TERMINATED", "ERROR", "REJECTED")

    with anyio.fail_after(60):
        return await who.wait_until(done)


async def test_two_agents_share_a_folder_and_read_only_mounts_refuse_writes(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    log = MemoryLog()
    first = await bootstrap(log, SystemClock())
    assert first is not None
    configs = [
        dataclasses.replace(agent_config(a, gpus=1, fgpu_per_gpu=100), vfolder_root=str(tmp_path))
        for a in AGENTS
    ]
    async with running_cluster(log, [(c, runtime) for c in configs]):
        t = Tenants(log, Client(log, SystemClock(), first.access_key))
        await t.people()
        uma, vic = t.client("AKuma"), t.client("AKvic")
        await t.applied(uma, CreateVfolder(vfolder_id="vf-data", name="data", user="uma"))
        await t.applied(uma, ShareVfolder(vfolder_id="vf-data", target="user:vic", access="ro"))
        data = (VfolderMount(name="data"),)

        # A writer holds one agent's whole GPU while the reader runs on the other.
        [writer] = await uma.create(
            image=IMAGE,
            slots=WHOLE,
            mounts=data,
            command=["sh", "-c", "echo from-a > /home/work/data/hello.txt && sleep 3600"],
        )
        with anyio.fail_after(60):
            s = await uma.wait_until(
                lambda s: writer in s.sessions and s.sessions[writer].status.value == "RUNNING"
            )
        writer_agent = s.sessions[writer].agent_id
        check = 'test "$(cat /home/work/data/hello.txt)" = from-a'
        [reader] = await vic.create(
            image=IMAGE, slots=WHOLE, mounts=data, command=["sh", "-c", check]
        )
        s = await _ended(vic, reader)
        v = s.sessions[reader]
        assert (v.status.value, v.exit_code) == ("TERMINATED", 0), v.reason
        assert v.agent_id is not None and v.agent_id != writer_agent
        await uma.destroy(writer)
        await _ended(uma, writer)

        # Shared read-only with vic, and asked read-only by its owner: no write gets in.
        write = "echo x > /home/work/data/planted.txt"
        [shared_ro] = await vic.create(
            image=IMAGE, slots=WHOLE, mounts=data, command=["sh", "-c", write]
        )
        ro = (VfolderMount(name="data", read_only=True),)
        [asked_ro] = await uma.create(
            image=IMAGE, slots=WHOLE, mounts=ro, command=["sh", "-c", write]
        )
        for who, sid in ((vic, shared_ro), (uma, asked_ro)):
            v = (await _ended(who, sid)).sessions[sid]
            assert v.status.value == "TERMINATED" and v.exit_code not in (0, None), v.reason
    assert not (tmp_path / "local" / "vf-data" / "planted.txt").exists()
    assert (tmp_path / "local" / "vf-data" / "hello.txt").read_text() == "from-a\n"
