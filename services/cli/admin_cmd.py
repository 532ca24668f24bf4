"""Administrators' commands for the log: the stream, and the projections' rebuild."""

from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli.options import (
    Settings,
    connection,
    fail,
    out,
    print_json,
    run_async,
    state_file,
)

__all__ = ["register"]

projections_app = typer.Typer(help="The DuckDB projections of the log.", no_args_is_help=True)
stream_app = typer.Typer(
    help="The stream that holds the log (an administrator's step: clients never create it).",
    no_args_is_help=True,
)


def _default_db() -> Path:
    """The projections' file of the running ``fgpu up`` (beside its log), else the one
    beside the state file."""
    import json

    from projections.paths import default_db_path

    try:
        store_dir = json.loads(state_file().read_text())["store_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return default_db_path(state_file().parent)
    return default_db_path(Path(store_dir))


@projections_app.command("rebuild")
def projections_rebuild(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(help="The DuckDB file (default: the one `fgpu up` serves)."),
    ] = None,
) -> None:
    """Rebuild every table from the start of the log, into a new file moved into place.

    Refused while a projector (`fgpu up`, `fgpu api`) has the file open: stop it, or
    pass --db.
    """
    from projections import StoreLocked, rebuild  # DuckDB: loaded only when needed

    settings: Settings = ctx.obj
    path = db or _default_db()
    path.parent.mkdir(parents=True, exist_ok=True)

    async def go() -> Any:
        async with connection(settings) as conn:
            return await rebuild(conn.log, path)

    try:
        result = run_async(go)
    except StoreLocked as e:
        fail(f"{e}; stop `fgpu up` first, or rebuild into another file with --db", code=1)
    out().print(
        f"rebuilt {path}: {result.events} events in {result.seconds:.2f} s "
        f"({result.rate:,.0f} events/s)"
    )


@stream_app.command("create")
def stream_create(
    ctx: typer.Context,
    replicas: Annotated[
        int | None,
        typer.Option(min=1, max=5, help="Copies on a cluster of servers (3 for a real one)."),
    ] = None,
) -> None:
    """Create the stream on --nats URL, or bring an existing one up to this version's
    configuration, keeping its messages. Safe to run again."""
    settings: Settings = ctx.obj

    async def go() -> str:
        async with connection(settings) as conn:
            return (await conn.log.create_or_update_stream(replicas)).value

    change = run_async(go)
    said = {"created": "created", "updated": "updated (messages kept)", "current": "up to date"}
    out().print(f"stream on {settings.url}: {said[change]}", highlight=False)


@stream_app.command("info")
def stream_info(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """The stream's subjects, size and sequences."""
    import dataclasses

    settings: Settings = ctx.obj

    async def go() -> dict[str, Any]:
        async with connection(settings) as conn:
            return dataclasses.asdict(await conn.log.stream_info())

    info = run_async(go)
    if as_json:
        print_json(info)
        return
    for key, value in info.items():
        shown = ", ".join(value) if isinstance(value, tuple | list) else value
        out().print(f"{key:<10} {shown}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(projections_app, name="projections")
    app.add_typer(stream_app, name="stream")
