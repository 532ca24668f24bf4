"""Rebuild benchmark: 1,000,000 events from the log into DuckDB, against a raw replay.

Starts a real nats-server, fills the stream with a synthetic but valid history (agents
registering, then sessions going requested, admitted, sometimes queued, scheduled,
preparing, running, sometimes destroyed, terminated; a few hundred alive at a time), then
in the same run:

1. baseline: a raw ordered-consumer replay of the whole stream with nats-py and no
   processing (a callback that only counts);
2. the bulk reader alone (``JetStreamLog.read_raw``: parsing and the canonical encoding
   of each payload in its child process, nothing done by the caller), for reference;
3. ``projections.rebuild``: every table rebuilt from the start of the log into a new
   DuckDB file (decode, fold, rows, three batches a transaction, final checkpoint).

Steps 1 and 3 alternate ``--runs`` times; the figures are medians. Prints one JSON line.
Usage: python bench/rebuild.py [--events 1000000] [--runs 3]
"""

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats.js.api import DeliverPolicy

from events import (
    AgentRegistered,
    AnyEvent,
    DevicePlacement,
    GpuInfo,
    SessionAdmitted,
    SessionDestroyRequested,
    SessionPreparing,
    SessionQueued,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    Slots,
    encode,
)
from events import subjects as subj
from projections import rebuild
from projections.projector import (
    REBUILD_BATCH,
    REBUILD_BATCHES_PER_TRANSACTION,
    REBUILD_THREADS,
)
from projections.store import ProjectionStore
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def synthetic_log(
    n_events: int, *, agents: int = 100, gpus: int = 4, live: int = 400, seed: int = 1
) -> Iterator[tuple[str, bytes]]:
    """(subject, payload) of a valid history of about ``n_events`` events, in log order.

    ``live`` sessions are alive at any time; each step moves one of them one event on.
    Event times advance 1 ms per event from 2025-01-01T00:00:00Z.
    """
    k = 0

    def at() -> datetime:
        return T0 + timedelta(milliseconds=k)

    def ident() -> str:
        return uuid.UUID(int=(seed << 64) + k).hex

    for a in range(agents):
        aid = f"agent-{a}"
        yield (
            subj.agent(aid),
            encode(
                AgentRegistered(
                    id=ident(),
                    at=at(),
                    actor=f"agent:{aid}",
                    agent_id=aid,
                    capacity=Slots(cpu=256_000, mem=2048 << 30, fgpu=gpus * 400),
                    gpus=tuple(
                        GpuInfo(
                            index=i,
                            uuid=f"GPU-{aid}-{i}",
                            model="SimGPU",
                            mem=80 << 30,
                            sm_count=132,
                        )
                        for i in range(gpus)
                    ),
                    fgpu_per_gpu=400,
                    images=("fgpu/busybox:latest",),
                    runtime="dummy",
                )
            ),
        )
        k += 1
    slots = Slots(cpu=1000, mem=1 << 30, fgpu=100)
    # Each session's remaining events, built lazily; ``window`` holds the live ones.
    window: list[Iterator[tuple[str, AnyEvent]]] = []
    number = 0

    def lifecycle(n: int) -> Iterator[tuple[str, AnyEvent]]:
        sid = f"s{n:012x}"
        owner = f"team{n % 10}"
        aid = f"agent-{n % agents}"
        gpu = (n // agents) % gpus
        rid = ident()
        env = {"causation_id": rid, "correlation_id": rid}
        yield (
            subj.request(owner, sid),
            SessionRequested(
                id=rid,
                at=at(),
                actor=owner,
                correlation_id=rid,
                session_id=sid,
                owner=owner,
                image="fgpu/busybox:latest",
                command=("sleep", "60"),
                slots=slots,
            ),
        )
        yield (
            subj.quota(owner),
            SessionAdmitted(id=ident(), at=at(), actor="quota", **env, session_id=sid, owner=owner),
        )
        if n % 10 == 0:
            yield (
                subj.LEDGER,
                SessionQueued(
                    id=ident(),
                    at=at(),
                    actor="scheduler",
                    **env,
                    session_id=sid,
                    reason="waiting for 1 fGPU; largest free share on a device: 0 fGPU",
                ),
            )
        yield (
            subj.LEDGER,
            SessionScheduled(
                id=ident(),
                at=at(),
                actor="scheduler",
                **env,
                session_id=sid,
                owner=owner,
                agent_id=aid,
                slots=slots,
                devices=(DevicePlacement(gpu_index=gpu, fgpu=100),),
            ),
        )
        yield (
            subj.agent_session(aid, sid),
            SessionPreparing(
                id=ident(), at=at(), actor=f"agent:{aid}", **env, session_id=sid, agent_id=aid
            ),
        )
        yield (
            subj.agent_session(aid, sid),
            SessionRunning(
                id=ident(),
                at=at(),
                actor=f"agent:{aid}",
                **env,
                session_id=sid,
                agent_id=aid,
                container_id=f"c{n:063x}",
            ),
        )
        reason = "exited"
        if n % 2 == 0:
            destroy = ident()
            yield (
                subj.request(owner, sid),
                SessionDestroyRequested(
                    id=destroy, at=at(), actor=owner, session_id=sid, requester=owner
                ),
            )
            yield (
                subj.LEDGER,
                SessionTerminating(
                    id=ident(),
                    at=at(),
                    actor="scheduler",
                    causation_id=destroy,
                    correlation_id=rid,
                    session_id=sid,
                    agent_id=aid,
                    reason="destroyed by its owner",
                ),
            )
            reason = "stopped"
        yield (
            subj.agent_session(aid, sid),
            SessionTerminated(
                id=ident(),
                at=at(),
                actor=f"agent:{aid}",
                **env,
                session_id=sid,
                agent_id=aid,
                exit_code=0 if reason == "exited" else 143,
                reason=reason,
            ),
        )

    while k < n_events:
        while len(window) < live:
            window.append(lifecycle(number))
            number += 1
        slot = k % len(window)
        step = next(window[slot], None)
        if step is None:
            window[slot] = lifecycle(number)
            number += 1
            continue
        subject, event = step
        yield subject, encode(event)
        k += 1


def quantiles_ms(values: list[float], digits: int = 2) -> dict[str, float]:
    """p50, p99 (the sample at 99%, no interpolation) and max of ``values``, in ms."""
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), digits),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], digits),
        "max_ms": round(ordered[-1], digits),
    }


