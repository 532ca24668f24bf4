"""Serving benchmark: requests through the proxy (HAProxy, as the router drives it) against
the same requests straight to the replica, in the same run.

The replica is a local process of the tiny model server (``services/model_server.py``,
``GET /predict?x=...``), not a container: the engine here has no network to reach one
from the host (``"replicas"`` in the line says so). The route is token-only, so each
request through the proxy is hashed and looked up as in production. The load generator
is aiohttp on loopback, keep-alive connections both ways.

- **Closed loop**: ``--concurrency`` workers each send a request as soon as the last one
  answered, for ``--seconds``, in rounds alternating direct and proxied (which goes
  first alternates): requests per second each way, ``ratio_proxy_to_direct`` of the
  medians (goal >= 0.9).
- **Fixed rate**: ``--rate`` requests a second each way (open loop, each timed from when
  it was due, so a stall counts), the two ways interleaved request by request so the
  host's load falls on both alike: p50 and p99 each way, ``added_p99_ms`` (goal <= 2 ms
  at a rate the direct path holds: ``rate_held`` says whether the generator kept up).

- **Cold start** (scale from zero, the proxy's part): a request to a route with no
  replica and a cold start, and at the same moment a replica process spawned; once it
  answers its health (asked straight), it goes into the table. ``cold_start_ms`` is the
  request's wait, ``replica_start_ms`` the replica's own start, ``cold_start_added_ms``
  the difference: HAProxy's runtime change and its Lua wait noticing it. The log's hops
  (the health event, the fold, the router) are not in it.

- **Scale-up reaction and cold start through the whole loop** (log, serving actor,
  scheduler, agent, router, HAProxy; ``bench/serve_scaling.py``): ``scale_up_ms`` from a
  step in load to the new replica's first answer and ``cold_start_loop_ms`` from a
  request at zero replicas to its answer, each against the new replica's own start
  (``*_added_ms``; goal for the scale-up: at most 1,000 ms).

The host's load average is in the line: these are shared 2-core machines.

Prints one JSON line. Usage: python bench/serve.py [--seconds 2] [--rounds 5]
[--concurrency 8] [--rate 100] [--cold-starts 3] [--scale-tries 3]
"""

import argparse
import asyncio
import hashlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import msgspec
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serve_scaling import scaling
from services.adapters.haproxy_proxy import HaproxyProxy, find_haproxy, haproxy_proxy
from services.domain.serving.route_table import Backend, Route, RouteTable
from tests.support.model_servers import model_servers

TOKEN = "bench-token"
PATH = "/predict?x=1,2,3,4"


async def closed_loop(url: str, headers: dict[str, str], concurrency: int, seconds: float) -> float:
    """Requests per second with ``concurrency`` workers for ``seconds``."""
    done = 0
    stop = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                async with session.get(url) as response:
                    await response.read()
                    assert response.status == 200, response.status
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - started)


async def fixed_rate(
    ways: dict[str, tuple[str, dict[str, str]]], rate: float, seconds: float
) -> tuple[dict[str, list[float]], bool]:
    """Requests to every way in turn, each way at ``rate`` a second (open loop): each
    one's latency in ms from when it was due, by way, and whether the rate was held (99 %
    of the requests started within 10 ms of their time). Interleaved request by request,
    so the host's load falls on both ways alike."""
    latencies: dict[str, list[float]] = {way: [] for way in ways}
    late = 0
    n = int(rate * seconds) * len(ways)
    order = list(ways)
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int, due: float) -> None:
            nonlocal late
            way = order[i % len(order)]
            url, headers = ways[way]
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            late += time.perf_counter() - due > 0.010
            async with session.get(url, headers=headers) as response:
                await response.read()
                assert response.status == 200, response.status
            latencies[way].append((time.perf_counter() - due) * 1000)

        start = time.perf_counter() + 0.05
        step = 1 / (rate * len(ways))
        await asyncio.gather(*(one(i, start + i * step) for i in range(n)))
    return latencies, late <= n * 0.01


