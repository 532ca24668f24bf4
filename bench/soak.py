"""Soak benchmark: the memory of ``fgpu up`` stays flat while sessions come and go.

Starts ``fgpu up`` as a user runs it (tests/support/cli_stack.py's: a throwaway store, the read
API, tenancy; ``--runtime dummy``, or ``docker`` on the engine of ``DOCKER_HOST``:
``eval "$(scripts/docker-up)"``) with ``--users`` users of its default project. Each user,
for ``--minutes``, as fast as the stack takes it: asks for ``--batch`` CPU-only sessions
in one request, waits through the read API until each is RUNNING (or ended), destroys
each, and waits until each has ended. Every second the resident memory (VmRSS) of
``fgpu up`` and of each process under it (its nats-server) is sampled, with the count of
sessions done so far.

Prints one JSON line: the sessions done; for each process, its RSS at the start, at the
warm-up's end (``--warmup``, a share of the run) and at the end, and its slope over the
samples after the warm-up, by least squares, in MB per 10,000 sessions (goal <= 1 for
``fgpu up``); the baseline is each one's own RSS at the warm-up's end, which the end's is
given over (``ratio_end_to_warm``).

Usage: python bench/soak.py [--minutes 3] [--runtime dummy|docker] [--users 4]
[--batch 20] [--warmup 0.3]
"""

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ is no package

from events import Slots
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.cli.api_client import ReadApi
from services.cli.watch import Session, wait_for
from services.client import Client
from services.domain.request_ids import new_request_id
from services.domain.status import ENDED, SessionStatus
from services.ports import RequestsRefused
from services.wiring.identity import Identity
from tests.support.cli_stack import Stack, fgpu_up

IMAGE = "fgpu/busybox:latest"
SLOTS = Slots(cpu=10, mem=1 << 20, fgpu=0)  # 0.01 CPU, 1 MiB: the agent holds hundreds
SLEEP = ("sleep", "86400")
WAIT_S = 300.0  # one batch's wait, on a loaded host
TARGET_MB_PER_10K = 1.0
T = TypeVar("T")


@dataclass
class Samples:
    """Sessions done so far; at each sample, the time, the sessions done and each
    process's RSS (MB) by pid."""

    done: int = 0
    names: dict[int, str] = field(default_factory=dict)
    rows: list[tuple[float, int, dict[int, float]]] = field(default_factory=list)


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in children.read_text().split()]
    return found


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


async def sample(root: int, samples: Samples, every_s: float = 1.0) -> None:
    """``root``'s tree sampled into ``samples`` every ``every_s``, until cancelled."""
    t0 = time.monotonic()
    while True:
        rss = {}
        for pid in _tree(root):
            mb = _rss_mb(pid)
            if mb is not None:
                rss[pid] = mb
                samples.names.setdefault(pid, "fgpu up" if pid == root else _name(pid))
        samples.rows.append((time.monotonic() - t0, samples.done, rss))
        await asyncio.sleep(every_s)


def _running_or_ended(s: Session) -> bool:
    return s["status"] == SessionStatus.RUNNING or s["status"] in ENDED


def _ended(s: Session) -> bool:
    return s["status"] in ENDED


async def _reached(api: ReadApi, ids: list[str], reached: Callable[[Session], bool]) -> None:
    """Once each of ``ids`` has ``reached``; TimeoutError past ``WAIT_S``."""
    found = await asyncio.to_thread(wait_for, api, ids, reached, timeout_s=WAIT_S)
    late = [i for i in ids if i not in found or not reached(found[i])]
    if late:
        raise TimeoutError(f"{len(late)} of {len(ids)} sessions not there within {WAIT_S} s")


async def _taken(ask: Callable[[str], Awaitable[T]]) -> T:
    """``ask(request_id)``, asked again with the same id while the intake holds as many of
    the key's requests as it keeps waiting."""
    rid = new_request_id()
    while True:
        try:
            return await ask(rid)
        except RequestsRefused:
            await asyncio.sleep(0.2)


