"""``fgpu sim replay``: a cluster trace replayed through the scheduler (no server needed)."""

from pathlib import Path
from typing import Annotated

import typer

from services.cli.options import fail, out, print_json

__all__ = ["replay"]


def replay(
    nodes: Annotated[
        Path, typer.Option(help="The node list (CSV: sn, cpu_milli, memory_mib, gpu, model).")
    ],
    pods: Annotated[
        Path,
        typer.Option(
            help="The task list (CSV: name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec])."
        ),
    ],
    seed: Annotated[int, typer.Option(help="The shuffle's and the copies' seed.")] = 42,
    policy: Annotated[str, typer.Option(help="The placement policy.")] = "best-fit",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Replay a trace with the fragmentation protocol (Weng et al., ATC '23) through the
    scheduler and POLICY: nodes as dummy-runtime agents, tasks as sessions arriving one by
    one, a pending timeout of 0 (a task that does not fit fails). Prints the unallocated
    GPU % at 90, 100 and 130 % of the cluster's GPUs arrived."""
    from services.domain.placement import POLICY_NAMES
    from services.domain.trace import TraceError, parse_nodes, parse_tasks
    from services.sim.replay import report

    if policy not in POLICY_NAMES:
        fail(f"no placement policy {policy!r}; there are {', '.join(POLICY_NAMES)}")
    try:
        node_list = parse_nodes(nodes.read_text())
        task_list = parse_tasks(pods.read_text())
    except OSError as e:
        fail(f"cannot read the trace: {e}")
    except TraceError as e:
        fail(str(e))
    result = report(node_list, task_list, seed, policy)
    if as_json:
        print_json(result)
        return
    pct = result["unallocated_gpu_pct"]
    out().print(
        f"{policy}, seed {seed}: {result['placed']} of {result['tasks']} tasks placed on "
        f"{result['nodes']} nodes ({result['gpus']} GPUs)"
    )
    for level in ("90", "100", "130"):
        out().print(f"unallocated GPU at {level}% arrived: {pct[level]:.2f}%")
