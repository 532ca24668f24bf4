"""The agent removes a session's shim region once, before its end is on the log, whichever
way the session ends; a region outlives only an agent's shutdown, for the next agent.

Real actors over the in-memory log and the dummy runtime; the regions are a fake that
notes each removal in the same trace as the log notes each append, so the order shows.
"""

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

import services.actors.agent as agent_module
from events import AnyEvent, DevicePlacement, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import ContainerSpec
from services.domain.fold.cluster import ClusterState
from services.domain.gpu_slice import DeviceSlice, slices
from services.ports import (
    ContainerError,
    ContainerInfo,
    DeviceUsageSample,
    ImageNotFound,
    OomRefusal,
)
from tests.support.cluster import GIB, agent_config, statuses

pytestmark = pytest.mark.anyio

AGENT = "regions"
IMAGE = "fgpu/busybox:latest"
SLOTS = Slots(cpu=100, mem=GIB, fgpu=50)

Trace = list[tuple[str, str]]  # (what happened, session id)


class TracedLog(MemoryLog):
    """A MemoryLog that notes each single append (an agent's reports) in ``trace``."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace

    async def append(
        self, subject: str, event: AnyEvent, *, expected_last_subject_seq: int | None = None
    ) -> int:
        seq = await super().append(
            subject, event, expected_last_subject_seq=expected_last_subject_seq
        )
        self.trace.append((type(event).__name__, getattr(event, "session_id", "")))
        return seq


class FakeRegions:
    """SliceRegions that keeps nothing but which regions exist, noting removals in ``trace``."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.live: set[str] = set()
        self.group = 4242
        self.slices: dict[str, tuple[list[int], list[int]]] = {}  # key -> limits, shares

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        self.live.add(key)
        self.slices[key] = (list(mem_limits), list(sm_shares_ppm))
        return f"/run/fgpu/regions/{key}.region"

    def sample(self, key: str) -> list[DeviceUsageSample]:
        return []

    def set_pace(self, key: str, index: int, scale: float) -> None:
        pass

    def drain_ooms(self, key: str) -> list[OomRefusal]:
        return []

    def reclaim(self, key: str) -> int:
        return 0

    def remove(self, key: str) -> None:
        self.live.discard(key)
        self.trace.append(("removed", key))


class FailingRuntime(DummyRuntime):
    """Lists its images, but every run fails with ``error``."""

    def __init__(self, error: ContainerError) -> None:
        super().__init__()
        self.error = error

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        raise self.error


