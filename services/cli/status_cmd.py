"""``fgpu status``: the stack's health at a glance, through the read API (``/v1/status``).

Superadmins only: the cluster's operators (the read API answers others 403, said in one
line, exit 1). It shows whether all is well, the room on the disk under each of the log's
servers (ok, low: no new sessions are admitted; full: nothing can be written, said with
what the watcher beside the server finds now), the agents alive and lost, and each actor
snapshot's health and age (``fgpu admin snapshots``' lines), where the read API can read
them (``fgpu up``'s).
"""

from typing import Annotated, Any

import typer

from services.cli.options import Settings, api_errors, out, print_json
from services.cli.render import mem
from services.cli.snapshots_cmd import snapshot_line

__all__ = ["app", "status_lines"]

app = typer.Typer()  # no group of its own: main puts it beside its own commands


@app.command("status")
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the read API's JSON.")] = False,
) -> None:
    """The stack's health at a glance (superadmins): the log's disk, the agents, the
    actors' snapshots."""
    settings: Settings = ctx.obj
    with api_errors():
        found = settings.read_api().get("/v1/status")
    if as_json:
        print_json(found)
        return
    for line in status_lines(found):
        out().print(line, highlight=False, markup=False)


def status_lines(found: dict[str, Any]) -> list[str]:
    """``/v1/status`` as lines: all is well or not, then one line each for the log's
    servers and the agents."""
    lines = ["all is well" if found["ok"] else "NOT WELL"]
    for h in found["log"]:
        room = (
            f"{mem(h['free_bytes'])} free of {mem(h['total_bytes'])} at {h['path']}, "
            f"low under {mem(h['watermark_bytes'])}"
        )
        said = f": {h['reason']}" if h["reason"] else ""
        since = f" (nothing written since {h['unwritable_since']})" if h["state"] == "full" else ""
        seen = "now" if h["live"] else f"as the log said at {h['at']}"
        lines.append(f"log {h['server']}: {h['state']}{said}{since}; {room} ({seen})")
    if not found["log"]:
        lines.append("log: no health known (no watcher beside its server has said any)")
    agents = found["agents"]
    lines.append(f"agents: {agents['alive']} alive, {agents['lost']} lost")
    if found.get("snapshots") is None:
        lines.append("snapshots: not read by this read API (fgpu admin snapshots)")
    for r in found.get("snapshots") or ():
        lines.append(f"snapshot {snapshot_line(r)}")
    lines.append(f"projections at event #{found['last_seq']}")
    return lines
