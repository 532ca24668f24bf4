"""``fgpu images ls``: the images the agents hold, and whether a domain may run each
(what it may run is set by ``fgpu admin images ...``: ``image_policy_cmd``)."""

from typing import Annotated

import typer

from services.cli.options import out, print_json
from services.cli.render import images_table
from services.cli.tenancy_cmd import JsonOpt, listed

__all__ = ["app"]

app = typer.Typer(help="Images on the agents, by name and tag.", no_args_is_help=True)


@app.command("ls")
def images_ls(
    ctx: typer.Context,
    domain: Annotated[
        str | None,
        typer.Option(help="Say what this domain may run (a superadmin's); default: your own."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each image name with its tags, ids, digests, size, the agents that hold it, and
    whether your domain (or DOMAIN) may run it."""
    page = listed(ctx, "/v1/images", {"domain": domain} if domain else None)
    assert isinstance(page, dict)
    if as_json:
        print_json(page["images"])
    else:
        out().print(images_table(page["images"], page.get("domain")))
