"""The log's room: the watermark's rule, and the watcher beside a server on its fakes (a
disk and a server the test sets, the log in memory, a clock it moves): what it says on
the log and when, the quota actor refusing new sessions while the disk is low, and the
server started again, once, when room is back after it failed to write."""

from collections.abc import Callable
from datetime import timedelta

import anyio
import pytest

from events import LogHealth, SessionRejected, Slots, SpaceState
from services.actors.quota import QuotaActor
from services.actors.store_watch import StoreWatch
from services.adapters.memory_log import MemoryLog
from services.adapters.virtual_clock import VirtualClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.log_space import Watermark, refusal
from services.domain.status import SessionStatus as S
from services.ports import DiskUsage, ServerUnavailable

pytestmark = pytest.mark.anyio
MIB = 1 << 20
GIB = 1 << 30
SMALL = Slots(cpu=100, mem=GIB, fgpu=25)


@pytest.mark.parametrize(
    ("spec", "total", "mark"),
    [
        ("5%,1g", 100 * GIB, GIB),  # the smaller: 1 GiB
        ("5%,1g", 10 * GIB, GIB // 2),  # the smaller: 5%
        ("10%", 64 * MIB, 64 * MIB // 10),
        ("2g", 100 * GIB, 2 * GIB),
        ("0.5%, 8g", 1 << 40, (1 << 40) // 200),
    ],
)
def test_the_watermark_is_the_smaller_of_a_share_and_an_amount(
    spec: str, total: int, mark: int
) -> None:
    assert Watermark.parse(spec).of(total) == mark


@pytest.mark.parametrize("spec", ["", "5%%", "five%", "101%", "-1%", "5%,lots", "nan%"])
def test_a_watermark_that_is_none_is_said_so(spec: str) -> None:
    with pytest.raises(ValueError, match="--low-space"):
        Watermark.parse(spec)


class Disk:
    """StoreDisk whose room the test sets."""

    path = "/srv/store"

    def __init__(self) -> None:
        self.room = DiskUsage(free=40 * MIB, total=64 * MIB)

    def usage(self) -> DiskUsage:
        return self.room


class Server:
    """LogServer whose write error the test sets; a restart clears it (or fails)."""

    def __init__(self) -> None:
        self.error: str | None = None
        self.up = True
        self.restarts = 0
        self.refuse = False

    def write_error(self) -> str | None:
        return self.error

    def running(self) -> bool:
        return self.up

    async def restart(self) -> None:
        self.restarts += 1
        if self.refuse:
            raise ServerUnavailable("port 4222 is in use by another process")
        self.error, self.up = None, True


async def _said(log: MemoryLog) -> list[LogHealth]:
    return [r.event async for batch in log.read(0) for r in batch if isinstance(r.event, LogHealth)]


def _watch(log: MemoryLog, disk: Disk, server: Server, clock: VirtualClock) -> StoreWatch:
    watermark = Watermark.parse("10%")  # 6.4 MiB of 64
    return StoreWatch(log, disk, server, clock, server_name="n1", watermark=watermark)


async def test_it_says_the_room_at_its_start_and_each_change_only() -> None:
    log, disk, server, clock = MemoryLog(), Disk(), Server(), VirtualClock()
    watch = _watch(log, disk, server, clock)
    await watch.check()
    await watch.check()
    disk.room = DiskUsage(free=5 * MIB, total=64 * MIB)
    await watch.check()
    await watch.check()
    disk.room = DiskUsage(free=30 * MIB, total=64 * MIB)
    await watch.check()
    said = await _said(log)
    assert [h.state for h in said] == [SpaceState.OK, SpaceState.LOW, SpaceState.OK]
    low = said[1]
    assert (low.server, low.path, low.free_bytes, low.total_bytes) == (
        "n1",
        "/srv/store",
        5 * MIB,
        64 * MIB,
    )
    assert low.watermark_bytes == 64 * MIB // 10
    assert low.reason == (
        f"the log's disk is low: {5 * MIB} bytes free at /srv/store, under its watermark "
        f"of {64 * MIB // 10} bytes"
    )
    assert server.restarts == 0


async def test_a_full_disk_is_said_once_the_server_writes_again_after_its_restart() -> None:
    log, disk, server, clock = MemoryLog(), Disk(), Server(), VirtualClock()
    watch = _watch(log, disk, server, clock)
    await watch.check()
    disk.room = DiskUsage(free=0, total=64 * MIB)
    server.error = "write /srv/store/jetstream/...: no space left on device"
    full_at = clock.at
    found = await watch.check()
    assert found is not None and found.state is SpaceState.FULL
    assert found.reason == "the log's disk is full: 0 bytes free at /srv/store"
    clock.at += timedelta(seconds=30)
    disk.room = DiskUsage(free=3 * MIB, total=64 * MIB)  # some room, under the watermark
    await watch.check()
    assert server.restarts == 0  # a server started on it could not finish a batch
    assert watch.current is not None and watch.current.state is SpaceState.FULL
    disk.room = DiskUsage(free=20 * MIB, total=64 * MIB)
    await watch.check()
    await watch.check()
    assert server.restarts == 1
    said = await _said(log)
    assert [h.state for h in said] == [SpaceState.OK, SpaceState.OK]
    assert said[-1].unwritable_since == full_at
    assert said[0].unwritable_since is None


async def test_a_server_that_exited_is_started_again_and_a_refused_start_tried_later() -> None:
    log, disk, server, clock = MemoryLog(), Disk(), Server(), VirtualClock()
    watch = _watch(log, disk, server, clock)
    await watch.check()
    server.up, server.refuse = False, True
    await watch.check()
    await watch.check()  # too soon after a try
    assert server.restarts == 1
    clock.at += timedelta(seconds=5)
    server.refuse = False
    await watch.check()
    assert server.restarts == 2 and server.up


async def test_the_quota_actor_admits_no_new_session_while_the_disk_is_low() -> None:
    """It decides on the latest record it folded: a request folded with room said after
    it is admitted (the disk has room by then)."""
    log, disk, server, clock = MemoryLog(), Disk(), Server(), VirtualClock()
    watch = _watch(log, disk, server, clock)
    client = Client(log, clock, "AKana")

    def decided(sid: str) -> Callable[[ClusterState], bool]:
        return lambda s: sid in s.sessions and s.sessions[sid].status is not S.REQUESTED

    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        disk.room = DiskUsage(free=MIB, total=64 * MIB)
        await watch.check()
        [refused] = await client.create(image="fgpu/busybox:latest", slots=SMALL)
        with anyio.fail_after(10):
            s = await client.wait_until(decided(refused))
        assert s.sessions[refused].status is S.REJECTED
        disk.room = DiskUsage(free=20 * MIB, total=64 * MIB)
        await watch.check()
        [admitted] = await client.create(image="fgpu/busybox:latest", slots=SMALL)
        with anyio.fail_after(10):
            s = await client.wait_until(decided(admitted), s)
        tg.cancel_scope.cancel()
    assert s.sessions[admitted].status is S.PENDING
    rejected = [
        r.event
        async for batch in log.read(0)
        for r in batch
        if isinstance(r.event, SessionRejected)
    ]
    assert [(e.session_id, e.code) for e in rejected] == [(refused, "disk")]
    assert rejected[0].reason == (
        f"the log's disk is low: {MIB} bytes free at /srv/store, under its watermark of "
        f"{64 * MIB // 10} bytes: no new sessions until there is room"
    )
    assert refusal(s.log_space.values()) is None
