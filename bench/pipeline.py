"""Pipeline benchmark: a 1,000-task DAG (layers of fan-out and fan-in) on dummy agents.

A real nats-server; the cluster laid out as ``--layout`` says (``pipeline_parts``), each
part on its own connection: ``up`` (the default) registrar, quota, scheduler, serving and
the pipeline actor in one process, as ``fgpu up`` runs them; ``split`` each actor in a
process of its own, as ``fgpu scheduler``, ``fgpu quota``... run them; in both, the
dummy agents in one more process (an agent is a process on its host). ``one``: all of it
in this process on one connection (the layout before). The script, the client and the
observer are in this process, in every layout. Figures, from one observer tailing the log:

- the latency from a task's end (its session's ``session.terminated`` seen) to its
  dependents' requests (their ``session.requested`` seen), p50 and p99 over every task
  that has dependencies, taken from its last dependency's end; the same for the direct
  script's requests (``direct_end_to_dependents``): what any client that reacts to the
  log pays on this host and layout;
- the same latency from the events' own stamps: to the request's ``at`` (when the actor
  decided: ``stamp_end_to_request``) and to the server's stamp of the stored request
  (when it was on the log: ``stamp_end_to_stored``), from the end's ``at`` (when the
  agent wrote it); and its hops (``pipeline_hops``): the end's stamp to the actor's
  receipt, to the decision's append, to the request stored, to the observer's sight of
  it, with the append's acknowledgement back at the actor beside them;
- the run's total time, request to the last task's end, against the same sessions asked
  for directly by a script in dependency order (each as soon as its dependencies have
  ended, in one batch per wave), same run, same layout: ``ratio_pipeline_to_direct``;
- the records each way put on the log (``records_pipeline``, ``records_direct``): what
  every follower of the log reads, a figure the host's load does not move.

Prints one JSON line. Usage: python bench/pipeline.py [--width 249] [--layers 4]
[--agents 4] [--layout up|split|one]
"""

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from datetime import datetime
from pathlib import Path

import anyio
import structlog
from pipeline_hops import (  # beside this file
    Hops,
    Notes,
    TimedLog,
    hop_quantiles,
    quantile_ms,
    stored_at,
)

from events import (
    PipelineSpec,
    PipelineTask,
    SessionRequested,
    SessionTerminated,
    Slots,
)
from services.actors.agent import AgentConfig
from services.actors.pipeline import PipelineActor
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client, session_requests
from services.domain.request_ids import RequestIds
from services.ports import ContainerRuntime
from tests.support.cluster import agent_config, running_cluster

SLOTS = Slots(cpu=50, mem=32 << 20)
IMAGE = "fgpu/busybox:latest"


def dag(width: int, layers: int) -> list[PipelineTask]:
    """``layers`` times: one task, then ``width`` after it, all joined by the next one;
    a last task joins the final layer."""
    tasks: list[PipelineTask] = []
    join = "j0"
    tasks.append(_task(join, ()))
    for layer in range(layers):
        wide = [f"l{layer}w{i}" for i in range(width)]
        tasks += [_task(w, (join,)) for w in wide]
        join = f"j{layer + 1}"
        tasks.append(_task(join, tuple(wide)))
    return tasks


def _task(name: str, deps: tuple[str, ...]) -> PipelineTask:
    return PipelineTask(name=name, image=IMAGE, command=("true",), slots=SLOTS, dependencies=deps)


class Observer:
    """When (``time.monotonic``) each session was seen asked for and ended."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.names: dict[str, str] = {}  # session -> its name (the run's task)
        self.asked_at: dict[str, datetime] = {}  # a session's request's own ``at``
        self.ended_at: dict[str, datetime] = {}  # its end's own ``at``
        self.records = 0  # seen, up to the last end
        self.start = 0  # the log's last record when it began

    async def watch(self, log: JetStreamLog, after: int, done: Callable[[], bool]) -> None:
        self.start = after
        async with aclosing(log.tail(after)) as batches:
            async for batch in batches:
                now = time.monotonic()
                self.records += len(batch)
                for r in batch:
                    e = r.event
                    if isinstance(e, SessionRequested):
                        self.asked.setdefault(e.session_id, now)
                        self.names[e.session_id] = (e.name or "").rpartition("/")[2]
                        self.asked_at.setdefault(e.session_id, e.at)
                    elif isinstance(e, SessionTerminated):
                        self.ended.setdefault(e.session_id, now)
                        self.ended_at.setdefault(e.session_id, e.at)
                if done():
                    return


async def by_pipeline(log: JetStreamLog, tasks: list[PipelineTask]) -> tuple[float, Observer]:
    """The run's total time, request to the last end, and what its observer saw."""
    seen = Observer()
    start = await log.last_seq()
    t0 = time.monotonic()
    await Client(log, SystemClock(), "bench").pipeline_run(
        PipelineSpec(name="b", tasks=tuple(tasks))
    )
    await seen.watch(log, start, lambda: len(seen.ended) == len(tasks))
    return max(seen.ended.values()) - t0, seen


