"""History benchmark: how an actor's start and memory grow with the length of the log.

For each history length (10k, 200k and 1M events by default; a valid synthetic history
with a few hundred live sessions at any time, bench/rebuild.py's): a fresh nats-server,
the log filled, then the scheduler, the quota actor and a dummy agent started, as
processes of their own (`fgpu scheduler`, `fgpu quota`, `fgpu agent --runtime dummy`),
all at once: first with no snapshot (a full replay; the scheduler and quota then save
theirs), then again, from the snapshots (the agent from the scheduler's). Figures: seconds
until each says it is ready, and each one's peak resident memory (VmHWM) and CPU seconds
(user and system) once ready, both times. Baseline, same run: a raw ordered replay of the
same log (nats-py, nothing done per message).

Logs longer than ``--replay-up-to`` (default 200,000) skip the start with no snapshot:
three full replays at once of 1M events take each actor a few CPU minutes, a quarter of
an hour on two cores other jobs share. The bench folds that log itself instead, as an
actor's start does (``services.actors.common.rebuild``), and saves the state as the
scheduler's and the quota's snapshots, the bytes a cold start saves
(``snapshots_folded_by_bench`` names those sizes).

Goals (issue "a cluster that lives for years"), on the start from snapshots:
`ready_s_1m` <= 1 s and `ratio_rss_1m_to_10k` <= 1.5.

The sources are byte-compiled first, as an installed fgpu is (pip compiles what it
installs): with PYTHONDONTWRITEBYTECODE set and no compiled files beside a checkout, each
actor would compile every module it imports at each start (`compile_s`, what one import
of the scheduler's modules costs from source, says how much).

Prints one JSON line. Usage: python bench/history.py [--sizes 10000,200000,1000000]
"""

import argparse
import asyncio
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rebuild import fill, raw_ordered_replay  # bench/rebuild.py, beside this file
from schedule import spawn

from services.actors.common import rebuild
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.adapters.jetstream_snapshots import JetStreamSnapshots
from services.domain.fold.state_codec import encode_actor_state

ACTORS = {
    "scheduler": ["scheduler"],
    "quota": ["quota"],
    "agent": ["agent", "--agent-id", "agent-0", "--mock-gpus", "4", "--runtime", "dummy"],
}
SAVES = ("scheduler", "quota")  # the actors that write snapshots
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("events", "services", "projections")
# What `fgpu scheduler` imports before it connects (services/cli/daemon_cmd.py's order).
_SCHEDULER_IMPORTS = (
    "import services.cli.main\n"
    "from services.adapters.nats_import import import_nats_client\n"
    "import_nats_client(websockets=False)\n"
    "import services.wiring.parts\n"
)


def compile_sources(tries: int = 3) -> float:
    """Byte-compile the packages; seconds one import of the scheduler's modules takes
    from source over what it takes compiled (each in a new process, the best of
    ``tries``)."""

    def import_s(*flags: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *flags, "-c", _SCHEDULER_IMPORTS], check=True, cwd=ROOT)
        return time.perf_counter() - t0

    for package in PACKAGES:
        for cache in (ROOT / package).rglob("__pycache__"):
            shutil.rmtree(cache)
    from_source = min(import_s("-B") for _ in range(tries))  # -B: none written
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)
    return round(from_source - min(import_s() for _ in range(tries)), 2)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user and system) the process has used: on a host loaded by other
    jobs, what its start costs whatever it waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _start(url: str, log_dir: str, size: int, run: str) -> dict[str, dict[str, float]]:
    """Every actor at once; for each, seconds to ready and peak RSS (MB) once ready. Each
    is stopped once ready and, on the cold run, once those that write snapshots saved
    one; on the other, each must have started from a snapshot."""
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    t0 = time.perf_counter()
    for name, args in ACTORS.items():
        log_name = f"{name}-{size}-{run}"
        procs[name] = (
            spawn(url, *args, log_dir=log_dir, name=log_name),
            Path(log_dir, f"{log_name}.log"),
        )
    figures: dict[str, dict[str, float]] = {}
    try:
        while len(figures) < len(procs):
            for name, (p, log) in procs.items():
                if name in figures:
                    continue
                if "ready" in log.read_text(errors="replace"):
                    figures[name] = {
                        "ready_s": round(time.perf_counter() - t0, 2),
                        "rss_mb": round(_peak_rss_mb(p.pid), 1),
                        "cpu_s": round(_cpu_s(p.pid), 2),
                    }
                elif p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode}: {log.read_text()[-2000:]}")
            await asyncio.sleep(0.02)
        deadline = time.perf_counter() + 300
        if run == "cold":
            waits = dict.fromkeys(SAVES, "snapshot.saved")
        else:
            waits = dict.fromkeys(ACTORS, "snapshot.started")
        for name, line in waits.items():
            while line not in procs[name][1].read_text(errors="replace"):
                if time.perf_counter() > deadline or procs[name][0].poll() is not None:
                    raise RuntimeError(f"{name}: no {line}")
                await asyncio.sleep(0.1)
    finally:
        for p, _ in procs.values():
            p.terminate()
        for p, _ in procs.values():
            p.wait(30)
    return figures


