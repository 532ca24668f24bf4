"""DockerRuntime passes the runtime contract on a real engine, and applies what the spec asks.

Needs an engine with ``fgpu/busybox:latest``: ``eval "$(scripts/docker-up)"``. Without one
these tests skip, unless ``FGPU_REQUIRE_DOCKER=1`` (CI, after docker-up), where they fail:
a broken setup must not pass as "skipped".
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from services.adapters.docker_exits import Look
from services.adapters.docker_runtime import DockerRuntime, _ExitsOf, container_config
from services.domain.container_spec import ContainerSpec, Mount
from services.ports import ContainerError, RuntimeUnavailable
from tests.support.cli_stack import docker
from tests.support.docker_env import engine_problem, skip_or_fail
from tests.support.engine_proxy import engine_proxy
from tests.support.http_probe import get_when_up
from tests.support.runtime_contract import (
    DEADLINE_S,
    TEST_IMAGE,
    TEST_LABEL,
    ContainerRuntimeContract,
)


@pytest.fixture
async def docker_runtime() -> AsyncIterator[DockerRuntime]:
    problem = engine_problem()
    if problem is not None:
        skip_or_fail(problem)
    async with DockerRuntime() as rt:
        if TEST_IMAGE not in await rt.images():
            skip_or_fail(f'{TEST_IMAGE} is missing; run: eval "$(scripts/docker-up)"')
        yield rt


@pytest.mark.docker
class TestDockerRuntime(ContainerRuntimeContract):
    @pytest.fixture
    async def runtime(self, docker_runtime: DockerRuntime) -> AsyncIterator[DockerRuntime]:
        yield docker_runtime


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def rt(docker_runtime: DockerRuntime) -> AsyncIterator[DockerRuntime]:
    """The runtime; every container labelled ``fgpu.test=docker-extra`` is removed after."""
    yield docker_runtime
    with anyio.fail_after(DEADLINE_S):
        for info in await docker_runtime.list({TEST_LABEL: "docker-extra"}):
            await docker_runtime.remove(info.id, stop_timeout_s=0)


def _spec(name: str, script: str) -> ContainerSpec:
    return ContainerSpec(
        name=f"fgpu-test-extra-{name}",
        image=TEST_IMAGE,
        command=("sh", "-c", script),
        labels={TEST_LABEL: "docker-extra"},
    )


# Reads a cgroup file under v2 or v1, whichever the engine uses.
_MEMORY = (
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
)
_CPU = (
    "cat /sys/fs/cgroup/cpu.max 2>/dev/null"
    " || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)"
    " $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
)


@pytest.mark.docker
@pytest.mark.anyio
async def test_limits_network_and_mounts_are_applied(rt: DockerRuntime, tmp_path: Path) -> None:
    (tmp_path / "weights.txt").write_text("w\n")
    script = "; ".join(
        (
            _MEMORY,
            _CPU,
            "ls /sys/class/net",
            "cat /data/weights.txt",
            "touch /data/x 2>/dev/null || echo ro",
        )
    )
    spec = msgspec.structs.replace(
        _spec("limits", script),
        mem_bytes=64 * 2**20,
        cpu_millis=500,
        mounts=(Mount(source=str(tmp_path), target="/data"),),
    )
    info = await rt.run(spec)
    with anyio.fail_after(DEADLINE_S):
        assert await rt.wait(info.id) == 0
    memory, cpu, net, weights, ro = (await rt.logs(info.id)).splitlines()
    assert int(memory) == 64 * 2**20
    quota, period = map(int, cpu.split())
    assert quota * 1000 // period == 500  # half a CPU
    assert net == "lo"  # network mode none: loopback only
    assert weights == "w"
    assert ro == "ro"
    assert not (tmp_path / "x").exists()


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_failed_start_raises_and_leaves_no_container(rt: DockerRuntime) -> None:
    # No NVIDIA runtime on the test engines: the device request cannot be met at start.
    # (On a GPU host this UUID matches no device, which fails the start too.)
    gpu = "GPU-00000000-0000-0000-0000-000000000000"
    spec = msgspec.structs.replace(_spec("gpu", "true"), gpu_uuids=(gpu,))
    with pytest.raises(ContainerError) as caught:
        await rt.run(spec)
    assert not isinstance(caught.value, RuntimeUnavailable)
    assert await rt.list({TEST_LABEL: "docker-extra"}) == []


@pytest.mark.docker
@pytest.mark.anyio
async def test_run_starts_a_container_left_created(rt: DockerRuntime) -> None:
    # As after a crash between create and start.
    spec = _spec("created", "exit 3")
    await rt._client().containers.create(container_config(spec), name=spec.name)
    [created] = await rt.list({TEST_LABEL: "docker-extra"})
    assert (created.running, created.exit_code) == (False, None)
    info = await rt.run(spec)
    assert info.id == created.id
    with anyio.fail_after(DEADLINE_S):
        assert await rt.wait(info.id) == 3


@pytest.mark.anyio
async def test_no_engine_is_runtime_unavailable(tmp_path: Path) -> None:
    async with DockerRuntime(f"unix://{tmp_path}/no-engine.sock") as rt:
        with pytest.raises(RuntimeUnavailable):
            await rt.images()
        with pytest.raises(RuntimeUnavailable):
            await rt.run(ContainerSpec(name="x", image=TEST_IMAGE))
        with pytest.raises(RuntimeUnavailable):
            await rt.remove("x")


@pytest.mark.anyio
async def test_a_busy_container_s_cpu_time_grows_and_a_sleeping_one_s_does_not(
    rt: DockerRuntime,
) -> None:
    busy = await rt.run(_spec("busy", "while :; do :; done"))
    idle = await rt.run(_spec("idle", "sleep 600"))
    first = [await rt.cpu_ns(c.id) or 0 for c in (busy, idle)]
    with anyio.fail_after(DEADLINE_S):
        used = 0
        while used < 50_000_000:  # until the busy one used 50 ms more
            await anyio.sleep(0.1)
            used = (await rt.cpu_ns(busy.id) or 0) - first[0]
    grown = (await rt.cpu_ns(idle.id) or 0) - first[1]
    assert grown < 50_000_000


@pytest.mark.docker
@pytest.mark.anyio
async def test_open_exec_reads_what_it_is_given_and_ends_with_its_exit_code(
    rt: DockerRuntime,
) -> None:
    info = await rt.run(_spec("open-exec", "sleep 600"))
    script = "read x; echo got-$x; echo complaint >&2; exit 4"
    with anyio.fail_after(DEADLINE_S):
        async with rt.open_exec(info.id, ("sh", "-c", script)) as program:
            await program.write(b"hi\n")
            shown = b""
            while (data := await program.read()) is not None:
                shown += data
            # Without a terminal, stdout alone: stderr never mixes into what it carries.
            assert (shown, await program.exit_code()) == (b"got-hi\n", 4)


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_follow_in_progress_holds_no_connection_of_the_pool() -> None:
    """With a pool of one connection, a follow that lasts (its container quiet) leaves
    that one free: another container is created, started, inspected and removed."""
    problem = engine_problem()
    if problem is not None:
        skip_or_fail(problem)
    async with DockerRuntime(pool_size=1, request_timeout_s=DEADLINE_S / 2) as rt:
        try:
            quiet = await rt.run(_spec("follow-quiet", "echo up; sleep 600"))
            with anyio.fail_after(DEADLINE_S):
                async with rt.follow_logs(quiet.id) as output:
                    assert await output.read() == b"up\n"
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(output.read)  # waits on the quiet container
                        other = await rt.run(_spec("follow-other", "exit 0"))
                        assert await rt.wait(other.id) == 0
                        await rt.remove(other.id, stop_timeout_s=0)
                        tg.cancel_scope.cancel()
        finally:
            with anyio.fail_after(DEADLINE_S):
                for info in await rt.list({TEST_LABEL: "docker-extra"}):
                    await rt.remove(info.id, stop_timeout_s=0)


@pytest.mark.docker
@pytest.mark.anyio
async def test_open_exec_in_a_container_not_running_raises(rt: DockerRuntime) -> None:
    info = await rt.run(_spec("open-exec-ended", "exit 0"))
    with anyio.fail_after(DEADLINE_S):
        assert await rt.wait(info.id) == 0
        with pytest.raises(ContainerError):
            async with rt.open_exec(info.id, ("true",)):
                pass


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_exit_watch_reads_the_engine_s_clock_containers_and_looks(
    rt: DockerRuntime,
) -> None:
    running = await rt.run(_spec("watch-running", "sleep 600"))
    ended = await rt.run(_spec("watch-ended", "exit 3"))
    engine = _ExitsOf(rt)
    with anyio.fail_after(DEADLINE_S):
        assert await rt.wait(ended.id) == 3
        now = await engine.clock()
        assert await engine.look(ended.name) == Look(ended.id, False, 3)
        assert await engine.look("fgpu-test-extra-no-such") is None
        # The listing catches up with the exit the wait was told of (the engine tells
        # the exit before its listing has it, under load): an ended container is listed
        # as not running once the engine has it so, and the running one all along.
        while (listed := await engine.running())[ended.id]:
            assert listed[running.id]
            await anyio.sleep(0.05)
    # The engine runs on this host: its clock is this one (to the second it rounds to).
    assert now is not None and abs(now - time.time()) < 60
    assert (listed[running.id], listed[ended.id]) == (True, False)


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_wait_outlives_its_stream_of_events_broken_under_it(rt: DockerRuntime) -> None:
    # The runtime's connections closed under the stream (aiohttp then tells its reader
    # nothing); the container ends at about that time. The wait tells its exit code.
    info = await rt.run(_spec("outlives", "sleep 600"))

    async def meanwhile() -> None:
        await anyio.wait_all_tasks_blocked()
        await rt.close()
        await anyio.to_thread.run_sync(docker, "kill", info.id)

    assert await _wait_while(rt, info.id, meanwhile) == 137


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_wait_outlives_an_engine_restart_as_its_client_sees_it(
    rt: DockerRuntime, tmp_path: Path
) -> None:
    # Every connection to the engine closed from its side and new ones refused for a
    # while, as a restart does (through a proxy: the engine is every test's); the
    # container ends meanwhile. Its wait tells the exit code, from a new stream.
    async with engine_proxy(tmp_path / "e.sock") as proxy, DockerRuntime(proxy.url) as cut:
        info = await cut.run(_spec("restart", "sleep 600"))

        async def meanwhile() -> None:
            await proxy.wait_request(b"/events")
            await proxy.cut()
            await anyio.to_thread.run_sync(docker, "kill", info.id)
            await proxy.resume()

        assert await _wait_while(cut, info.id, meanwhile) == 137
    assert proxy.requests(b"/events") >= 2


async def _wait_while(
    rt: DockerRuntime, container_id: str, meanwhile: Callable[[], Awaitable[None]]
) -> int:
    """``rt.wait(container_id)``, with ``meanwhile`` run beside it."""
    codes: list[int] = []

    async def waiting() -> None:
        codes.append(await rt.wait(container_id))

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await meanwhile()
    return codes[0]


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_container_on_a_serving_network_is_reached_from_the_host_at_its_address(
    rt: DockerRuntime,
) -> None:
    """An inference replica's network: an internal bridge the runtime makes once (a second
    container joins it), its address reported, its port reached from the engine's host."""
    network = f"fgpu-serve-test{int(time.time() * 1000) % 10**9}"
    serve = "mkdir -p /w && echo ok > /w/health && exec httpd -f -p 8000 -h /w"
    try:
        infos = [
            await rt.run(msgspec.structs.replace(_spec(f"net{n}", serve), network=network))
            for n in range(2)
        ]
        hosts = [i.host for i in infos]
        assert all(hosts) and len(set(hosts)) == 2, hosts
        again = await rt.run(msgspec.structs.replace(_spec("net0", serve), network=network))
        assert again.host == hosts[0]  # found as it is: the same address
        with anyio.fail_after(DEADLINE_S):
            assert await get_when_up(f"{hosts[0]}", 8000, "/health") == b"ok\n"
    finally:
        for info in await rt.list({TEST_LABEL: "docker-extra"}):
            await rt.remove(info.id, stop_timeout_s=0)
        docker("network", "rm", network)
