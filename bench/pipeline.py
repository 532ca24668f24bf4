"""Pipeline benchmark: a 1,000-task DAG (layers of fan-out and fan-in) on dummy agents.

A real nats-server; quota, scheduler, the pipeline actor and dummy agents in this process.
Two figures, both from one observer tailing the log:

- the latency from a task's end (its session's ``session.terminated`` seen) to its
  dependents' requests (their ``session.requested`` seen), p50 and p99 over every task
  that has dependencies, taken from its last dependency's end;
- the run's total time, request to the last task's end, against the same sessions asked
  for directly by a script in dependency order (each as soon as its dependencies have
  ended, in one batch per wave), same run: ``ratio_pipeline_to_direct``;
- the records each way put on the log (``records_pipeline``, ``records_direct``): what
  every follower of the log reads, a figure the host's load does not move.

Prints one JSON line. Usage: python bench/pipeline.py [--width 249] [--layers 4] [--agents 4]
"""

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing

import anyio

from events import (
    PipelineSpec,
    PipelineTask,
    SessionRequested,
    SessionTerminated,
    Slots,
)
from services.actors.pipeline import PipelineActor
from services.adapters import nats_server
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.system_clock import SystemClock
from services.client import Client, session_requests
from services.domain.request_ids import RequestIds
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
    """When each session was seen asked for and ended (wall clock, seconds)."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.names: dict[str, str] = {}  # session -> its name (the run's task)
        self.records = 0  # seen, up to the last end

    async def watch(self, log: JetStreamLog, after: int, done: Callable[[], bool]) -> None:
        async with aclosing(log.tail(after)) as batches:
            async for batch in batches:
                now = time.perf_counter()
                self.records += len(batch)
                for r in batch:
                    e = r.event
                    if isinstance(e, SessionRequested):
                        self.asked.setdefault(e.session_id, now)
                        self.names[e.session_id] = (e.name or "").rpartition("/")[2]
                    elif isinstance(e, SessionTerminated):
                        self.ended.setdefault(e.session_id, now)
                if done():
                    return


async def by_pipeline(
    log: JetStreamLog, tasks: list[PipelineTask]
) -> tuple[float, list[float], int]:
    """The run's total time, each task's wait from its last dependency's end, and the
    records seen up to the last end."""
    seen = Observer()
    start = await log.last_seq()
    t0 = time.perf_counter()
    await Client(log, SystemClock(), "bench").pipeline_run(
        PipelineSpec(name="b", tasks=tuple(tasks))
    )
    await seen.watch(log, start, lambda: len(seen.ended) == len(tasks))
    total = max(seen.ended.values()) - t0
    by_name = {seen.names[s]: s for s in seen.asked}
    waits = []
    for t in tasks:
        if t.dependencies:
            last_end = max(seen.ended[by_name[d]] for d in t.dependencies)
            waits.append(seen.asked[by_name[t.name]] - last_end)
    return total, waits, seen.records


async def directly(log: JetStreamLog, tasks: list[PipelineTask], round_: int) -> float:
    """The same sessions asked for by a script, in dependency order: every task whose
    dependencies have ended, at once, in one atomic batch; the time to the last end."""
    client = Client(log, SystemClock(), "direct")
    ended: set[str] = set()
    asked: dict[str, str] = {}  # task -> its session
    start = await log.last_seq()
    t0 = time.perf_counter()
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
                return time.perf_counter() - t0
    raise AssertionError("the log ended")


async def _observed(log: JetStreamLog, run: Awaitable[float], n: int) -> tuple[float, int]:
    """``run``'s result, with an observer tailing the log meanwhile, as the pipeline's
    run has: both ways pay for one reader of the whole log beside what they measure; and
    the records it saw up to the last end."""
    seen = Observer()
    start = await log.last_seq()
    async with anyio.create_task_group() as tg:
        tg.start_soon(seen.watch, log, start, lambda: len(seen.ended) >= n)
        took = await run
    return took, seen.records


def _quantile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def main(width: int, layers: int, agents: int) -> dict[str, object]:
    tasks = dag(width, layers)
    with nats_server.nats_server() as server:
        log = await connect(server.url)
        try:
            await log.create_or_update_stream()
            cluster = [(agent_config(f"a{i}"), DummyRuntime()) for i in range(agents)]
            async with running_cluster(log, cluster), anyio.create_task_group() as tg:
                await tg.start(PipelineActor(log, SystemClock()).run)
                direct_s, direct_records = await _observed(log, directly(log, tasks, 0), len(tasks))
                pipeline_s, waits, pipeline_records = await by_pipeline(log, tasks)
                tg.cancel_scope.cancel()
        finally:
            await log.close()
    return {
        "bench": "pipeline",
        "tasks": len(tasks),
        "layers": layers,
        "width": width,
        "agents": agents,
        "end_to_dependents_p50_ms": _quantile_ms(waits, 0.5),
        "end_to_dependents_p99_ms": _quantile_ms(waits, 0.99),
        "pipeline_s": round(pipeline_s, 3),
        "direct_s": round(direct_s, 3),
        "ratio_pipeline_to_direct": round(pipeline_s / direct_s, 3),
        "records_pipeline": pipeline_records,
        "records_direct": direct_records,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=249)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--agents", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.width, args.layers, args.agents))))
