"""The ``fgpu`` command."""

import json
import os
import sys
from typing import Annotated

import typer

from events import Record, Slots, json_schema
from events import subjects as subj
from services.actors.common import SystemClock
from services.cli import audit_cmd, daemon_cmd, session_cmd
from services.cli.options import Settings, console, fail, print_json, run_async
from services.cli.render import agent_dict, agents_table, record_dict
from services.cli.stack import connected
from services.client import Client
from services.domain.resources import InvalidAmount, parse_cpu, parse_fgpu, parse_mem
from services.domain.state import ClusterState

__all__ = ["app"]

app = typer.Typer(
    help="fgpu: fractional GPUs for containers, on an event-sourced log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(
    ctx: typer.Context,
    nats: Annotated[
        str | None,
        typer.Option(help="NATS URL (default: $FGPU_NATS, else where `fgpu up` runs)."),
    ] = None,
    access_key: Annotated[
        str | None, typer.Option(help="Your access key (default: $FGPU_ACCESS_KEY or 'user').")
    ] = None,
) -> None:
    key = access_key or os.environ.get("FGPU_ACCESS_KEY", "user")
    if not subj.is_token(key):
        fail(f"access key {key!r} must be 1-64 letters, digits, '-' or '_'")
    ctx.obj = Settings(nats=nats, access_key=key)


app.add_typer(session_cmd.app, name="session")
daemon_cmd.register(app)
audit_cmd.register(app)

events_app = typer.Typer(help="The event log.", invoke_without_command=True)
app.add_typer(events_app, name="events")


@events_app.callback()
def events(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    session: Annotated[str | None, typer.Option(help="Only events of this session.")] = None,
    after: Annotated[int, typer.Option(help="Start after this stream sequence.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print the log's events, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj

    async def go() -> None:
        async with connected(settings.url, "fgpu-cli") as conn:
            log = conn.log
            source = log.tail(after) if follow else log.read(after)
            async for batch in source:
                for r in batch:
                    if session is None or _of_session(r, session):
                        _print_record(r, as_json)

    run_async(go)


def _of_session(r: Record, session_id: str) -> bool:
    return getattr(r.event, "session_id", None) == session_id


def _print_record(r: Record, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(record_dict(r), default=str) + "\n")
        sys.stdout.flush()
        return
    d = record_dict(r)["event"]
    kind = d.pop("type")
    for k in ("id", "causation_id", "correlation_id"):
        d.pop(k, None)
    at = d.pop("at", "")
    fields = " ".join(f"{k}={v}" for k, v in d.items() if v not in (None, [], ()))
    console.print(f"{r.seq:>6} {at} [bold]{kind}[/] {fields}", highlight=False)


@events_app.command("schema")
def schema() -> None:
    """The JSON Schema of every event, for integrations in any language."""
    print_json(json_schema())


agents_app = typer.Typer(help="Agents and their GPUs.", no_args_is_help=True)
app.add_typer(agents_app, name="agents")


@agents_app.command("ls")
def agents_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Agents with their capacity and the fGPU shares on each GPU."""
    settings: Settings = ctx.obj

    async def go() -> ClusterState:
        async with connected(settings.url, "fgpu-cli") as conn:
            log = conn.log
            return await Client(log, SystemClock(), settings.access_key).state()

    state = run_async(go)
    if as_json:
        print_json({"agents": [agent_dict(a) for a in state.agents.values()]})
    else:
        console.print(agents_table(state))


policy_app = typer.Typer(help="Resource policies per access key (admins).", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    owner: Annotated[str, typer.Argument(help="The access key the policy applies to.")],
    max_sessions: Annotated[int | None, typer.Option(min=0, help="Concurrent sessions.")] = None,
    max_fgpu: Annotated[str | None, typer.Option(help="Total fGPU held at once.")] = None,
    max_cpu: Annotated[str | None, typer.Option(help="Total CPU held at once.")] = None,
    max_mem: Annotated[str | None, typer.Option(help="Total memory held at once.")] = None,
) -> None:
    """Set an access key's policy; what is not given is not limited."""
    settings: Settings = ctx.obj
    if not subj.is_token(owner):
        fail(f"access key {owner!r} must be 1-64 letters, digits, '-' or '_'")
    limits = None
    if max_fgpu or max_cpu or max_mem:
        huge = 1 << 62
        try:
            limits = Slots(
                fgpu=parse_fgpu(max_fgpu) if max_fgpu else huge,
                cpu=parse_cpu(max_cpu) if max_cpu else huge,
                mem=parse_mem(max_mem) if max_mem else huge,
            )
        except InvalidAmount as e:
            fail(str(e))

    async def go() -> None:
        async with connected(settings.url, "fgpu-cli") as conn:
            log = conn.log
            await Client(log, SystemClock(), settings.access_key).set_policy(
                owner, max_sessions=max_sessions, max_slots=limits
            )

    run_async(go)
    console.print(f"policy of {owner} set")
