"""The pipeline benchmark's cluster as it runs in production: parts in processes of their
own, each part on its own connection.

``python pipeline_parts.py URL HOPS_FILE PART...`` runs the named parts in one process,
each on a connection of its own: ``registrar``, ``quota``, ``scheduler``, ``serving``,
``pipeline`` (whose log is a ``TimedLog``: its notes are written to ``HOPS_FILE``, JSON,
at exit), ``agent:NAME`` (a dummy agent of 64 cores). All the actors in one process is
how ``fgpu up`` runs them; one each, how ``fgpu scheduler``, ``fgpu quota``... do; an
agent is a process on its host (``fgpu agent``).

Prints ``ready`` once every part has started, and stops when its standard input closes
(the bench closes it, or died).
"""

import argparse
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import structlog
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
from services.ports import EventLog
from tests.support.cluster import agent_config

__all__ = ["ACTORS", "run_parts"]

Runner = Callable[..., Coroutine[Any, Any, None]]
_CLOCK = SystemClock()
ACTORS: dict[str, Callable[[EventLog], Runner]] = {
    "registrar": lambda log: RegistrarActor(log, _CLOCK).run,
    "quota": lambda log: QuotaActor(log, _CLOCK).run,
    "scheduler": lambda log: SchedulerActor(log, _CLOCK).run,
    "serving": lambda log: ServingActor(log, _CLOCK).run,
    "pipeline": lambda log: PipelineActor(log, _CLOCK).run,
}


def _runner(part: str, log: EventLog) -> Runner:
    """What runs ``part`` on ``log``. Raises ValueError for no such part."""
    kind, _, name = part.partition(":")
    if kind == "agent" and name:
        return AgentActor(log, DummyRuntime(), _CLOCK, agent_config(name)).run
    if part not in ACTORS:
        raise ValueError(f"no part {part!r}: one of {sorted(ACTORS)} or agent:NAME")
    return ACTORS[part](log)


@asynccontextmanager
async def _connections(url: str, parts: list[str]) -> AsyncIterator[dict[str, JetStreamLog]]:
    """One connection to ``url`` for each of ``parts``, for the block."""
    async with AsyncExitStack() as stack:
        logs = {}
        for part in parts:
            logs[part] = log = await connect(url, name=f"bench-{part.replace(':', '-')}")
            stack.push_async_callback(log.close)
        yield logs


async def _until_stdin_closes(tg: TaskGroup) -> None:
    """Say ``ready``, then wait until the standard input closes, and stop ``tg``."""
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
    tg.cancel_scope.cancel()


async def run_parts(url: str, hops_file: str, parts: list[str]) -> None:
    """``parts``, each on its own connection, until standard input closes; the pipeline
    actor's notes (if it is one of them) then written to ``hops_file``."""
    async with _connections(url, parts) as logs:
        timed = TimedLog(logs["pipeline"]) if "pipeline" in logs else None
        try:
            async with anyio.create_task_group() as tg:
                for part, log in logs.items():
                    runs_on: EventLog = timed if part == "pipeline" and timed is not None else log
                    await tg.start(_runner(part, runs_on))
                await _until_stdin_closes(tg)
        finally:
            if timed is not None:
                await anyio.Path(hops_file).write_text(json.dumps(timed.notes.to_json()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("hops_file")
    parser.add_argument("parts", nargs="+")
    args = parser.parse_args()
    # Standard output is for what the bench reads (its JSON line, a part's ``ready``).
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    anyio.run(run_parts, args.url, args.hops_file, args.parts)
