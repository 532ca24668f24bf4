"""``fgpu sim ...``: ``agents`` (simulated agents on a cluster: ``daemon_cmd.sim_agents``),
``replay`` (a cluster trace replayed through the scheduler, no server needed) and
``whatif`` (the cluster's own log replayed under another policy)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.daemon_cmd import sim_agents
from services.cli.options import (
    connection,
    default_archive_dir,
    fail,
    out,
    print_json,
    run_async,
    warn,
)
from services.cli.render import timed_table

if TYPE_CHECKING:
    from datetime import datetime

    from services.cli.options import Settings

__all__ = ["app"]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

app = typer.Typer(help="Simulation at scale with the dummy runtime (never the default).")
app.command("agents")(sim_agents)


@app.command("replay")
def replay(
    nodes: Annotated[
        Path, typer.Option(help="The node list (CSV: sn, cpu_milli, memory_mib, gpu, model).")
    ],
    pods: Annotated[
        Path,
        typer.Option(
            help="The task list (CSV: name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]"
            "[, creation_time, deletion_time, scheduled_time])."
        ),
    ],
    seed: Annotated[int, typer.Option(help="The shuffle's and the copies' seed.")] = 42,
    policy: Annotated[
        str, typer.Option(help="The placement policy (with --timed, several: a,b,c).")
    ] = "best-fit",
    timed: Annotated[
        bool,
        typer.Option(
            "--timed",
            help="Replay in time: tasks come at their creation time and leave after the "
            "time they ran, waiting in the queue while nothing fits (a virtual clock).",
        ),
    ] = False,
    load: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="With --timed: creation times divided by LOAD, each task running as long: "
            "LOAD times the trace's load.",
        ),
    ] = 1.0,
    samples: Annotated[
        int, typer.Option(min=1, max=10_000, help="With --timed: points of the curve.")
    ] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Replay a trace with the fragmentation protocol (Weng et al., ATC '23) through the
    scheduler and POLICY: nodes as dummy-runtime agents, tasks as sessions arriving one by
    one, a pending timeout of 0 (a task that does not fit fails). Prints the unallocated
    GPU % at 90, 100 and 130 % of the cluster's GPUs arrived.

    With --timed, in the trace's own time instead: queue waits (p50, p99) and the GPUs'
    allocated share over time, per policy. Anyone may run it: it reads files only."""
    from services.domain.scheduling.placement import POLICY_NAMES
    from services.domain.trace import TraceError, parse_nodes, parse_tasks, parse_timings

    policies = [p.strip() for p in policy.split(",")] if timed else [policy]
    for name in policies:
        if name not in POLICY_NAMES:
            fail(f"no placement policy {name!r}; there are {', '.join(POLICY_NAMES)}")
    if not timed and load != 1.0:
        fail("--load goes with --timed")
    try:
        node_list = parse_nodes(nodes.read_text())
        text = pods.read_text()
        task_list = parse_tasks(text)
        timings = parse_timings(text) if timed else []
    except OSError as e:
        fail(f"cannot read the trace: {e}")
    except TraceError as e:
        fail(f"{e}{' (--timed needs them)' if timed and 'no column' in str(e) else ''}")
    if timed:
        _timed(node_list, task_list, timings, policies, load, samples, as_json)
    else:
        _protocol(node_list, task_list, seed, policy, as_json)


def _protocol(nodes: Any, tasks: Any, seed: int, policy: str, as_json: bool) -> None:
    from services.sim.replay import report

    result = report(nodes, tasks, seed, policy)
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


def _timed(
    nodes: Any,
    tasks: Any,
    timings: Any,
    policies: list[str],
    load: float,
    samples: int,
    as_json: bool,
) -> None:
    from services.sim.replay import timed_report

    result = timed_report(nodes, tasks, timings, policies, load=load, samples=samples)
    if as_json:
        print_json(result)
        return
    out().print(
        f"{result['tasks']} tasks at {load:g} x the trace's load on {result['nodes']} nodes "
        f"({result['gpus']} GPUs), over {result['span_s']:,.0f} s"
    )
    out().print(timed_table(result["policies"]))


@app.command("whatif")
def whatif(
    ctx: typer.Context,
    group: Annotated[str, typer.Option(help="The resource group.")],
    policy: Annotated[str, typer.Option(help="The placement policy to replay it under.")],
    since: Annotated[
        str | None,
        typer.Option(help="Sessions asked for from this instant (ISO 8601, UTC if no offset)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="... up to this one (default: the log's latest event).")
    ] = None,
    samples: Annotated[
        int, typer.Option(min=1, max=10_000, help="Points of the utilisation curve.")
    ] = 100,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            help="The log's archive directory (default: beside the store of `fgpu up`).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """What happened to resource group GROUP's sessions, and what would have under
    POLICY: the requests the cluster's log holds (asked for in the range, admitted),
    replayed on the group's agents through the scheduler in time (a virtual clock), side
    by side with the log's own waits, rejections and utilisation. It reads the log (its
    archive, then its stream, as a projections rebuild does) and changes nothing.

    Who may: it reads the whole log, which a person's keypair may not (the server lets
    users read the cluster only through the read API): an administrator runs it with the
    services' keypairs (fgpu --service-keys services.json sim whatif ..., the file from
    fgpu admin init), reading as the `api` service, as `fgpu projections rebuild`
    does. A cluster without
    authentication lets anyone read its log."""
    from services.cli.audit_cmd import parse_time
    from services.domain.scheduling.placement import POLICY_NAMES

    if policy not in POLICY_NAMES:
        fail(f"no placement policy {policy!r}; there are {', '.join(POLICY_NAMES)}")
    try:
        start = parse_time(since) if since is not None else None
        end = parse_time(until) if until is not None else None
    except ValueError as e:
        fail(str(e))
    result = run_async(lambda: _whatif(ctx.obj, group, policy, (start, end), samples, archive))
    if not result["agents"]:
        warn(f"no agent registered in resource group {group} is on the log")
    if as_json:
        print_json(result)
        return
    out().print(
        f"resource group {group}: {result['agents']} agents, "
        f"{result['happened']['sessions']} sessions admitted over {result['span_s']:,.0f} s "
        f"from {result['since']} ({result['refused_at_admission']} refused at admission)"
    )
    recorded = result["group_policy"] or "the scheduler's"
    columns = {
        f"happened ({recorded})": result["happened"],
        f"under {policy}": result["would_have"],
    }
    out().print(timed_table(columns))


async def _whatif(
    settings: "Settings",
    group: str,
    policy: str,
    span: "tuple[datetime | None, datetime | None]",
    samples: int,
    archive: Path | None,
) -> dict[str, Any]:
    from projections.archive import Archive, ArchivedLog  # DuckDB: only when asked
    from services.ports import HistoryMissing, LogError
    from services.sim.whatif import read_group, whatif

    since, until = span
    async with connection(settings, "api") as conn:
        try:
            identity = await conn.log.identity()  # the archive's directory is named by it
            whole = ArchivedLog(conn.log, Archive(archive or default_archive_dir(), identity))
            recorded = await read_group(whole, group, since, until)
        except HistoryMissing as e:
            fail(f"{e}: give the archive's directory with --archive (it holds the rest)", code=1)
        except LogError as e:
            told = conn.client.last_error or ""
            if "permissions violation" in told.lower():
                fail(
                    f"the server refused to let {settings.identity('api').access_key} read the "
                    f"log ({told}): fgpu sim whatif reads the whole log, which only the "
                    "cluster's services may; run it with --service-keys services.json",
                    code=1,
                )
            raise e
    return whatif(recorded, policy, samples)
