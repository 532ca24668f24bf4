"""CLI benchmark: a read costs the same whatever the length of history, and starts fast.

Fills two real nats-servers with the rebuild bench's synthetic history, 10,000 and
1,000,000 events (the same few hundred sessions alive at any time), runs ``fgpu api``
(the projector and the read API) over each, and times ``fgpu session ls --json`` and
``fgpu session info ID --json`` as separate processes, as a user runs them. In the same
run, ``python -c pass`` is the start-up baseline for ``fgpu version``, a call that does
nothing but start. Every figure is the median of ``--runs`` processes. Prints one JSON
line. Usage: python bench/cli.py [--small 10000] [--large 1000000] [--runs 15]
"""

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rebuild import fill

from services.adapters import nats_server
from services.adapters.jetstream import connect

FGPU = str(Path(sys.executable).parent / "fgpu")


def timed_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    """The median wall time of ``argv`` as a new process, in ms; fails if it fails."""
    spent = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
        spent.append((time.perf_counter() - t0) * 1000)
    return statistics.median(spent)


async def filled(url: str, events: int) -> int:
    log = await connect(url, name="bench-cli")
    try:
        await log.create_or_update_stream()
        return await fill(log, events)
    finally:
        await log.close()


@contextmanager
def read_api(nats_url: str, home: Path) -> Iterator[str]:
    """``fgpu api`` over ``nats_url``, caught up with the log; its URL."""
    env = {**os.environ, "FGPU_HOME": str(home)}
    log = home / "api.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [FGPU, "--nats", nats_url, "api", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 600
        while "ready" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fgpu api did not get ready:\n{log.read_text()}")
            time.sleep(0.1)
        found = re.search(r"read API (http://\S+)/v1", log.read_text())
        assert found is not None
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(30)


def reads(nats_url: str, events: int, runs: int, work: Path) -> dict[str, float]:
    """Milliseconds of ``session ls`` and ``session info`` over a log of ``events``."""
    home = work / f"home-{events}"
    home.mkdir()
    with read_api(nats_url, home) as api:
        env = {**os.environ, "FGPU_API": api, "FGPU_HOME": str(home)}
        listed = subprocess.run(
            [FGPU, "session", "ls", "--json"], env=env, capture_output=True, check=True
        )
        page = json.loads(listed.stdout)
        some = page["sessions"][0]["id"]
        return {
            "ls_ms": timed_ms([FGPU, "session", "ls", "--json"], env, runs),
            "info_ms": timed_ms([FGPU, "session", "info", some, "--json"], env, runs),
            "listed": len(page["sessions"]),
        }


def main(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="fgpu-bench-cli-"))
    env = dict(os.environ)
    python_ms = timed_ms([sys.executable, "-c", "pass"], env, args.runs)
    startup_ms = timed_ms([FGPU, "version"], env, args.runs)
    sizes: dict[int, dict[str, float]] = {}
    for events in (args.small, args.large):
        with nats_server.nats_server() as server:
            asyncio.run(filled(server.url, events))
            sizes[events] = reads(server.url, events, args.runs, work)
    small, large = sizes[args.small], sizes[args.large]
    return {
        "bench": "cli",
        "runs": args.runs,
        "events": [args.small, args.large],
        "ls_ms_10k": round(small["ls_ms"], 1),
        "ls_ms_1m": round(large["ls_ms"], 1),
        "ratio_ls_1m_to_10k": round(large["ls_ms"] / small["ls_ms"], 2),
        "info_ms_10k": round(small["info_ms"], 1),
        "info_ms_1m": round(large["info_ms"], 1),
        "sessions_listed": [int(small["listed"]), int(large["listed"])],
        "startup_ms": round(startup_ms, 1),
        "python_startup_ms": round(python_ms, 1),
        "ratio_startup_to_python": round(startup_ms / python_ms, 2),
        # A real read (an HTTP round trip and its JSON) against the same baseline.
        "ratio_ls_to_python": round(small["ls_ms"] / python_ms, 2),
        "targets": {"ratio_ls_1m_to_10k": 1.5, "ratio_startup_to_python": 6},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if min(args.small, args.large, args.runs) < 1:
        parser.error("--small, --large and --runs must be at least 1")
    print(json.dumps(main(args)))