async def fill(events: JetStreamLog, n: int, **kwargs: int) -> int:
    """Publish ``n`` synthetic events (core publishes, flushed in rounds); the last seq."""
    nc = events.nc
    sent = 0
    for subject, payload in synthetic_log(n, **kwargs):
        await nc.publish(subject, payload)
        sent += 1
        if sent % 20_000 == 0:
            await nc.flush()
            # Let the server keep up; its count is all there is to wait on.
            while await events.last_seq() < sent - 40_000:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    await nc.flush()
    while await events.last_seq() < sent:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return sent


async def raw_ordered_replay(events: JetStreamLog, n: int) -> float:
    """nats-py's ordered push consumer over the whole stream, doing nothing per message."""
    done = asyncio.Event()
    count = 0

    async def on_msg(msg: object) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    t0 = time.perf_counter()
    sub = await events.js.subscribe(
        subj.STREAM_WILDCARD,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
        cb=on_msg,
        stream=subj.STREAM,
    )
    await done.wait()
    seconds = time.perf_counter() - t0
    await sub.unsubscribe()
    return n / seconds


async def bulk_read(events: JetStreamLog) -> float:
    t0 = time.perf_counter()
    n = 0
    async for seqs, *_ in events.read_raw(0):
        n += len(seqs)
    return n / (time.perf_counter() - t0)