def waits(seen: Observer, tasks: list[PipelineTask], session_of: dict[str, str]) -> list[float]:
    """Each dependent task's wait from its last dependency's end to its request, as
    ``seen`` saw both (``session_of``: each task's session)."""
    out = []
    for t in tasks:
        if t.dependencies:
            last = max(seen.ended[session_of[d]] for d in t.dependencies)
            out.append(seen.asked[session_of[t.name]] - last)
    return out


def hops(seen: Observer, notes: Notes, stored: dict[str, float], tasks: list[PipelineTask]) -> Hops:
    """Each dependent task's hops from its last dependency's end to its request
    (``notes``: the pipeline actor's; ``stored``: when each request was stored); those
    the notes lack are counted as left out."""
    by_name = {seen.names[s]: s for s in seen.asked}
    out = Hops()
    for t in tasks:
        if t.dependencies:
            last = max((by_name[d] for d in t.dependencies), key=lambda s: seen.ended[s])
            session = by_name[t.name]
            if last not in notes.got or session not in notes.sent:
                out.left_out += 1
                continue
            stamps = (seen.ended_at[last], seen.asked_at[session])
            at = (notes.got[last], notes.sent[session], stored[session], seen.asked[session])
            out.add(stamps, *at)
    return out


async def directly(
    log: JetStreamLog, tasks: list[PipelineTask], round_: int, asked: dict[str, str]
) -> float:
    """The same sessions asked for by a script, in dependency order: every task whose
    dependencies have ended, at once, in one atomic batch; the time to the last end.
    ``asked``: filled with each task's session."""
    client = Client(log, SystemClock(), "direct")
    ended: set[str] = set()
    start = await log.last_seq()
    t0 = time.monotonic()
    wave = 0

    async def ask_ready() -> None:
        nonlocal wave
        ready = [
            t
            for t in tasks
            if t.name not in asked and all(asked.get(d) in ended for d in t.dependencies)
        ]
        if not ready:
            return
        wave += 1
        requests = session_requests(
            RequestIds("direct", f"d{round_}-{wave}"),
            SystemClock().now(),
            len(ready),
            image=IMAGE,
            slots=SLOTS,
            command=["true"],
            cpu_only=True,
        )
        for t, req in zip(ready, requests, strict=True):
            asked[t.name] = req.session_id
        await client.send_requests(requests)

    await ask_ready()
    async with aclosing(log.tail(start)) as batches:
        async for batch in batches:
            for r in batch:
                if isinstance(r.event, SessionTerminated):
                    ended.add(r.event.session_id)
            await ask_ready()
            if len(ended & set(asked.values())) == len(tasks):
                return time.monotonic() - t0
    raise AssertionError("the log ended")


async def _observed(log: JetStreamLog, run: Awaitable[float], n: int) -> tuple[float, Observer]:
    """``run``'s result, with an observer tailing the log meanwhile, as the pipeline's
    run has: both ways pay for one reader of the whole log beside what they measure; and
    what it saw up to the last end."""
    seen = Observer()
    start = await log.last_seq()
    async with anyio.create_task_group() as tg:
        tg.start_soon(seen.watch, log, start, lambda: len(seen.ended) >= n)
        took = await run
    return took, seen


@asynccontextmanager
async def _in_one_process(
    log: JetStreamLog, url: str, agents: int, layout: str
) -> AsyncIterator[Notes]:
    """The cluster's actors, its agents and the pipeline actor in this process, all on
    ``log``'s one connection (the layout before ``pipeline_parts``); ``url`` unused."""
    del url, layout
    cluster: list[tuple[AgentConfig, ContainerRuntime]] = [
        (agent_config(f"a{i}"), DummyRuntime()) for i in range(agents)
    ]
    actor = TimedLog(log)
    async with running_cluster(log, cluster), anyio.create_task_group() as tg:
        await tg.start(PipelineActor(actor, SystemClock()).run)
        yield actor.notes
        tg.cancel_scope.cancel()


