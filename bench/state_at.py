"""Time travel benchmark: ``GET /v1/state?at=...`` on a log of 1,000,000 events.

Fills a real nats-server with the synthetic history of ``bench/rebuild.py``, rebuilds the
projections, serves the read API on them (uvicorn, a free port), then asks for the
cluster at random instants across the log over HTTP. Baseline from the same run: the
same answer computed by replaying the log from its start (the stored events folded from
sequence 1, no snapshot), which is what a snapshot saves.

Prints one JSON line. Usage: python bench/state_at.py [--events 1000000] [--queries 30]
"""

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
from rebuild import T0, fill, quantiles_ms  # bench/rebuild.py, beside this file

from projections import rebuild as rebuild_projections
from projections.replay import state_at
from projections.store import DEFAULT_SNAPSHOT_EVERY, ProjectionStore, stored_records
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.api import ReadApi, serve_read_api
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold
from services.domain.fold.state_codec import live_sessions


def replay_from_start(path: Path, seq: int) -> tuple[float, int]:
    """Seconds to fold the stored events 1..seq with no snapshot; sessions alive then."""
    store = ProjectionStore(path)
    try:
        t0 = time.perf_counter()
        state = fold(stored_records(store.con, 0, seq), ClusterState())
        seconds = time.perf_counter() - t0
        with closing(store.cursor()) as cursor:
            past = state_at(cursor, seq)
    finally:
        store.close()
    live = len(live_sessions(state))
    assert live == len(live_sessions(past.state))
    return seconds, live


async def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-state-"))
    db = work / "projections.duckdb"
    rng = random.Random(3)
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-state")
        await events.create_or_update_stream()
        n = await fill(events, args.events)
        built = await rebuild_projections(events, db)
        replay_s, live = await anyio.to_thread.run_sync(replay_from_start, db, n)
        latencies: list[float] = []
        sizes: list[int] = []
        async with anyio.create_task_group() as tg:
            api: ReadApi = await tg.start(serve_read_api, events, db)
            async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
                await http.get("/v1/state", params={"seq": 1})  # warm up
                for _ in range(args.queries):
                    # Event k happened at T0 + k ms (see synthetic_log).
                    at = T0 + timedelta(milliseconds=rng.randrange(n))
                    t0 = time.perf_counter()
                    r = await http.get("/v1/state", params={"at": at.isoformat()})
                    latencies.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
                    sizes.append(len(r.content))
            tg.cancel_scope.cancel()
        await events.close()
    return {
        "bench": "state_at",
        "events": n,
        "queries": len(latencies),
        **quantiles_ms(latencies, digits=1),
        "mean_response_kb": round(statistics.mean(sizes) / 1024, 1),
        "baseline_replay_from_start_s": round(replay_s, 2),
        "sessions_alive_at_end": live,
        "snapshot_every": DEFAULT_SNAPSHOT_EVERY,
        "rebuild_s": round(built.seconds, 1),
        "target_ms": 1000,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=30)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
