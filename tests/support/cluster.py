"""An in-process cluster of real actors over a real log, for tests."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from events import GpuInfo, Slots
from services.actors.agent import AgentActor, AgentConfig
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.actors.serving import ServingActor
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.ports import ContainerRuntime, EventLog, SecretOpener

GIB = 1 << 30


def mock_gpus(n: int, mem: int = 16 * GIB, sm: int = 80) -> tuple[GpuInfo, ...]:
    return tuple(
        GpuInfo(index=i, uuid=f"GPU-mock-{i}", model="MockGPU", mem=mem, sm_count=sm)
        for i in range(n)
    )


def agent_config(agent_id: str, gpus: int = 1, fgpu_per_gpu: int = 200) -> AgentConfig:
    return AgentConfig(
        agent_id=agent_id,
        capacity=Slots(cpu=64_000, mem=256 * GIB),
        gpus=mock_gpus(gpus),
        fgpu_per_gpu=fgpu_per_gpu,
        mock_gpus=True,
    )


@asynccontextmanager
async def running_cluster(
    events: EventLog,
    agents: list[tuple[AgentConfig, ContainerRuntime]],
    *,
    serving: bool = True,
    secrets: SecretOpener | None = None,
) -> AsyncIterator[None]:
    """Registrar, quota, scheduler, serving and the agents running until the block ends;
    the agents open secrets with ``secrets``."""
    clock = SystemClock()
    async with anyio.create_task_group() as tg:
        await tg.start(RegistrarActor(events, clock).run)
        await tg.start(QuotaActor(events, clock).run)
        await tg.start(SchedulerActor(events, clock).run)
        if serving:  # else the caller runs its own (one per durable)
            await tg.start(ServingActor(events, clock).run)
        for config, runtime in agents:
            await tg.start(AgentActor(events, runtime, clock, config, secrets=secrets).run)
        yield
        tg.cancel_scope.cancel()


def statuses(s: ClusterState, ids: list[str]) -> list[str]:
    return [s.sessions[i].status.value if i in s.sessions else "?" for i in ids]
