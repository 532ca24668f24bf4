"""Serving benchmark: requests through the proxy (HAProxy, as the router drives it) against
the same requests straight to the replica, in the same run.

The replicas are local processes of the tiny model server (``services/model_server.py``,
``GET /predict?x=...``), not containers: the engine here has no network to reach one
from the host (``"replicas"`` in the line says so). The issue's baseline is "directly to
a replica's container": so ``proxy`` is a token-only route to that one replica, and
``proxy_n`` (a route to it and a second one) is an extra figure, never the ratio's.
``answered_by`` says which replicas each way's answers came from. Each request through
the proxy is hashed and looked up as in production. The load generator is
``bench/serve_load.py`` (keep-alive connections, one request encoded once); its own
ceiling against a server that does nothing (``generator_ceiling_rps``) is measured in
the same run: a direct rate near it says the generator, not the path, is the limit.

- **Closed loop**: ``--concurrency`` connections, each sending a request as soon as the
  last one answered, for ``--seconds``; ``--rounds`` rounds of direct and proxy back to
  back, which goes first by turns, then ``proxy_n``. Each round's ratio is in
  ``closed_loop.pairs``; ``ratio_proxy_to_direct`` is their median (goal >= 0.9).
- **Fixed rate**: ``--rate`` requests a second (open loop, each timed from when it was
  due, so a stall counts), in rounds of direct and proxy back to back as above; each
  round's p99 each way in ``fixed_rate.p99_pairs``; ``added_p99_ms`` is the median of
  their differences (goal <= 2 ms at a rate the direct path holds: ``rate_held`` says
  the generator sent 99 % of the requests within ``HELD_MS`` of their time).

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
[--concurrency 8] [--rate 200] [--cold-starts 3] [--scale-tries 3]
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

from bench.serve_load import Segment, Target, ceiling, closed_loop, fixed_rate
from bench.serve_scaling import scaling
from services.adapters.haproxy_proxy import HaproxyProxy, find_haproxy, haproxy_proxy
from services.domain.serving.route_table import Backend, Route, RouteTable
from tests.support.model_servers import model_servers

TOKEN = "bench-token"
PATH = "/predict?x=1,2,3,4"
HELD_MS = 5.0  # the generator kept the rate: 99 % of requests sent within this of their time


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


def _route(name: str, replicas: list[tuple[str, int]]) -> Route:
    """A token-only route to ``replicas``, as the router would apply it."""
    backends = tuple(Backend(session_id=f"{name}-{p}", host=h, port=p) for h, p in replicas)
    return Route(
        endpoint_id=f"ep-{name}",
        name=name,
        path_prefix=f"/e/{name}/",
        token_sha256=frozenset({hashlib.sha256(TOKEN.encode()).hexdigest()}),
        backends=backends,
    )


async def _answered_by(url: str, headers: dict[str, str], n: int = 20) -> list[str]:
    """Which replicas (their ``model`` name) answer ``n`` requests to ``url``."""
    seen = set()
    async with aiohttp.ClientSession(headers=headers) as session:
        for _ in range(n):
            async with session.get(url) as response:
                seen.add((await response.json(content_type=None))["model"])
    return sorted(seen)


async def _closed_pairs(ways: dict[str, Target], args: argparse.Namespace) -> dict[str, object]:
    """Closed-loop rounds: direct and proxy back to back (which goes first by turns), then
    proxy to N replicas; each round's ratios, and their medians."""
    rounds = []
    for i in range(args.rounds):
        order = ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")
        rps = {}
        for way in (*order, "proxy_n"):
            rps[way] = await closed_loop(ways[way], args.concurrency, args.seconds)
        rounds.append(rps)
    ratio = [r["proxy"] / r["direct"] for r in rounds]
    ratio_n = [r["proxy_n"] / r["direct"] for r in rounds]
    return {
        "rps": {w: round(statistics.median(r[w] for r in rounds)) for w in rounds[0]},
        "pairs": [
            [round(r["direct"]), round(r["proxy"]), round(q, 3)]
            for r, q in zip(rounds, ratio, strict=True)
        ],
        "ratio_proxy_to_direct": round(statistics.median(ratio), 3),
        "ratio_proxy_n_to_direct": round(statistics.median(ratio_n), 3),
    }


async def _fixed_pairs(ways: dict[str, Target], args: argparse.Namespace) -> dict[str, object]:
    """Fixed-rate rounds, direct and proxy back to back (which goes first by turns): each
    round's p99 each way and their difference; the median difference, the pooled p50 and
    p99, and how late the generator sent (its own part of every latency)."""
    pooled: dict[str, Segment] = {"direct": Segment(), "proxy": Segment()}
    pairs = []
    for i in range(args.rounds):
        order = ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")
        p99 = {}
        for way in order:
            seg = await fixed_rate(ways[way], args.rate, args.seconds)
            p99[way] = quantile(seg.latency_ms, 0.99)
            pooled[way].latency_ms.extend(seg.latency_ms)
            pooled[way].late_ms.extend(seg.late_ms)
        pairs.append([p99["direct"], p99["proxy"], round(p99["proxy"] - p99["direct"], 3)])
    late = {w: quantile(s.late_ms, 0.99) for w, s in pooled.items()}
    return {
        "rate": args.rate,
        "p99_pairs": pairs,
        "added_p99_ms": round(statistics.median(p[2] for p in pairs), 3),
        "p50_ms": {w: quantile(s.latency_ms, 0.5) for w, s in pooled.items()},
        "p99_ms": {w: quantile(s.latency_ms, 0.99) for w, s in pooled.items()},
        "generator_late_p99_ms": late,
        "rate_held": max(late.values()) <= HELD_MS,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    generator = await ceiling(args.concurrency, args.seconds)
    with model_servers(1, MODEL_NAME="r1") as (one,), model_servers(1, MODEL_NAME="r2") as (two,):
        async with haproxy_proxy() as proxy:
            await proxy.apply(RouteTable(routes=(_route("bench", [one]), _route("n", [one, two]))))
            host, port = proxy.address
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            ways = {
                "direct": Target.get(*one, PATH, {}),
                "proxy": Target.get(host, port, f"/e/bench{PATH}", bearer),
                "proxy_n": Target.get(host, port, f"/e/n{PATH}", bearer),
            }
            seen = {
                w: await _answered_by(
                    f"http://{t.host}:{t.port}{t.request.split()[1].decode()}", bearer
                )
                for w, t in ways.items()
            }
            for target in ways.values():  # warm every path
                await closed_loop(target, args.concurrency, 0.5)
            closed = await _closed_pairs(ways, args)
            fixed = await _fixed_pairs(ways, args)
            served = (await proxy.stats())["ep-bench"].requests_total
            cold = await cold_start(proxy, args.cold_starts)
    async with haproxy_proxy() as proxy:
        scaled = await scaling(proxy, args.scale_tries)
    said = await asyncio.to_thread(subprocess.run, [find_haproxy(), "-v"], capture_output=True)
    return {
        "bench": "serve",
        "replicas": "local processes of services/model_server.py (not containers: the"
        " engine here has no network the host reaches)",
        "answered_by": seen,
        "proxy": said.stdout.decode().split("\n")[0],
        "concurrency": args.concurrency,
        "generator_ceiling_rps": round(generator),
        "direct_share_of_ceiling": round(closed["rps"]["direct"] / generator, 3),  # type: ignore[index]
        "ratio_proxy_to_direct": closed["ratio_proxy_to_direct"],
        "added_p99_ms": fixed["added_p99_ms"],
        "closed_loop": closed,
        "fixed_rate": fixed,
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
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument("--scale-tries", type=int, default=3)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
