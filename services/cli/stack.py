"""Wiring of actors to real adapters: what ``fgpu up``, ``fgpu agent`` and friends run."""

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskStatus
from nats.aio.msg import Msg

from events import subjects as subj
from projections.paths import default_db_path
from services.actors.agent import AgentActor, AgentConfig
from services.actors.agent_host import AgentHost
from services.actors.common import SystemClock
from services.actors.quota import QuotaActor
from services.actors.scheduler import SchedulerActor
from services.adapters.jetstream import JetStreamLog, connect
from services.domain.container_spec import LABEL_SESSION
from services.domain.state import ClusterState
from services.ports import ContainerError, ContainerRuntime, SliceRegions

__all__ = [
    "HEARTBEAT_S",
    "StackInfo",
    "connected",
    "run_agent",
    "run_agent_host",
    "run_quota",
    "run_scheduler",
    "state_file",
]

HEARTBEAT_S = 2.0
log = structlog.get_logger()


def state_file() -> Path:
    """Where ``fgpu up`` says where it is, for the other commands to find it."""
    return Path(os.environ.get("FGPU_HOME", Path.home() / ".fgpu")) / "up.json"


def projections_db() -> Path:
    """The projections' file of the running ``fgpu up`` (beside its log), else
    ``projections.duckdb`` beside the state file."""
    try:
        store_dir = json.loads(state_file().read_text())["store_dir"]
    except (OSError, ValueError, KeyError):
        return default_db_path(state_file().parent)
    return default_db_path(Path(store_dir))


@dataclass
class StackInfo:
    nats_url: str
    store_dir: str
    agent_id: str | None
    pid: int
    api_url: str | None = None

    def save(self) -> None:
        path = state_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.__dict__))


@asynccontextmanager
async def connected(url: str, name: str) -> AsyncIterator[JetStreamLog]:
    events = await connect(url, name=name)
    try:
        yield events
    finally:
        await events.close()


async def run_quota(
    events: JetStreamLog, *, task_status: TaskStatus[ClusterState] = anyio.TASK_STATUS_IGNORED
) -> None:
    await QuotaActor(events, SystemClock()).run(task_status=task_status)


async def run_scheduler(
    events: JetStreamLog,
    *,
    lost_after_s: float = 15.0,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The scheduler, fed with heartbeats heard on core NATS."""
    actor = SchedulerActor(events, SystemClock(), lost_after_s=lost_after_s)

    async def on_heartbeat(msg: Msg) -> None:
        actor.heard(msg.subject.rsplit(".", 1)[-1])

    sub = await events.nc.subscribe(subj.HEARTBEAT_WILDCARD, cb=on_heartbeat)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(actor.run)
            task_status.started()
            while True:
                await anyio.sleep(HEARTBEAT_S)
                await actor.check_liveness()
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()


async def run_agent(
    events: JetStreamLog,
    runtime: ContainerRuntime,
    config: AgentConfig,
    regions: SliceRegions | None = None,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The agent, its heartbeat, and its answer to ``fgpu session logs``."""
    actor = AgentActor(events, runtime, SystemClock(), config, regions)

    async def on_logs(msg: Msg) -> None:
        session_id = msg.data.decode(errors="replace")
        try:
            found = await runtime.list({LABEL_SESSION: session_id})
            text = await runtime.logs(found[0].id) if found else ""
            reply = {"ok": bool(found), "logs": text}
        except ContainerError as e:
            reply = {"ok": False, "error": str(e)}
        await msg.respond(json.dumps(reply).encode())

    sub = await events.nc.subscribe(logs_subject(config.agent_id), cb=on_logs)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(actor.run)
            task_status.started()
            while True:
                await events.nc.publish(subj.heartbeat(config.agent_id), b"")
                await anyio.sleep(HEARTBEAT_S)
    finally:
        with anyio.CancelScope(shield=True):
            await sub.unsubscribe()


async def run_agent_host(
    events: JetStreamLog,
    configs: list[AgentConfig],
    runtime: Callable[[], ContainerRuntime],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Many simulated agents sharing one fold of the log, and their heartbeats."""
    clock = SystemClock()
    agents = [AgentActor(events, runtime(), clock, c) for c in configs]
    host = AgentHost(events, agents, durable=f"agent-host-{configs[0].agent_id}")
    async with anyio.create_task_group() as tg:
        await tg.start(host.run)
        task_status.started()
        while True:
            for c in configs:
                await events.nc.publish(subj.heartbeat(c.agent_id), b"")
            await anyio.sleep(HEARTBEAT_S)


def logs_subject(agent_id: str) -> str:
    return f"fgpu.rpc.{agent_id}.logs"
