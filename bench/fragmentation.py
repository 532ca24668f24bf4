"""Fragmentation benchmark: every placement policy on every openb trace, with the protocol
of Weng et al., "Beware of Fragmentation" (USENIX ATC '23), against their published table.

For each task list ``openb_pod_list_*.csv`` beside the node list in ``--traces`` (default
``../shared/traces/openb`` relative to the repository), each policy and each seed of
``--seeds`` (42-51): the trace replayed through the scheduler's own fold and ``decide``
(``services.sim.replay.report``, what ``fgpu sim replay`` runs), and the unallocated GPU %
at 100 % arrived noted. Prints one JSON line: per trace and policy the mean over the
seeds, the spread (max - min), and the published figures for that trace (FGD and, on the
default trace, the other policies of the paper). Runs ``--jobs`` replays at a time
(default: one per CPU). Usage: python bench/fragmentation.py [--traces DIR] [--seeds 42-51]
[--policies a,b] [--jobs N]
"""

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from statistics import mean

from services.domain.scheduling.placement import POLICY_NAMES
from services.domain.trace import parse_nodes, parse_tasks
from services.sim.replay import report

ROOT = Path(__file__).resolve().parents[1]
NODES = "openb_node_list_gpu_node.csv"
PODS = "openb_pod_list_"
# Unallocated GPU % at 100 % arrived, mean of seeds 42-51, from the paper's simulator
# (../shared/reference/fragmentation.md): FGD on every trace, the rest on the default one.
PUBLISHED = {
    "default": {
        "random": 13.70,
        "dotprod": 9.38,
        "gpu-clustering": 8.35,
        "gpu-packing": 8.22,
        "best-fit": 7.14,
        "fgd": 4.77,
    },
    "gpushare40": {"fgd": 6.04},
    "multigpu20": {"fgd": 4.47},
    "gpuspec10": {"fgd": 5.34},
}


def _seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def _one(job: tuple[Path, Path, str, int]) -> tuple[str, str, int, float, float]:
    nodes_path, pods_path, policy, seed = job
    nodes = parse_nodes(nodes_path.read_text())
    tasks = parse_tasks(pods_path.read_text())
    t0 = time.perf_counter()
    result = report(nodes, tasks, seed, policy)
    trace = pods_path.stem.removeprefix(PODS)
    return trace, policy, seed, result["unallocated_gpu_pct"]["100"], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared/traces/openb")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--policies", default=",".join(POLICY_NAMES))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    nodes = args.traces / NODES
    traces = sorted(args.traces.glob(f"{PODS}*.csv"))
    policies = args.policies.split(",")
    jobs = [
        (nodes, p, policy, seed)
        for p in traces
        for policy in policies
        for seed in _seeds(args.seeds)
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(_one, jobs))
    figures: dict[str, dict[str, list[float]]] = {}
    seconds: list[float] = []
    for trace, policy, _, unallocated, took in done:
        figures.setdefault(trace, {}).setdefault(policy, []).append(unallocated)
        seconds.append(took)
    out = {
        "bench": "fragmentation",
        "metric": "unallocated GPU % at 100% arrived, mean over seeds",
        "seeds": args.seeds,
        "mean": {t: {p: round(mean(v), 2) for p, v in ps.items()} for t, ps in figures.items()},
        "spread": {
            t: {p: round(max(v) - min(v), 2) for p, v in ps.items()} for t, ps in figures.items()
        },
        "published": {t: PUBLISHED.get(t, {}) for t in figures},
        "replay_s_mean": round(mean(seconds), 1) if seconds else 0.0,
        "wall_s": round(time.perf_counter() - t0, 1),
        "jobs": args.jobs,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
