"""Flood benchmark: what one user publishing at its machine's full rate costs another.

The shipped shape with authentication on (``tenancy.py``'s secured cluster: gatekeeper,
intake, quota, scheduler and simulated agents, each a process). A user, ``victim``, asks
for sessions one at a time, each timed from the request handed in to RUNNING on the log:
first with the cluster quiet (the baseline, taken in the same run), then while another
user's process (``flooder``) publishes requests to its intake subject as fast as it can.
The server keeps a few of the flooder's waiting and refuses the rest at once; the intake
lets the flooder through at its key's rate and counts the rest.

Prints one JSON line: the victim's latencies (p50, p99) quiet and under the flood, their
difference, the flood's rate, and what of it reached the log (requests written, records
of drops). Usage: python bench/flood.py [--samples 20] [--agents 10]
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time

from rebuild import quantiles_ms  # bench/rebuild.py, beside this file
from schedule import Observer
from tenancy import SLOTS, Cluster, secured_cluster

from events import RequestsDropped
from services.adapters.jetstream import connect
from services.adapters.jetstream_intake import JetStreamSender
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.access.permissions import inbox

_FLOODER = """
import asyncio, json, sys, time
import nats
from events import SessionDestroyRequested, encode_many
from events import subjects as subj
from services.domain.provenance import Provenance, stamp
from services.adapters.system_clock import SystemClock

async def main(url, key, secret, per_s):
    per_s = float(per_s)
    nc = await nats.connect(url, user=key, password=secret, inbox_prefix="_INBOX." + key)
    ask = stamp(SessionDestroyRequested, Provenance(key, SystemClock().now()),
                session_id="nothing", requester=key)
    body, subject, n, t0 = encode_many([ask]), subj.intake(key), 0, time.perf_counter()
    # Each request an id of its own, so that none is a duplicate the log would drop.
    head, tail = body.split(ask.id.encode())
    print("flooding", flush=True)
    try:
        while True:
            for i in range(n, n + 1000):
                await nc.publish(subject, b"%s%032x%s" % (head, i, tail))
            n += 1000
            await nc.flush()
            if per_s > 0:  # a flood of this rate at most, else as fast as it can
                await asyncio.sleep(max(0.0, t0 + n / per_s - time.perf_counter()))
            sys.stdout.write(json.dumps({"published": n, "s": time.perf_counter() - t0}) + "\\n")
            sys.stdout.flush()
    finally:
        await nc.close()

asyncio.run(main(*sys.argv[1:5]))
"""


async def victim_latencies(c: Cluster, samples: int, observer: Observer) -> list[float]:
    """``samples`` sessions of the victim, one after another: handed in to RUNNING, ms."""
    key, secret = c.users[1]
    assert secret is not None
    log = await connect(c.url, user=key, password=secret, inbox_prefix=inbox(key))
    client = Client(log, SystemClock(), key, sender=JetStreamSender(log.client, key))
    took = []
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            [sid] = await client.create(image="fgpu/busybox:latest", slots=SLOTS)
            await observer.wait_for([sid], 60)
            took.append((observer.running[sid] - t0) * 1000)
    finally:
        await log.close()
    return took


async def main(args: argparse.Namespace) -> dict[str, object]:
    log_dir = tempfile.mkdtemp(prefix="fgpu-bench-flood-")
    async with secured_cluster(args.agents, log_dir) as c:
        observer = Observer()
        watch = asyncio.create_task(observer.follow(c.admin))
        await asyncio.sleep(1.0)  # the agents' registrations folded by the scheduler first
        quiet = await victim_latencies(c, args.samples, observer)
        before = await c.admin.last_seq()
        eve, eve_secret = c.users[0]
        assert eve_secret is not None
        flooder = subprocess.Popen(  # noqa: ASYNC220 - started once, read from a thread
            [sys.executable, "-c", _FLOODER, c.url, eve, eve_secret, str(args.flood_rate)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert flooder.stdout is not None
            await asyncio.to_thread(flooder.stdout.readline)  # connected, flooding
            await asyncio.sleep(args.warm_s)  # the flood under way before the first sample
            flooded = await victim_latencies(c, args.samples, observer)
        finally:
            flooder.terminate()
            out, _ = await asyncio.to_thread(flooder.communicate)
        watch.cancel()
        said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        published, seconds = (said[-1]["published"], said[-1]["s"]) if said else (0, 1.0)
        written = dropped = 0
        async for batch in c.admin.read(before):
            written += sum(r.subject.startswith(f"fgpu.req.{eve}.") for r in batch)
            dropped += sum(
                isinstance(r.event, RequestsDropped) and r.event.owner == eve for r in batch
            )
    q, f = quantiles_ms(quiet), quantiles_ms(flooded)
    return {
        "bench": "flood",
        "samples": args.samples,
        "quiet_p50_ms": q["p50_ms"],
        "quiet_p99_ms": q["p99_ms"],
        "flood_p50_ms": f["p50_ms"],
        "flood_p99_ms": f["p99_ms"],
        "delta_p50_ms": round(statistics.median(flooded) - statistics.median(quiet), 1),
        "ratio_p50_flood_to_quiet": round(statistics.median(flooded) / statistics.median(quiet), 3),
        "flood_rate_asked": args.flood_rate,
        "flood_published": published,
        "flood_msgs_per_s": round(published / max(seconds, 1e-9)),
        "flood_requests_written": written,
        "flood_drop_records": dropped,
        "logs": log_dir,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--warm-s", type=float, default=2.0)
    parser.add_argument(
        "--flood-rate", type=float, default=0, help="messages a second (0: as fast as it can)"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args))))
