"""``fgpu admin ...``: the administrators' group, assembled here and only here from the
modules that hold its commands.

- ``tenancy_cmd``: ``init``, ``server-auth``, and ``domain``, ``project``, ``user``,
  ``keypair``, ``policy``;
- ``snapshots_cmd``: ``snapshots``;
- ``group_cmd``: ``group``;
- ``image_policy_cmd``: ``images``;
- ``preset_cmd``: ``preset``.

Its options (``--request-id``) are the group's, before the command, shared by every change.
"""

import typer

from services.cli import group_cmd, image_policy_cmd, preset_cmd, snapshots_cmd, tenancy_cmd
from services.cli.options import Settings
from services.cli.outcome import RequestIdOpt

__all__ = ["app"]

app = typer.Typer(help="Tenancy and resource policies (administrators).", no_args_is_help=True)


@app.callback()
def _admin_options(ctx: typer.Context, request_id: RequestIdOpt = None) -> None:
    """Tenancy and resource policies (administrators). Each change is a request; sent
    again with the same --request-id (before the command), it is done once."""
    settings: Settings = ctx.obj
    settings.request_id = request_id


app.add_typer(tenancy_cmd.app)
app.add_typer(snapshots_cmd.app)
app.add_typer(group_cmd.app, name="group")
app.add_typer(image_policy_cmd.app, name="images")
app.add_typer(preset_cmd.app, name="preset")
