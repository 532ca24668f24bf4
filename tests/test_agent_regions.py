"""The agent removes a session's shim region once, before its end is on the log, whichever
way the session ends; a region outlives only an agent's shutdown, for the next agent.

Real actors over the in-memory log and the dummy runtime; the regions are a fake that
notes each removal in the same trace as the log notes each append, so the order shows.
"""

from collections.abc import Callable, Sequence

import anyio
import pytest

from events import AnyEvent, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.container_spec import ContainerSpec
from services.domain.state import ClusterState
from services.ports import (
    ContainerError,
    ContainerInfo,
    DeviceUsageSample,
    ImageNotFound,
    OomRefusal,
)
from tests.cluster import GIB, agent_config, statuses

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

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        self.live.add(key)
        return f"/run/fgpu/regions/{key}.region"

    def sample(self, key: str) -> list[DeviceUsageSample]:
        return []

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