class SpecRuntime(DummyRuntime):
    """A DummyRuntime that keeps the spec of each container it runs, by its name."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, ContainerSpec] = {}

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        self.specs[spec.name] = spec
        return await super().run(spec)


def of(trace: Trace, sid: str) -> list[str]:
    return [what for what, session_id in trace if session_id == sid]


def ended(sid: str) -> Callable[[ClusterState], bool]:
    return lambda s: statuses(s, [sid])[0] in ("TERMINATED", "ERROR")


@pytest.mark.parametrize(
    ("runtime", "command", "destroy", "end", "reason"),
    [
        (DummyRuntime, ["sh", "-c", "exit 3"], False, "SessionTerminated", "exited"),
        (DummyRuntime, ["sleep", "infinity"], True, "SessionTerminated", "stopped on request"),
        (
            lambda: FailingRuntime(ImageNotFound("gone")),
            [],
            False,
            "SessionErrored",
            "not found on the agent",
        ),
        (
            lambda: FailingRuntime(ContainerError("disk full")),
            [],
            False,
            "SessionErrored",
            "container engine: disk full",
        ),
    ],
    ids=["exited", "destroyed", "image-not-found", "engine-error"],
)
async def test_region_goes_once_just_before_the_end_is_reported(
    runtime: Callable[[], DummyRuntime], command: list[str], destroy: bool, end: str, reason: str
) -> None:
    trace: Trace = []
    log = TracedLog(trace)
    regions = FakeRegions(trace)
    clock = SystemClock()
    client = Client(log, clock, "alice")
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, runtime(), clock, agent_config(AGENT), regions).run)
        (sid,) = await client.create(image=IMAGE, slots=SLOTS, command=command)
        if destroy:
            with anyio.fail_after(10):
                await client.wait_until(lambda s: statuses(s, [sid]) == ["RUNNING"])
            await client.destroy(sid)
        with anyio.fail_after(10):
            s = await client.wait_until(ended(sid))
        tg.cancel_scope.cancel()
    assert reason in (s.sessions[sid].reason or "")
    assert of(trace, sid)[-2:] == ["removed", end]
    assert of(trace, sid).count("removed") == 1
    assert regions.live == set()


async def test_region_outlives_a_shutdown_and_goes_when_the_next_agent_ends_the_session() -> None:
    trace: Trace = []
    log = TracedLog(trace)
    regions = FakeRegions(trace)
    runtime = DummyRuntime()
    clock = SystemClock()
    client = Client(log, clock, "alice")
    config = agent_config(AGENT)
    sleep = ["sleep", "infinity"]
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        with anyio.CancelScope() as first_agent:
            async with anyio.create_task_group() as agent_tg:
                await agent_tg.start(AgentActor(log, runtime, clock, config, regions).run)
                vanishing, stopped = await client.create(
                    image=IMAGE, slots=SLOTS, command=sleep, count=2
                )
                with anyio.fail_after(10):
                    s = await client.wait_until(
                        lambda s: statuses(s, [vanishing, stopped]) == ["RUNNING"] * 2
                    )
                first_agent.cancel()
        assert regions.live == {vanishing, stopped}  # the sessions run on
        assert not [what for what, _ in trace if what == "removed"]

        # While no agent runs: a container disappears, a running session and one placed
        # meanwhile (it never started) are destroyed.
        await runtime.remove(s.sessions[vanishing].container_id or "")
        (unstarted,) = await client.create(image=IMAGE, slots=SLOTS, command=sleep)
        with anyio.fail_after(10):
            await client.wait_until(lambda s: statuses(s, [unstarted]) == ["SCHEDULED"])
        await client.destroy(stopped)
        await client.destroy(unstarted)
        with anyio.fail_after(10):
            await client.wait_until(
                lambda s: statuses(s, [stopped, unstarted]) == ["TERMINATING"] * 2
            )

        await tg.start(AgentActor(log, runtime, clock, config, regions).run)
        ids = [vanishing, stopped, unstarted]
        with anyio.fail_after(10):
            s = await client.wait_until(lambda s: all(ended(i)(s) for i in ids))
        tg.cancel_scope.cancel()
    assert "vanished" in (s.sessions[vanishing].reason or "")
    assert "stopped before it started" in (s.sessions[unstarted].reason or "")
    # Its container is removed before it is waited for: no exit code, but no error either.
    assert s.sessions[stopped].status == "TERMINATED"
    assert (s.sessions[stopped].reason or "").endswith("; stopped on request")
    assert s.sessions[stopped].exit_code is None
    for sid in ids:
        assert of(trace, sid)[-2:] == ["removed", "SessionTerminated"]
        assert of(trace, sid).count("removed") == 1
    assert regions.live == set()


async def test_the_region_and_the_environment_hold_one_slice_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2.5 fGPU at 2 fGPU per GPU: two devices whole and half of a third, in integers (bytes
    and parts per million) in the region the shim enforces and in the container's
    environment alike, from one computation of the slice."""
    computed: list[str] = []

    def counted(devices: tuple[DevicePlacement, ...], *args: Any) -> list[DeviceSlice]:
        computed.append("slices")
        return slices(devices, *args)

    monkeypatch.setattr(agent_module, "slices", counted)
    trace: Trace = []
    log = TracedLog(trace)
    regions = FakeRegions(trace)
    runtime = SpecRuntime()
    clock = SystemClock()
    client = Client(log, clock, "alice")
    config = agent_config(AGENT, gpus=3)
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, runtime, clock, config, regions).run)
        slots = Slots(cpu=100, mem=GIB, fgpu=500)
        (sid,) = await client.create(image=IMAGE, slots=slots, command=["sleep", "infinity"])
        with anyio.fail_after(10):
            s = await client.wait_until(lambda s: statuses(s, [sid]) == ["RUNNING"])
        tg.cancel_scope.cancel()
    assert computed == ["slices"]
    (spec,) = runtime.specs.values()
    limits, shares = regions.slices[sid]
    assert spec.env["FGPU_MEM_LIMIT"] == ",".join(map(str, limits))
    assert spec.env["FGPU_SM_SHARE_PPM"] == ",".join(map(str, shares))
    assert "FGPU_AMOUNT" not in spec.env
    assert sorted(shares) == [500_000, 1_000_000, 1_000_000]
    gpus = {g.index: g for g in config.gpus}
    expected = slices(s.sessions[sid].devices, gpus, config.fgpu_per_gpu)
    assert (limits, shares) == (
        [p.mem_limit for p in expected],
        [p.sm_share_ppm for p in expected],
    )
