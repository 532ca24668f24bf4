"""Heartbeats: agents beat; the scheduler hears them and declares silent agents lost."""

from collections.abc import Sequence
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from services.ports import Heartbeats

__all__ = ["HEARTBEAT_S", "send_heartbeats", "watch_heartbeats"]

HEARTBEAT_S = 2.0


class _Watcher(Protocol):
    """What listens to heartbeats: the scheduler (``SchedulerActor``)."""

    def heard(self, agent_id: str) -> None: ...

    async def check_liveness(self) -> None: ...


async def send_heartbeats(
    bus: Heartbeats, agent_ids: Sequence[str], *, period_s: float = HEARTBEAT_S
) -> None:
    """Beat for each of ``agent_ids`` every ``period_s``, until cancelled."""
    while True:
        for agent_id in agent_ids:
            await bus.beat(agent_id)
        await anyio.sleep(period_s)


async def watch_heartbeats(
    bus: Heartbeats,
    watcher: _Watcher,
    *,
    period_s: float = HEARTBEAT_S,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Tell ``watcher`` of every beat, and have it check liveness every ``period_s``,
    until cancelled. Ready (``task_status``) once it listens: no beat after is missed."""
    async with bus.heard() as beats, anyio.create_task_group() as tg:

        async def listen() -> None:
            async for agent_id in beats:
                watcher.heard(agent_id)

        tg.start_soon(listen)
        task_status.started()
        while True:
            await anyio.sleep(period_s)
            await watcher.check_liveness()