async def stage_costs(events: JetStreamLog, work: Path, n: int) -> dict[str, float]:
    """Microseconds per event of each stage of a rebuild, one after the other in one
    thread (the rebuild overlaps them), batched as ``rebuild`` batches: the first ``n``
    events, into a throwaway store. DuckDB checkpoints along the way, within
    ``duckdb_write``; ``final_checkpoint`` is what is left at the end."""
    batches = [b async for b in events.read_raw(0, until=n, batch=REBUILD_BATCH)]
    store = ProjectionStore(work / "stages.duckdb", threads=REBUILD_THREADS)
    spent = dict.fromkeys(("decode", "fold_and_rows", "duckdb_write", "final_checkpoint"), 0.0)
    try:
        for i, raw in enumerate(batches, 1):
            t0 = time.perf_counter()
            records = store.decode(raw.seqs, raw.subjects, raw.payloads)
            t1 = time.perf_counter()
            batch = store.prepare(records, raw)
            t2 = time.perf_counter()
            # Written as the rebuild writes: into the open transaction, every third commits.
            if batch is not None:
                store.add(batch, commit=i % REBUILD_BATCHES_PER_TRANSACTION == 0)
            if i == len(batches):
                store.commit()
            t3 = time.perf_counter()
            spent["decode"] += t1 - t0
            spent["fold_and_rows"] += t2 - t1
            spent["duckdb_write"] += t3 - t2
        t0 = time.perf_counter()
        store.con.execute("CHECKPOINT")
        spent["final_checkpoint"] = time.perf_counter() - t0
    finally:
        store.close()
    return {k: round(v / n * 1e6, 2) for k, v in spent.items()}


def _cpu_seconds(nats_pid: int) -> dict[str, float]:
    """CPU seconds so far: this process, its reaped children, nats-server, the machine."""
    me, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{nats_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return {
        "rebuilding_process": me.ru_utime + me.ru_stime,
        "reader_child": children.ru_utime + children.ru_stime,
        "nats_server": (int(fields[11]) + int(fields[12])) / tick,  # utime, stime
        "machine": (sum(cpu) - cpu[3] - cpu[4]) / tick,  # all but idle and iowait
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-rebuild-"))
    runs: list[dict[str, float]] = []
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-rebuild")
        await events.create_or_update_stream()
        t0 = time.perf_counter()
        n = await fill(events, args.events)
        fill_s = time.perf_counter() - t0
        bulk = await bulk_read(events)
        # The baseline and the rebuild alternate, each pair close in time: the machine's
        # speed drifts by 15-20% over minutes, and a ratio of two distant runs would too.
        for _ in range(args.runs):
            raw = await raw_ordered_replay(events, n)
            before = _cpu_seconds(server.process.pid)
            result = await rebuild(events, work / "projections.duckdb")
            after = _cpu_seconds(server.process.pid)
            cpu = {k: (after[k] - before[k]) / result.events * 1e6 for k in after}
            runs.append({"raw": raw, "rate": result.rate, "seconds": result.seconds, **cpu})
        stages = await stage_costs(events, work, min(n, 200_000))
        await events.close()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {
        "bench": "rebuild",
        "events": result.events,
        "runs": len(runs),
        # Medians over the runs; the ratio is the median of each pair's own ratio.
        "rebuild_events_per_s": round(median("rate")),
        "rebuild_s": round(median("seconds"), 2),
        "raw_ordered_replay_per_s": round(median("raw")),
        "ratio_rebuild_to_raw_replay": round(
            statistics.median(r["rate"] / r["raw"] for r in runs), 3
        ),
        "per_run": [
            {"rebuild_per_s": round(r["rate"]), "raw_per_s": round(r["raw"])} for r in runs
        ],
        "bulk_reader_no_processing_per_s": round(bulk),
        # Serial, the first 200k events: what each stage costs alone.
        "stages_us_per_event": stages,
        # CPU of a rebuild by process (the reader's child counted once it exits), against
        # the machine's 2 cores: where its time goes.
        "cpu_us_per_event": {k: round(median(k), 2) for k in after},
        "fill_s": round(fill_s, 1),
        "targets": {"rebuild_events_per_s": 100_000, "ratio_rebuild_to_raw_replay": 0.5},
        "db": result.path,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="baseline and rebuild pairs")
    args = parser.parse_args()
    if args.events < 1 or args.runs < 1:
        parser.error("--events and --runs must be at least 1")
    out = asyncio.run(main(args))
    out["db_mb"] = round(os.path.getsize(str(out["db"])) / 1e6, 1)
    print(json.dumps(out))
