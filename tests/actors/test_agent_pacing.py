"""The agent's pacing (``SharePacer``): the sessions sharing a GPU get one scale from
what their regions counted there and how busy the driver says it was; a session alone
on its GPU, a whole GPU and an MPS client's device are left unscaled."""

from datetime import UTC, datetime

import anyio
import pytest

from events import DevicePlacement, Slots
from services.actors.agent_pacing import SharePacer
from services.domain.fold.cluster import ClusterState
from services.domain.records import SessionView
from services.ports import DeviceUsageSample
from services.testing import FakeGpuWatch
from tests.support.cluster import agent_config
from tests.support.sampled_regions import SampledRegions

MS = 1_000_000


class Regions(SampledRegions):
    def count(self, key: str, *devices: tuple[int, int, float, float]) -> None:
        """Each (index, share ppm, charged ms, slept ms) of the session's devices."""
        self.devices[key] = [
            DeviceUsageSample(
                index=i,
                mem_used=0,
                mem_peak=0,
                mem_limit=0,
                launches=1,
                throttled_ns=int(slept * MS),
                refusals=0,
                charged_ns=int(charged * MS),
                sm_share_ppm=share,
            )
            for i, share, charged, slept in devices
        ]


def view(session_id: str, *devices: tuple[int, int]) -> SessionView:
    return SessionView(
        session_id=session_id, owner="alice", image="img:1", command=(), slots=Slots(fgpu=100),
        priority=0, name=None, request_id=f"r-{session_id}", correlation_id="c",
        arrival_seq=1, requested_at=datetime(2025, 3, 1, tzinfo=UTC), agent_id="a1",
        devices=tuple(DevicePlacement(gpu_index=g, fgpu=f) for g, f in devices),
    )  # fmt: skip


@pytest.fixture
def world() -> tuple[SharePacer, Regions, FakeGpuWatch]:
    state = ClusterState()
    # a and b share gpu 2 (0.25 + 0.75); c has half of gpu 4 alone and the whole of gpu 1
    # (its container's device 0, since the container numbers them by the host's index).
    for v in (view("a", (2, 50)), view("b", (2, 150)), view("c", (4, 100), (1, 200))):
        state.sessions[v.session_id] = v
    regions, driver = Regions(), FakeGpuWatch()
    pacer = SharePacer(
        agent_config("a1", gpus=6), regions, driver,
        state=lambda: state, running=lambda: {"a": "ca", "b": "cb", "c": "cc"},
    )  # fmt: skip
    return pacer, regions, driver


def test_the_sessions_sharing_a_busy_gpu_get_their_shares_of_what_it_delivers(
    world: tuple[SharePacer, Regions, FakeGpuWatch],
) -> None:
    pacer, regions, _ = world
    regions.count("a", (0, 250_000, 0, 0))
    regions.count("b", (0, 750_000, 0, 0))
    regions.count("c", (0, 1_000_000, 0, 0), (1, 500_000, 0, 0))
    pacer.tick(10.0, {2: 1.0, 4: 1.0})
    # One second on: a took its quarter and was held back 700 ms; b got only 637 ms.
    regions.count("a", (0, 250_000, 250, 700))
    regions.count("b", (0, 750_000, 637, 0))
    regions.count("c", (0, 1_000_000, 900, 0), (1, 500_000, 500, 500))
    pacer.tick(11.0, {2: 1.0, 4: 1.0})
    assert regions.paced == {("a", 0): 0.887, ("b", 0): 0.887, ("c", 1): 1.0}
    assert set(pacer.pacing) == {2, 4}


def test_an_idle_gpu_or_a_session_gone_relaxes_the_scale(
    world: tuple[SharePacer, Regions, FakeGpuWatch],
) -> None:
    pacer, regions, _ = world
    regions.count("a", (0, 250_000, 0, 0))
    regions.count("b", (0, 750_000, 0, 0))
    pacer.tick(10.0, {2: 1.0})
    regions.count("a", (0, 250_000, 250, 700))
    regions.count("b", (0, 750_000, 637, 0))
    pacer.tick(11.0, {2: 0.5})  # the GPU had idle time: b is not short of it
    assert regions.paced[("a", 0)] == 1.0
    regions.count("a", (0, 250_000, 500, 1400))
    regions.count("b", (0, 750_000, 1274, 0))
    pacer.tick(12.0, {2: 1.0})
    assert regions.paced[("b", 0)] == 0.887
    del regions.devices["b"]  # b ended
    regions.count("a", (0, 250_000, 750, 2100))
    pacer.tick(13.0, {2: 1.0})
    assert regions.paced[("a", 0)] == 0.987


@pytest.mark.anyio
async def test_the_driver_is_asked_only_while_a_gpu_is_shared(
    world: tuple[SharePacer, Regions, FakeGpuWatch],
) -> None:
    pacer, regions, driver = world
    driver.unavailable = "no driver"  # asked, it would fail and the tick be skipped
    regions.count("c", (0, 1_000_000, 0, 0), (1, 500_000, 0, 0))  # c alone on gpu 4
    with anyio.move_on_after(10):
        while ("c", 1) not in regions.paced:
            with anyio.move_on_after(3 * pacer.config.pace_interval_s):
                await pacer.run()
    assert regions.paced == {("c", 1): 1.0}
    regions.count("a", (0, 250_000, 0, 0))  # now a shares gpu 2 with b
    regions.count("b", (0, 750_000, 0, 0))
    regions.paced.clear()
    with anyio.move_on_after(3 * pacer.config.pace_interval_s):
        await pacer.run()
    assert regions.paced == {}  # the driver failed: nothing was decided
