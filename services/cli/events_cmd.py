"""``fgpu events``: the log's events through the read API, and their JSON Schema."""

import json
import sys
from typing import Annotated, Any

import typer

from services.cli.options import Settings, api_errors, out, print_json, warn
from services.cli.render import event_line

__all__ = ["app"]

app = typer.Typer(help="The event log.", invoke_without_command=True)
_PAGE = 1000


@app.callback()
def events(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    session: Annotated[str | None, typer.Option(help="Only events of this session.")] = None,
    after: Annotated[int, typer.Option(min=0, help="Start after this log sequence.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print the log's events, oldest first (with --follow, then each new one for ever;
    a broken connection is resumed after the last event printed)."""
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    with api_errors():
        api = settings.read_api()
        if follow:
            for e in api.stream(after, on_break=_resuming):
                if session is None or e.event.get("session_id") == session:
                    _print(e.event, as_json)
            return
        while True:
            page = api.get("/v1/events", {"after": after, "limit": _PAGE, "session": session})
            for e in page["events"]:
                _print(e, as_json)
            if len(page["events"]) < _PAGE:
                return
            after = page["next_after"]


def _resuming(error: Exception, last: int) -> None:
    warn(f"{error}; resuming after event {last} when the read API answers again")


def _print(e: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(e) + "\n")
        sys.stdout.flush()
    else:
        out().print(event_line(e), highlight=False, soft_wrap=True)


@app.command("export")
def export(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option(help="From this instant (ISO 8601, UTC if no offset).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Up to this instant.")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="jsonl (one event per line) or parquet.")
    ] = "jsonl",
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="The file to write (jsonl: standard output)."),
    ] = None,
) -> None:
    """Export the audit log (the events you may see) of a time range, oldest first."""
    import datetime as dt

    from services.cli.options import fail

    if fmt not in ("jsonl", "parquet"):
        fail(f"--format must be jsonl or parquet, got {fmt!r}")
    if fmt == "parquet" and output is None:
        fail("--format parquet needs --output FILE")
    for name, value in (("--since", since), ("--until", until)):
        if value is not None:
            try:
                dt.datetime.fromisoformat(value)
            except ValueError:
                fail(f"{name}: {value!r} is not an ISO 8601 instant")
    settings: Settings = ctx.obj
    params = {"since": since, "until": until, "format": fmt}
    with api_errors():
        api = settings.read_api()
        if output is None:
            written = api.download("/v1/events/export", params, sys.stdout.buffer)
            sys.stdout.flush()
            return
        tmp = f"{output}.part"
        with open(tmp, "wb") as f:
            written = api.download("/v1/events/export", params, f)
        import os

        os.replace(tmp, output)  # a file there is whole: never half an export
    typer.echo(f"exported {written:,} bytes to {output}", err=True)


@app.command("schema")
def schema() -> None:
    """The JSON Schema of every event, for integrations in any language."""
    from events import json_schema

    print_json(json_schema())