async def churn(
    stack: Stack, user: str, urls: tuple[str, str], batch: int, until: float, samples: Samples
) -> None:
    """``user``'s sessions asked for, run and destroyed, ``batch`` at a time, until
    ``until`` (``time.monotonic()``); ``urls``: NATS's and the read API's."""
    keys = stack.keys[user]
    key, secret = keys["FGPU_ACCESS_KEY"], keys["FGPU_SECRET_KEY"]
    api = ReadApi(urls[1], access_key=key, secret=secret)
    options = Identity(key, secret).options()
    async with nats_connection(urls[0], name=f"soak-{user}", **options) as conn:
        client = Client(conn.log, SystemClock(), key, sender=conn.sender(key), secret=secret)
        while time.monotonic() < until:
            ids = await _taken(
                lambda rid: client.create(
                    image=IMAGE,
                    slots=SLOTS,
                    command=SLEEP,
                    count=batch,
                    cpu_only=True,
                    request_id=rid,
                )
            )
            await _reached(api, ids, _running_or_ended)
            for sid in ids:
                await _taken(lambda rid, sid=sid: client.destroy(sid, request_id=rid))
            await _reached(api, ids, _ended)
            samples.done += len(ids)


def slope_mb_per_10k(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of RSS (MB) over sessions done, per 10,000 sessions."""
    xs = [float(x) for x, _ in points]
    if len(set(xs)) < 2:
        return float("nan")
    fit = statistics.linear_regression(xs, [y for _, y in points])
    return round(fit.slope * 10_000, 2)


def figures(samples: Samples, warmup: float) -> dict[str, dict[str, float]]:
    """For each process sampled: RSS at the start, at the warm-up's end and at the end,
    the slope after the warm-up, and the end's RSS over the warm-up's."""
    rows = samples.rows
    warm_t = rows[-1][0] * warmup
    after = [r for r in rows if r[0] >= warm_t]
    out: dict[str, dict[str, float]] = {}
    for pid, name in samples.names.items():
        mine = [(done, rss[pid]) for _, done, rss in rows if pid in rss]
        later = [(done, rss[pid]) for _, done, rss in after if pid in rss]
        if len(later) < 2:
            continue
        label = name if name not in out else f"{name} {pid}"
        out[label] = {
            "rss_mb_start": round(mine[0][1], 1),
            "rss_mb_warm": round(later[0][1], 1),
            "rss_mb_end": round(later[-1][1], 1),
            "slope_mb_per_10k_sessions": slope_mb_per_10k(later),
            "ratio_end_to_warm": round(later[-1][1] / later[0][1], 3),
        }
    return out


async def soak(stack: Stack, args: argparse.Namespace) -> dict[str, object]:
    assert stack.process is not None
    up = json.loads((stack.home / "up.json").read_text())
    urls = (up["nats_url"], up["api_url"])
    samples = Samples()
    sampler = asyncio.create_task(sample(stack.process.pid, samples))
    until = time.monotonic() + args.minutes * 60
    try:
        await asyncio.gather(
            *(churn(stack, u, urls, args.batch, until, samples) for u in stack.keys)
        )
        await asyncio.sleep(1)  # one more sample, at the end
    finally:
        sampler.cancel()
    warm_done = next(d for t, d, _ in samples.rows if t >= samples.rows[-1][0] * args.warmup)
    return {
        "sessions": samples.done,
        "sessions_warm": warm_done,
        "processes": figures(samples, args.warmup),
    }


def main(args: argparse.Namespace) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="fgpu-bench-soak-")) / "home"
    users = tuple(f"soak{n}" for n in range(args.users))
    dummy = args.runtime == "dummy"
    with fgpu_up(
        home,
        "--ephemeral",
        "--runtime",
        args.runtime,
        "--cpu",
        "64",
        "--mem",
        "64g",
        users=users,
        keep_containers=dummy,
    ) as stack:
        found = asyncio.run(soak(stack, args))
    processes = found["processes"]
    assert isinstance(processes, dict)
    return {
        "bench": "soak",
        "runtime": args.runtime,
        "minutes": args.minutes,
        "users": args.users,
        "batch": args.batch,
        **found,
        "slope_mb_per_10k_sessions_fgpu_up": processes["fgpu up"]["slope_mb_per_10k_sessions"],
        "target_mb_per_10k_sessions": TARGET_MB_PER_10K,
        "logs": str(home),
    }


if __name__ == "__main__":
    # The adapters' debug lines (a connection's) are no part of the one JSON line.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--runtime", choices=("dummy", "docker"), default="dummy")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--warmup", type=float, default=0.3)
    print(json.dumps(main(parser.parse_args())))
