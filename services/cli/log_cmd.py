"""``fgpu stream``, ``fgpu projections`` and ``fgpu archive``: administrators' commands for
the log (the stream that holds it, the DuckDB projections made from it, and its archive)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli.daemon_cmd import RetainDaysOpt, RetainEventsOpt
from services.cli.home import private_files
from services.cli.options import (
    Settings,
    connection,
    default_archive_dir,
    fail,
    out,
    print_json,
    run_async,
    state_file,
)

__all__ = ["app"]

projections_app = typer.Typer(help="The DuckDB projections of the log.", no_args_is_help=True)
archive_app = typer.Typer(
    help="The log's archive: what left a stream made with retention, in Parquet files.",
    no_args_is_help=True,
)
ArchiveDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--archive", help="The archive directory (default: beside the store of `fgpu up`)."
    ),
]
stream_app = typer.Typer(
    help="The stream that holds the log (an administrator's step: clients never create it).",
    no_args_is_help=True,
)

app = typer.Typer()  # no group of its own: main puts these three beside its own commands
app.add_typer(projections_app, name="projections")
app.add_typer(stream_app, name="stream")
app.add_typer(archive_app, name="archive")


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
    archive: ArchiveDirOpt = None,
) -> None:
    """Rebuild every table from the start of the log (its archive, then its stream), into
    a new file moved into place. It reads the log as the projector does: with the `api`
    service key where service keys are given (--service-keys, $FGPU_SERVICE_KEYS).

    Refused while a projector (`fgpu up`, `fgpu api`) has the file open: stop it, or
    pass --db.
    """
    from projections import StoreLocked, rebuild  # DuckDB: loaded only when needed
    from projections.archive import Archive, ArchivedLog

    settings: Settings = ctx.obj
    path = db or _default_db()

    async def go() -> Any:
        async with connection(settings, "api") as conn:
            root = archive or default_archive_dir()
            whole = ArchivedLog(conn.log, Archive(root, await conn.log.identity()))
            return await rebuild(whole, path)

    try:
        with private_files():  # the projections hold every tenant's history
            path.parent.mkdir(parents=True, exist_ok=True)
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
    retain_events: RetainEventsOpt = None,
    retain_days: RetainDaysOpt = None,
) -> None:
    """Create the stream on --nats URL, or bring an existing one up to this version's
    configuration, keeping its messages. Safe to run again.

    Retention (--retain-events, --retain-days) is chosen when the stream is made: one
    made without it keeps every event for good (it refuses purges, which no one can
    undo); one made with it has its limits changed by running this again."""
    from services.cli.daemon_cmd import retention_of
    from services.ports import LogError

    settings: Settings = ctx.obj
    retention = retention_of(retain_events, retain_days)

    async def go() -> str:
        async with connection(settings) as conn:
            try:
                return (await conn.log.create_or_update_stream(replicas, retention)).value
            except LogError as e:
                fail(str(e), code=1)

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


@archive_app.command("ls")
def archive_ls(
    ctx: typer.Context,
    archive: ArchiveDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """The archive's segments of the log on --nats URL: which records, which file, and
    the digest each reads back with."""
    from projections.archive import Archive

    settings: Settings = ctx.obj

    async def go() -> list[dict[str, Any]]:
        async with connection(settings) as conn:
            found = Archive(archive or default_archive_dir(), await conn.log.identity())
            return [
                {
                    "segment": s.name,
                    "first_seq": s.first_seq,
                    "last_seq": s.last_seq,
                    "sha256": s.sha256,
                }
                for s in await found.segments()
            ]

    segments = run_async(go)
    if as_json:
        print_json(segments)
        return
    if not segments:
        out().print("no segment archived", highlight=False)
    for s in segments:
        out().print(
            f"{s['first_seq']:>12}..{s['last_seq']:<12} {s['segment']}  {s['sha256'][:16]}",
            highlight=False,
        )


@archive_app.command("run")
def archive_run(
    ctx: typer.Context,
    archive: ArchiveDirOpt = None,
    every: Annotated[float, typer.Option(min=1, help="Seconds between passes.")] = 60.0,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """The archiver, on its own, against --nats URL (as its service key): what the
    stream's retention puts beyond its limits is archived, read back, said on the log
    (log.archived), and only then removed from the stream. `fgpu up` runs one itself."""
    import anyio

    from events import subjects as subj
    from projections.archive import Archive
    from services.actors.archiver import Archiver
    from services.adapters.system_clock import SystemClock
    from services.wiring.parts import connected, run_archiver

    settings: Settings = ctx.obj
    root = archive or default_archive_dir()

    async def go() -> str:
        me = settings.identity("archiver")
        async with connected(settings.url, "fgpu-archiver", me) as conn:
            if not once:
                async with anyio.create_task_group() as tg:
                    await tg.start(run_archiver, conn, root, every)
                    out().print(f"archiver ready: {settings.url} into {root}", highlight=False)
                return ""
            archiver = Archiver(
                conn.log,
                conn.log,
                Archive(root, await conn.log.identity()),
                [conn.snapshots(kind) for kind in subj.SNAPSHOT_KINDS],
                SystemClock(),
            )
            done = await archiver.pass_once()
            if done is None:
                return "the stream keeps every event for good: nothing to archive"
            line = (
                f"{len(done.written)} segment(s) written; archived through {done.archived_through}"
            )
            return line + (f"; waiting: {done.waiting}" if done.waiting else "")

    with private_files():  # the archive holds every tenant's history
        said = run_async(go)
    if said:
        out().print(said, highlight=False)