async def save_snapshots(events: JetStreamLog) -> int:
    """Fold the whole log as an actor's start does and save the state as the snapshot of
    each actor that writes them (what their start with no snapshot saves); its bytes."""
    state = await rebuild(events)
    data = encode_actor_state(state, await events.identity())
    for kind in SAVES:
        await JetStreamSnapshots(events.client, kind).save(data)
    return len(data)


async def measure(size: int, log_dir: str, replay_up_to: int) -> dict[str, object]:
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-history")
        await events.create_or_update_stream()
        n = await fill(events, size)
        replay_per_s = await raw_ordered_replay(events, n)
        cold = None
        if n > replay_up_to:
            await save_snapshots(events)
        await events.close()
        if n <= replay_up_to:
            cold = await _start(server.url, log_dir, size, "cold")
        actors = await _start(server.url, log_dir, size, "snapshot")
    return {
        "events": n,
        "raw_replay_s": round(n / replay_per_s, 2),
        "actors": actors,
        "actors_no_snapshot": cold,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    log_dir = tempfile.mkdtemp(prefix="fgpu-bench-history-")
    # What the actors keep (an agent's slice regions) goes there, not in ~/.fgpu.
    os.environ["FGPU_HOME"] = log_dir
    sizes = [int(x) for x in args.sizes.split(",")]
    compile_s = compile_sources()
    runs = {str(size): await measure(size, log_dir, args.replay_up_to) for size in sizes}
    first, last = runs[str(sizes[0])], runs[str(sizes[-1])]

    def worst_cold(run: dict[str, object]) -> float | None:
        cold = run["actors_no_snapshot"]
        if cold is None:
            return None
        assert isinstance(cold, dict)
        return max(float(a["ready_s"]) for a in cold.values())

    def worst(run: dict[str, object], key: str) -> float:
        actors = run["actors"]
        assert isinstance(actors, dict)
        return max(float(a[key]) for a in actors.values())

    return {
        "bench": "history",
        "runs": runs,
        f"ready_s_{_short(sizes[-1])}": worst(last, "ready_s"),
        f"cpu_s_{_short(sizes[-1])}": worst(last, "cpu_s"),
        f"cpu_s_{_short(sizes[0])}": worst(first, "cpu_s"),
        f"ratio_rss_{_short(sizes[-1])}_to_{_short(sizes[0])}": round(
            worst(last, "rss_mb") / worst(first, "rss_mb"), 2
        ),
        f"ratio_ready_{_short(sizes[-1])}_to_{_short(sizes[0])}": round(
            worst(last, "ready_s") / worst(first, "ready_s"), 2
        ),
        f"ratio_cpu_{_short(sizes[-1])}_to_{_short(sizes[0])}": round(
            worst(last, "cpu_s") / worst(first, "cpu_s"), 2
        ),
        f"ratio_ready_to_raw_replay_{_short(sizes[-1])}": round(
            worst(last, "ready_s") / float(str(last["raw_replay_s"])), 2
        ),
        f"ready_s_{_short(sizes[-1])}_no_snapshot": worst_cold(last),
        "snapshots_folded_by_bench": [s for s in sizes if s > args.replay_up_to],
        "compile_s": compile_s,
        "logs": log_dir,
    }


def _short(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,200000,1000000")
    parser.add_argument(
        "--replay-up-to",
        type=int,
        default=200_000,
        help="start with no snapshot (full replays) on logs up to this long only",
    )
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
