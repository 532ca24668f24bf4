"""The agent's GPU usage samples carry the GPU time the shim charged against a partial
slice's share (``charged_ns``), and none where the shim does not count it."""

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from events import AnyEvent, DevicePlacement, GpuUsageSampled, Slots
from services.actors.agent_usage import UsageMeter
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.domain.records import SessionView
from services.ports import DeviceUsageSample
from tests.support.cluster import agent_config
from tests.support.sampled_regions import SampledRegions

pytestmark = pytest.mark.anyio


class Appended:
    """An EventLog that only keeps what is appended to it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, AnyEvent]] = []

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        self.events += items
        return list(range(len(self.events) - len(items) + 1, len(self.events) + 1))


def _device(index: int, share_ppm: int, charged_ns: int) -> DeviceUsageSample:
    return DeviceUsageSample(
        index=index,
        mem_used=1 << 30,
        mem_peak=1 << 30,
        mem_limit=4 << 30,
        launches=10,
        throttled_ns=0,
        refusals=0,
        charged_ns=charged_ns,
        sm_share_ppm=share_ppm,
    )


async def test_a_sample_carries_the_charged_time_where_the_shim_counts_it() -> None:
    view = SessionView(
        session_id="s1",
        owner="alice",
        image="img:1",
        command=(),
        slots=Slots(fgpu=250),
        priority=0,
        name=None,
        request_id="r1",
        correlation_id="c1",
        arrival_seq=1,
        requested_at=datetime(2025, 3, 1, tzinfo=UTC),
        agent_id="a1",
        # The container numbers them by the host's index: gpu 3 is its device 0.
        devices=(DevicePlacement(gpu_index=5, fgpu=50), DevicePlacement(gpu_index=3, fgpu=200)),
    )
    state = ClusterState()
    state.sessions["s1"] = view
    regions = SampledRegions(
        {
            "s1": [
                _device(0, 1_000_000, 0),  # the whole of gpu 3: not paced, nothing charged
                _device(1, 250_000, 1_234_567_890),  # a quarter of gpu 5
            ]
        }
    )
    log = Appended()
    meter = UsageMeter(
        log,  # type: ignore[arg-type]  # only append_many is used
        DummyRuntime(),
        SystemClock(),
        agent_config("a1", gpus=6),
        regions,
        state=lambda: state,
        running=lambda: {"s1": "c1"},
    )
    await meter.publish_usage("s1")
    sampled = {e.gpu_index: e for _, e in log.events if isinstance(e, GpuUsageSampled)}
    assert {i: e.charged_ns for i, e in sampled.items()} == {3: None, 5: 1_234_567_890}
    assert all(s.endswith(".a1.s1") for s, _ in log.events)