async def cold_start(proxy: HaproxyProxy, tries: int) -> dict[str, float]:
    """From a request to an endpoint with no replica until its answer, against the
    replica's own start (its process spawned until its ``/health`` answers 200); the
    replica goes into the table as soon as it answers, as the router's health report
    would put it there less the log's hops. Medians over ``tries``, in ms."""
    cold = Route(endpoint_id="ep-cold", name="cold", path_prefix="/e/cold/", public=True)
    cold = msgspec.structs.replace(cold, cold_start_s=30.0)
    host, port = proxy.address
    total, own = [], []
    for _ in range(tries):
        await proxy.apply(RouteTable(routes=(cold,)))
        with ExitStack() as stack:
            async with aiohttp.ClientSession() as session:
                waited, started = await asyncio.gather(
                    _timed_get(session, f"http://{host}:{port}/e/cold{PATH}"),
                    _bring_replica(proxy, cold, session, stack),
                )
        total.append(waited)
        own.append(started)
    return {
        "cold_start_ms": round(statistics.median(total), 1),
        "replica_start_ms": round(statistics.median(own), 1),
        "cold_start_added_ms": round(statistics.median(total) - statistics.median(own), 1),
    }


async def _timed_get(session: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with session.get(url) as response:
        assert response.status == 200, response.status
    return (time.perf_counter() - started) * 1000


async def _bring_replica(
    proxy: HaproxyProxy, route: Route, session: aiohttp.ClientSession, stack: ExitStack
) -> float:
    """Start a replica, wait for its health (asked straight), put it in ``route``: its
    own start in ms."""
    started = time.perf_counter()
    (replica,) = await asyncio.to_thread(stack.enter_context, model_servers(1))
    while True:
        async with session.get(f"http://{replica[0]}:{replica[1]}/health") as response:
            if response.status == 200:
                break
    own = (time.perf_counter() - started) * 1000
    backend = Backend(session_id=f"cold-{replica[1]}", host=replica[0], port=replica[1])
    await proxy.apply(RouteTable(routes=(msgspec.structs.replace(route, backends=(backend,)),)))
    return own


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def main(args: argparse.Namespace) -> dict[str, object]:
    with model_servers(1) as (replica,):
        async with haproxy_proxy() as proxy:
            route = Route(
                endpoint_id="ep-bench",
                name="bench",
                path_prefix="/e/bench/",
                token_sha256=frozenset({hashlib.sha256(TOKEN.encode()).hexdigest()}),
                backends=(Backend(session_id="r1", host=replica[0], port=replica[1]),),
            )
            await proxy.apply(RouteTable(routes=(route,)))
            host, port = proxy.address
            ways = {
                "direct": (f"http://{replica[0]}:{replica[1]}{PATH}", {}),
                "proxy": (
                    f"http://{host}:{port}/e/bench{PATH}",
                    {"Authorization": f"Bearer {TOKEN}"},
                ),
            }
            await closed_loop(*ways["proxy"], args.concurrency, 0.5)  # warm both paths
            await closed_loop(*ways["direct"], args.concurrency, 0.5)
            rps: dict[str, list[float]] = {"direct": [], "proxy": []}
            for i in range(args.rounds):
                order = ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")
                for way in order:
                    rps[way].append(await closed_loop(*ways[way], args.concurrency, args.seconds))
            lat, held = await fixed_rate(ways, args.rate, args.seconds * args.rounds)
            served = (await proxy.stats())["ep-bench"].requests_total
            cold = await cold_start(proxy, args.cold_starts)
    async with haproxy_proxy() as proxy:
        scaled = await scaling(proxy, args.scale_tries)
    said = await asyncio.to_thread(subprocess.run, [find_haproxy(), "-v"], capture_output=True)
    version = said.stdout.decode().split("\n")[0]
    direct_rps, proxy_rps = statistics.median(rps["direct"]), statistics.median(rps["proxy"])
    p99 = {way: quantile(lat[way], 0.99) for way in lat}
    return {
        "bench": "serve",
        "replicas": "1 local process of services/model_server.py (not a container: the"
        " engine here has no network the host reaches)",
        "proxy": version,
        "concurrency": args.concurrency,
        "closed_loop_rps": {"direct": round(direct_rps), "proxy": round(proxy_rps)},
        "ratio_proxy_to_direct": round(proxy_rps / direct_rps, 3),
        "rate": args.rate,
        "rate_held": held,
        "p50_ms": {way: quantile(lat[way], 0.5) for way in lat},
        "p99_ms": p99,
        "added_p99_ms": round(p99["proxy"] - p99["direct"], 3),
        "requests_through_proxy": served,
        **cold,
        **scaled,
        "goals": {
            "ratio_proxy_to_direct": ">= 0.9",
            "added_p99_ms": "<= 2",
            "scale_up_added_ms": "<= 1000",
        },
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    # The actors' and the router's info lines would mix into the one line printed.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--scale-tries", type=int, default=3)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