_ACTORS = ["registrar", "quota", "scheduler", "serving", "pipeline"]


def _processes(layout: str, agents: int) -> list[list[str]]:
    """The parts of each process (``pipeline_parts``) of ``layout``: the actors in one
    (``up``: as ``fgpu up`` runs them) or each in its own (``split``: as ``fgpu
    scheduler``, ``fgpu quota``... run them); the agents in one more."""
    actors = [_ACTORS] if layout == "up" else [[a] for a in _ACTORS]
    return [*actors, [f"agent:a{i}" for i in range(agents)]]


@asynccontextmanager
async def _in_processes(
    log: JetStreamLog, url: str, agents: int, layout: str
) -> AsyncIterator[Notes]:
    """The cluster in processes of its own (``_processes``), each part on its own
    connection; the pipeline actor's notes, filled once the block is left."""
    del log
    notes = Notes()
    with tempfile.TemporaryDirectory(prefix="fgpu-bench-pipeline-") as tmp:
        hops_file = anyio.Path(tmp) / "hops.json"
        async with AsyncExitStack() as stack:
            for parts in _processes(layout, agents):
                await stack.enter_async_context(_part(url, str(hops_file), *parts))
            yield notes
        kept = Notes.from_json(json.loads(await hops_file.read_text()))
        notes.got, notes.sent = kept.got, kept.sent


@asynccontextmanager
async def _part(*args: str) -> AsyncIterator[None]:
    """``pipeline_parts.py args`` running, ready, for the block; stopped by closing its
    standard input, and waited for."""
    parts = Path(__file__).with_name("pipeline_parts.py")
    async with await anyio.open_process(
        [sys.executable, str(parts), *args], stdin=subprocess.PIPE, stderr=None
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        said = b""
        while not said.endswith(b"ready\n"):
            said += await proc.stdout.receive()
        try:
            yield
        finally:
            await proc.stdin.aclose()
            with anyio.move_on_after(30) as waited:
                await proc.wait()
            if waited.cancelled_caught:
                proc.kill()


LAYOUTS = {"up": _in_processes, "split": _in_processes, "one": _in_one_process}


async def main(width: int, layers: int, agents: int, layout: str) -> dict[str, object]:
    tasks = dag(width, layers)
    with nats_server.nats_server() as server:
        log = await connect(server.url)
        try:
            await log.create_or_update_stream()
            async with LAYOUTS[layout](log, server.url, agents, layout) as notes:
                asked: dict[str, str] = {}
                run = directly(log, tasks, 0, asked)
                direct_s, direct_seen = await _observed(log, run, len(tasks))
                pipeline_s, seen = await by_pipeline(log, tasks)
            stored = await stored_at(log, seen.start)
        finally:
            await log.close()
    by_name = {seen.names[s]: s for s in seen.asked}
    pipeline_waits = waits(seen, tasks, by_name)
    direct_waits = waits(direct_seen, tasks, asked)
    return {
        "bench": "pipeline",
        "layout": layout,
        "tasks": len(tasks),
        "layers": layers,
        "width": width,
        "agents": agents,
        "end_to_dependents_p50_ms": quantile_ms(pipeline_waits, 0.5),
        "end_to_dependents_p99_ms": quantile_ms(pipeline_waits, 0.99),
        "direct_end_to_dependents_p50_ms": quantile_ms(direct_waits, 0.5),
        "direct_end_to_dependents_p99_ms": quantile_ms(direct_waits, 0.99),
        "pipeline_s": round(pipeline_s, 3),
        "direct_s": round(direct_s, 3),
        "ratio_pipeline_to_direct": round(pipeline_s / direct_s, 3),
        "records_pipeline": seen.records,
        "records_direct": direct_seen.records,
        **hop_quantiles(hops(seen, notes, stored, tasks)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=249)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="up")
    args = parser.parse_args()
    # Standard output is for what the bench reads (its JSON line, a part's ``ready``).
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    print(json.dumps(asyncio.run(main(args.width, args.layers, args.agents, args.layout))))
