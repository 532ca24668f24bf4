"""Administrators' commands: resource policies, and the projections' rebuild."""

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
    user_client,
)

__all__ = ["register"]

policy_app = typer.Typer(help="Resource policies per access key (admins).", no_args_is_help=True)
projections_app = typer.Typer(help="The DuckDB projections of the log.", no_args_is_help=True)
stream_app = typer.Typer(
    help="The stream that holds the log (an administrator's step: clients never create it).",
    no_args_is_help=True,
)


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
    from events import Slots
    from events import subjects as subj
    from services.domain.resources import (
        UNLIMITED,
        InvalidAmount,
        parse_cpu,
        parse_fgpu,
        parse_mem,
    )

    settings: Settings = ctx.obj
    if not subj.is_token(owner):
        fail(f"access key {owner!r} must be 1-64 letters, digits, '-' or '_'")
    limits = None
    if max_fgpu or max_cpu or max_mem:
        try:
            limits = Slots(
                fgpu=parse_fgpu(max_fgpu) if max_fgpu else UNLIMITED,
                cpu=parse_cpu(max_cpu) if max_cpu else UNLIMITED,
                mem=parse_mem(max_mem) if max_mem else UNLIMITED,
            )
        except InvalidAmount as e:
            fail(str(e))

    async def go() -> None:
        async with user_client(settings) as client:
            await client.set_policy(owner, max_sessions=max_sessions, max_slots=limits)

    run_async(go)
    out().print(f"policy of {owner} set")


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
def stream_create(ctx: typer.Context) -> None:
    """Create the stream on --nats URL, or bring an existing one up to this version's
    configuration, keeping its messages. Safe to run again."""
    settings: Settings = ctx.obj

    async def go() -> str:
        async with connection(settings) as conn:
            return (await conn.log.create_or_update_stream()).value

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
    app.add_typer(policy_app, name="policy")
    app.add_typer(projections_app, name="projections")
    app.add_typer(stream_app, name="stream")
