"""The ``fgpu`` command.

One convention puts every command in the tree: each ``*_cmd`` module exports one
``app: typer.Typer`` and never touches another module's, and the group above it mounts it
with ``add_typer``, in one place. With a name (``app.add_typer(session_cmd.app,
name="session")``) it is a group of its own, ``fgpu session ...``; without one
(``app.add_typer(daemon_cmd.app)``) its commands and groups sit beside the group's own
(``fgpu up``, ``fgpu status``). This module mounts the root's, in ``fgpu --help``'s order;
``admin_cmd`` mounts ``fgpu admin``'s, and ``session_cmd`` ``channel_cmd``'s (shell, app).

Every module it imports to start is light (typer and the standard library): a command
imports what it uses when it runs, so a read through the API pays for no NATS client,
DuckDB or web framework.
"""

from typing import Annotated

import typer

from services.cli import (
    admin_cmd,
    agents_cmd,
    audit_cmd,
    daemon_cmd,
    events_cmd,
    images_cmd,
    log_cmd,
    login_cmd,
    pipeline_cmd,
    secret_cmd,
    serve_cmd,
    serve_rollout_cmd,  # noqa: F401  (its update, rollback, traffic join serve_cmd.app)
    session_cmd,
    sim_cmd,
    status_cmd,
    vfolder_cmd,
)
from services.cli.credentials import resolve
from services.cli.options import Settings, print_json

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
    api: Annotated[
        str | None,
        typer.Option(help="Read API URL (default: $FGPU_API, else where `fgpu up` serves it)."),
    ] = None,
    service_keys: Annotated[
        str | None,
        typer.Option(
            help="Services' keypairs (services.json, from fgpu admin init): a daemon "
            "(agent, scheduler, ...) speaks as its own (default: $FGPU_SERVICE_KEYS)."
        ),
    ] = None,
    access_key: Annotated[
        str | None,
        typer.Option(
            help="Your access key (default: $FGPU_ACCESS_KEY, else the one `fgpu login` "
            "stored; its secret comes from $FGPU_SECRET_KEY or that store)."
        ),
    ] = None,
) -> None:
    # Checked by the commands that publish in its name (``user_client``): a read needs none.
    me = resolve(access_key)
    ctx.obj = Settings(
        nats=nats,
        api=api,
        access_key=me.access_key,
        secret_key=me.secret_key,
        service_keys=service_keys,
    )


@app.command("version")
def version(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """This fgpu's version."""
    from services import __version__ as v

    if as_json:
        print_json({"version": v})
    else:
        print(f"fgpu {v}")


app.add_typer(login_cmd.app)  # login, whoami
app.add_typer(daemon_cmd.app)  # up, down, agent, scheduler, quota, ..., api
app.add_typer(status_cmd.app)  # status
app.add_typer(session_cmd.app, name="session")
app.add_typer(events_cmd.app, name="events")
app.add_typer(agents_cmd.app, name="agents")
app.add_typer(audit_cmd.app, name="audit")
app.add_typer(vfolder_cmd.app, name="vfolder")
app.add_typer(serve_cmd.app, name="serve")
app.add_typer(log_cmd.app)  # projections, stream, archive
app.add_typer(admin_cmd.app, name="admin")
app.add_typer(images_cmd.app, name="images")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(pipeline_cmd.app, name="pipeline")
app.add_typer(secret_cmd.app, name="secret")
