"""``fgpu agents``: the agents and their GPUs, through the read API."""

from typing import Annotated

import typer

from services.cli.options import Settings, api_errors, out, print_json
from services.cli.render import agents_table

__all__ = ["app"]

app = typer.Typer(help="Agents and their GPUs.", no_args_is_help=True)


@app.command("ls")
def agents_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the read API's JSON.")] = False,
) -> None:
    """Agents with their capacity and the fGPU shares on each GPU."""
    settings: Settings = ctx.obj
    with api_errors():
        page = settings.read_api().get("/v1/agents")
    if as_json:
        print_json(page)
    else:
        out().print(agents_table(page["agents"]))
