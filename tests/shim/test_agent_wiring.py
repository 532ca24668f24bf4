"""The agent wires the shim: a region per session with its slice, usage and OOM as events.

Real actors over a real log; the "container" is the dummy runtime, and its process is the
cudart-like harness on the host, running through the shim against the fake driver with
the region the agent created: what a CUDA program in the container would do.
"""

import os
import signal
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from events import GpuOomRefused, GpuUsageSampled, Record, Slots
from services.actors.agent import AgentActor
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.shim_regions import ShimRegions
from services.adapters.system_clock import SystemClock
from services.client import Client
from tests.support.cluster import agent_config
from tests.support.shim_kit import GIB, Kit, read_line, running

pytestmark = pytest.mark.anyio


async def first(log: JetStreamLog, match: Callable[[object], bool], after: int = 0) -> Record:
    """The first record after ``after`` whose event matches, waiting for it on the log."""
    async with aclosing(log.tail(after)) as batches:
        async for batch in batches:
            for r in batch:
                if match(r.event):
                    return r
    raise AssertionError("the log ended")


def exists(path: str) -> bool:
    return os.path.exists(path)


async def test_agent_enforces_the_slice_and_reports_usage_and_oom(
    log: JetStreamLog, kit: Kit, state: Path, tmp_path: Path
) -> None:
    clock = SystemClock()
    regions = ShimRegions(str(tmp_path / "regions"))
    config = agent_config("shimmed", gpus=2)  # 2 x 16 GiB, 1 GPU = 2 fGPU
    config = type(config)(
        **{**config.__dict__, "shim_lib_dir": str(kit.shim_lib), "usage_interval_s": 0.2,
           "oom_poll_s": 0.05},
    )  # fmt: skip
    client = Client(log, clock, "alice")
    runtime = DummyRuntime()
    async with anyio.create_task_group() as tg:
        await tg.start(QuotaActor(log, clock).run)
        await tg.start(SchedulerActor(log, clock).run)
        await tg.start(AgentActor(log, runtime, clock, config, regions).run)
        # 2.5 fGPU: a whole device (2 fGPU: 16 GiB, all SMs) and a quarter of another.
        (sid,) = await client.create(
            image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=GIB, fgpu=250)
        )
        with anyio.fail_after(20):
            s = await client.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status == "RUNNING"
            )
        devices = s.sessions[sid].devices
        region = regions.path(sid)
        assert exists(region)
        limits = {d.index: d.mem_limit for d in regions.sample(sid)}
        by_gpu = {d.gpu_index: d.fgpu for d in devices}
        assert sorted(limits.values()) == [4 * GIB, 16 * GIB]
        assert sorted(by_gpu.values()) == [50, 200]

        # Container device 0 is the whole one: 16 GiB. A process holds 3 GiB of it...
        env = kit.env(state=state, region=Path(region))
        with running(kit, "hold", str(3 * GIB), env=env) as holder:
            assert read_line(holder)["rc"] == 0
            with anyio.fail_after(20):
                held = await first(
                    log, lambda e: isinstance(e, GpuUsageSampled) and e.mem_used == 3 * GIB
                )
            assert isinstance(held.event, GpuUsageSampled)
            assert held.event.gpu_index == devices[0].gpu_index
            assert held.event.mem_limit == 16 * GIB
            assert held.event.charged_ns is None  # a whole device: not paced, not counted
            with anyio.fail_after(20):
                quarter = await first(
                    log,
                    lambda e: (
                        isinstance(e, GpuUsageSampled) and e.gpu_index == devices[1].gpu_index
                    ),
                )
            assert isinstance(quarter.event, GpuUsageSampled)
            assert quarter.event.charged_ns == 0  # a share: counted (nothing launched there)
            # ...another asks for more than is left of the slice: refused, reported at once.
            over = kit.run("used", str(14 * GIB), env=env)
            assert over[0]["alloc"] == 2  # CUDA_ERROR_OUT_OF_MEMORY
            with anyio.fail_after(20):
                oom = (await first(log, lambda e: isinstance(e, GpuOomRefused))).event
            assert isinstance(oom, GpuOomRefused)
            assert (oom.session_id, oom.requested, oom.mem_limit) == (sid, 14 * GIB, 16 * GIB)
            # The holder is killed: the agent gives its 3 GiB back to the container's budget.
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            with anyio.fail_after(20):
                await first(
                    log,
                    # The same device: the session's other one never holds anything.
                    lambda e: (
                        isinstance(e, GpuUsageSampled)
                        and e.gpu_index == devices[0].gpu_index
                        and e.mem_used == 0
                    ),
                    after=held.seq,
                )

        await client.destroy(sid)
        with anyio.fail_after(20):
            await client.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status == "TERMINATED"
            )
        assert not exists(region)  # the region goes with the session
        tg.cancel_scope.cancel()
