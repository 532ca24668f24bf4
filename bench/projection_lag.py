"""Projection lag: an event published, to the same event visible in the read API.

A real nats-server; the projector and the read API in a process of their own (as in
``fgpu up``); in this process a publisher appends the synthetic history of
``bench/rebuild.py`` at a steady rate (1,000 events per second by default); a client of
the API's event stream (server-sent events, read from the DuckDB projections), in a
process of its own so that publishing never delays it, notes when each sequence arrives;
and, as the baseline of the same run, a plain core-NATS subscriber notes when each
message reaches it straight from the server. Times are ``time.perf_counter()``, the
machine's monotonic clock on Linux, the same in every process.

Prints one JSON line. Usage: python bench/projection_lag.py [--rate 1000] [--seconds 20]
"""

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.aio.msg import Msg
from rebuild import quantiles_ms, synthetic_log  # bench/rebuild.py, beside this file

from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import connect

SERVER = """
import sys, anyio
from services.adapters.jetstream import connect
from services.api import serve_read_api

async def main():
    events = await connect(sys.argv[1], name="bench-api")
    async with anyio.create_task_group() as tg:
        api = await tg.start(serve_read_api, events, sys.argv[2])
        print("ready", api.url, flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


LISTENER = """
import json, sys, time, httpx
url, expect, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
seen = {}
# A stalled stream ends the read (the server sends a keep-alive every 15 s).
with httpx.Client(base_url=url, timeout=httpx.Timeout(30.0)) as http:
    with http.stream("GET", "/v1/events/stream") as r:
        deadline = None
        try:
            for line in r.iter_lines():
                if line.startswith("retry:"):
                    print("ready", flush=True)
                    deadline = time.perf_counter() + limit
                elif line.startswith("id: "):
                    seen[int(line[4:])] = time.perf_counter()
                    if len(seen) >= expect or time.perf_counter() > deadline:
                        break
        except httpx.ReadTimeout:
            pass
print(json.dumps(seen), flush=True)
"""


async def measure(nats_url: str, url: str, args: argparse.Namespace) -> dict[str, object]:
    events = await connect(nats_url, name="bench-publisher")
    raw = await nats.connect(nats_url, name="bench-baseline")
    direct: list[float] = []

    async def on_msg(msg: Msg) -> None:
        direct.append(time.perf_counter())

    await raw.subscribe(subj.STREAM_WILDCARD, cb=on_msg)
    await raw.flush()
    total = args.rate * args.seconds
    listener = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LISTENER,
        url,
        str(total),
        str(args.seconds + 60),
        stdout=asyncio.subprocess.PIPE,
    )
    assert listener.stdout is not None
    if (await listener.stdout.readline()).strip() != b"ready":
        raise RuntimeError("the event stream's client did not start")
    sent: dict[int, float] = {}
    order: list[float] = []
    interval = 1.0 / args.rate
    next_at = time.perf_counter()
    for subject, payload in synthetic_log(total):
        now = time.perf_counter()
        if next_at > now:
            await asyncio.sleep(next_at - now)
        next_at += interval
        t = time.perf_counter()
        ack = await events.js.publish(subject, payload)
        sent[ack.seq] = t
        order.append(t)
    try:
        out, _ = await asyncio.wait_for(listener.communicate(), timeout=args.seconds + 90)
    finally:
        if listener.returncode is None:
            listener.kill()
    seen = {int(seq): t for seq, t in json.loads(out).items()}
    await raw.close()
    await events.close()
    lag = [(seen[s] - t) * 1000 for s, t in sent.items() if s in seen]
    base = [(r - t) * 1000 for t, r in zip(order, direct, strict=False)]
    return {
        "bench": "projection_lag",
        "rate_per_s": args.rate,
        "events": len(sent),
        "visible": len(lag),
        **quantiles_ms(lag),
        "baseline_core_nats_delivery": quantiles_ms(base),
        "path": "publish -> JetStream -> ordered consumer -> DuckDB transaction -> SSE client",
        "client": "a process of its own",
        "target_p99_ms": 100,
    }


async def create_stream(nats_url: str) -> None:
    events = await connect(nats_url, name="bench-admin")
    try:
        await events.create_or_update_stream()
    finally:
        await events.close()


def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-lag-"))
    with nats_server.nats_server() as server:
        asyncio.run(create_stream(server.url))
        api = subprocess.Popen(
            [sys.executable, "-c", SERVER, server.url, str(work / "projections.duckdb")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert api.stdout is not None
            line = api.stdout.readline()
            if not line.startswith("ready "):
                raise RuntimeError(f"the API did not start: {line!r}")
            return asyncio.run(measure(server.url, line.split()[1], args))
        finally:
            api.terminate()
            api.wait(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    print(json.dumps(main(parser.parse_args())))
