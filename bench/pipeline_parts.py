"""The pipeline benchmark's cluster as it runs in production: each part a process of its
own, each actor on its own connection.

- ``actors URL HOPS_FILE``: registrar, quota, scheduler, serving and the pipeline actor in
  one process, each on a connection of its own, as ``fgpu up`` runs them; the pipeline
  actor's log is a ``TimedLog``, whose notes are written to ``HOPS_FILE`` (JSON) at exit;
- ``agents URL N``: N dummy agents (64 cores each) in one process, each on its own
  connection, as ``fgpu agent`` runs one on each host.

Each prints ``ready`` once started, and stops when its standard input closes (the bench
closes it, or died).
"""

import argparse
import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from pipeline_hops import TimedLog  # bench/pipeline_hops.py, beside this file

from services.actors.agent import AgentActor
from services.actors.pipeline import PipelineActor
from services.actors.quota import QuotaActor
from services.actors.registrar import RegistrarActor
from services.actors.scheduler import SchedulerActor
from services.actors.serving import ServingActor
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from tests.support.cluster import agent_config

__all__ = ["actors", "agents"]


@asynccontextmanager
async def _connections(url: str, names: list[str]) -> AsyncIterator[dict[str, JetStreamLog]]:
    """One connection to ``url`` for each of ``names``, for the block."""
    async with AsyncExitStack() as stack:
        logs = {}
        for name in names:
            logs[name] = log = await connect(url, name=f"bench-{name}")
            stack.push_async_callback(log.close)
        yield logs


async def _until_stdin_closes(tg: TaskGroup) -> None:
    """Say ``ready``, then wait until the standard input closes, and stop ``tg``."""
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
    tg.cancel_scope.cancel()


async def actors(url: str, hops_file: Path) -> None:
    """The cluster's actors, each on its own connection, until standard input closes; the
    pipeline actor's hops then written to ``hops_file``."""
    clock = SystemClock()
    names = ["registrar", "quota", "scheduler", "serving", "pipeline"]
    async with _connections(url, names) as logs:
        timed = TimedLog(logs["pipeline"])
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(RegistrarActor(logs["registrar"], clock).run)
                await tg.start(QuotaActor(logs["quota"], clock).run)
                await tg.start(SchedulerActor(logs["scheduler"], clock).run)
                await tg.start(ServingActor(logs["serving"], clock).run)
                await tg.start(PipelineActor(timed, clock).run)
                await _until_stdin_closes(tg)
        finally:
            await anyio.Path(hops_file).write_text(json.dumps(timed.notes.to_json()))


async def agents(url: str, n: int) -> None:
    """``n`` dummy agents, each on its own connection, until standard input closes."""
    clock = SystemClock()
    names = [f"a{i}" for i in range(n)]
    async with _connections(url, names) as logs, anyio.create_task_group() as tg:
        for name, log in logs.items():
            await tg.start(AgentActor(log, DummyRuntime(), clock, agent_config(name)).run)
        await _until_stdin_closes(tg)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["actors", "agents"])
    parser.add_argument("url")
    parser.add_argument("arg", help="actors: the file of the hops; agents: how many")
    args = parser.parse_args()
    if args.part == "actors":
        anyio.run(actors, args.url, Path(args.arg))
    else:
        anyio.run(agents, args.url, int(args.arg))
