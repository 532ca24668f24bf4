"""DummyRuntime passes the runtime contract, in memory and with a state file; and its own
promises: simulated time, start delay, outages, re-adoption after a restart, scale."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus

from services.adapters.dummy_runtime import DummyRuntime
from services.domain.container_spec import ContainerSpec
from services.ports import ContainerInfo, RuntimeUnavailable
from tests.support.runtime_contract import TEST_IMAGE, ContainerRuntimeContract


class TestDummyRuntime(ContainerRuntimeContract):
    @pytest.fixture
    async def runtime(self) -> AsyncIterator[DummyRuntime]:
        yield DummyRuntime()


class TestDummyRuntimeWithStateFile(ContainerRuntimeContract):
    @pytest.fixture
    async def runtime(self, tmp_path: Path) -> AsyncIterator[DummyRuntime]:
        yield DummyRuntime(state_file=tmp_path / "containers.json")


class _FakeClock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _spec(name: str, *command: str, **labels: str) -> ContainerSpec:
    return ContainerSpec(name=name, image=TEST_IMAGE, command=command, labels=labels)


@pytest.mark.anyio
async def test_a_script_runs_on_simulated_time() -> None:
    clock = _FakeClock()
    rt = DummyRuntime(clock=clock)
    info = await rt.run(_spec("a", "sh", "-c", "echo one; sleep 10; echo two; exit 4"))
    assert await rt.logs(info.id) == "one\n"
    [listed] = await rt.list({})
    assert listed.running
    clock.now += 10
    assert await rt.logs(info.id) == "one\ntwo\n"
    [listed] = await rt.list({})
    assert (listed.running, listed.exit_code) == (False, 4)
    assert await rt.wait(info.id) == 4


@pytest.mark.anyio
async def test_other_commands_run_for_the_configured_duration() -> None:
    clock = _FakeClock()
    rt = DummyRuntime(clock=clock, run_duration_s=30, exit_code=7)
    info = await rt.run(_spec("a", "python3", "train.py"))
    assert info.running
    clock.now += 30
    assert await rt.wait(info.id) == 7
    assert await rt.logs(info.id) == ""


@pytest.mark.anyio
async def test_wait_wakes_when_the_run_ends() -> None:
    rt = DummyRuntime()
    info = await rt.run(_spec("a", "sh", "-c", "sleep 0.05; exit 2"))
    with anyio.fail_after(5):
        assert await rt.wait(info.id) == 2


@pytest.mark.anyio
async def test_wait_wakes_when_the_container_is_removed() -> None:
    rt = DummyRuntime()
    info = await rt.run(_spec("a", "sleep", "infinity"))
    codes: list[int] = []

    async def waiter(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        codes.append(await rt.wait(info.id))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(waiter)
            await rt.remove(info.id)
    assert codes == [143]


@pytest.mark.anyio
async def test_start_delay_holds_run_but_reserves_the_name() -> None:
    rt = DummyRuntime(start_delay_s=0.05)
    spec = _spec("a")
    results: list[ContainerInfo] = []

    async def run() -> None:
        results.append(await rt.run(spec))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tg.start_soon(run)
    assert len({r.id for r in results}) == 1
    [listed] = await rt.list({})
    assert listed.running


@pytest.mark.anyio
async def test_an_unavailable_engine_refuses_every_call() -> None:
    rt = DummyRuntime()
    info = await rt.run(_spec("a"))
    rt.available = False
    with pytest.raises(RuntimeUnavailable):
        await rt.list({})
    with pytest.raises(RuntimeUnavailable):
        await rt.remove(info.id)
    rt.available = True
    assert [i.id for i in await rt.list({})] == [info.id]


@pytest.mark.anyio
async def test_a_restarted_runtime_adopts_its_containers(tmp_path: Path) -> None:
    clock = _FakeClock()
    state = tmp_path / "containers.json"
    before = DummyRuntime(state_file=state, clock=clock)
    running = await before.run(_spec("running", "sleep", "100", role="worker"))
    done = await before.run(_spec("done", "sh", "-c", "echo bye; exit 5", role="worker"))
    gone = await before.run(_spec("gone", role="worker"))
    await before.remove(gone.id)

    clock.now += 50
    after = DummyRuntime(state_file=state, clock=clock)
    listed = {i.name: i for i in await after.list({"role": "worker"})}
    assert set(listed) == {"running", "done"}
    assert listed["running"].id == running.id and listed["running"].running
    assert (listed["done"].running, listed["done"].exit_code) == (False, 5)
    assert await after.logs(done.id) == "bye\n"
    assert (await after.run(_spec("running", "sleep", "100"))).id == running.id
    clock.now += 50
    assert await after.wait(running.id) == 0


@pytest.mark.anyio
async def test_thousands_of_containers() -> None:
    rt = DummyRuntime()
    for n in range(3000):
        await rt.run(_spec(f"c{n}", shard=str(n % 3)))
    assert len(await rt.list({"shard": "1"})) == 1000
    assert len(await rt.list({})) == 3000
