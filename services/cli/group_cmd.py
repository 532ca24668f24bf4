"""``fgpu admin group ...``: resource groups (superadmins change them; anyone lists those
it may use).

A change is an admin request the registrar applies or refuses, as every tenancy command
(``tenancy_cmd.ask``). ``update`` changes what it is given and keeps the rest, read from
the read API's list.
"""

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.options import fail, out, print_json
from services.cli.tenancy_cmd import (
    JsonOpt,
    TimeoutOpt,
    ask,
    listed,
    refused,
    said,
)

if TYPE_CHECKING:
    from events import GroupSettings

__all__ = ["app"]

app = typer.Typer(
    help="Resource groups: agents serve one; sessions ask for one.", no_args_is_help=True
)

QueueOpt = Annotated[
    str | None, typer.Option(help="fifo, lifo or drf (after priority). [default: fifo]")
]
PolicyOpt = Annotated[
    str | None,
    typer.Option(help="Placement policy. [default: fragmentation-aware]"),
]
SecondsOpt = Annotated[int | None, typer.Option(min=0, help="Seconds.")]
ProjectsOpt = Annotated[
    list[str] | None,
    typer.Option("--project", help="DOMAIN/PROJECT that may use it (repeat); none: every one."),
]
ClearOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--clear",
        help="Settings to take back to none (update): pending-timeout, default-lifetime, "
        "max-lifetime, idle-timeout, projects, fgpu-quantum.",
    ),
]
QuantumOpt = Annotated[
    str | None,
    typer.Option(
        "--fgpu-quantum",
        help="The step of the fGPU its sessions ask for (0.1: 0.1, 0.2, ...). "
        "[default: 0.01, the cluster's]",
    ),
]
# Tries of an update whose group someone else changed meanwhile (each reads it again).
_UPDATE_ATTEMPTS = 5

_CLEARABLE = {
    "pending-timeout": "pending_timeout_s",
    "default-lifetime": "default_lifetime_s",
    "max-lifetime": "max_lifetime_s",
    "idle-timeout": "idle_timeout_s",
    "projects": "projects",
    "fgpu-quantum": "fgpu_quantum",
}


def _given(
    queue: str | None,
    policy: str | None,
    times: tuple[int | None, int | None, int | None, int | None],
    projects: list[str] | None,
    quantum: str | None = None,
) -> dict[str, Any]:
    """The settings named on the command line, as GroupSettings' fields."""
    from events import QueueOrder
    from services.domain.resources import InvalidAmount, parse_fgpu

    pending, default_lifetime, max_lifetime, idle = times
    given: dict[str, Any] = {
        "policy": policy,
        "pending_timeout_s": pending,
        "default_lifetime_s": default_lifetime,
        "max_lifetime_s": max_lifetime,
        "idle_timeout_s": idle,
        "projects": tuple(projects) if projects else None,
    }
    if quantum is not None:
        try:
            given["fgpu_quantum"] = parse_fgpu(quantum)
        except InvalidAmount as e:
            fail(f"--fgpu-quantum: {e}")
    if queue is not None:
        try:
            given["queue"] = QueueOrder(queue)
        except ValueError:
            fail(f"--queue is fifo, lifo or drf, got {queue!r}")
    return {k: v for k, v in given.items() if v is not None}


def _current(ctx: typer.Context, group: str) -> dict[str, Any]:
    """The group's settings as the read API lists them (empty: the default group never
    given any). Exits 1 if the viewer sees no such group."""
    found = listed(ctx, "/v1/groups")
    for g in found:
        if g["group"] == group:
            if not g["configured"]:
                return {}
            kept = {k: v for k, v in g.items() if k not in ("group", "configured")}
            if kept.get("projects") is not None:
                kept["projects"] = tuple(kept["projects"])
            if kept.get("fgpu_quantum") is not None:  # shown as fGPU, held in quanta
                from services.domain.resources import parse_fgpu

                kept["fgpu_quantum"] = parse_fgpu(kept["fgpu_quantum"])
            return {k: v for k, v in kept.items() if v is not None}
    fail(f"no resource group {group}", code=1)


def _make(fields: dict[str, Any]) -> "GroupSettings":
    import msgspec

    from events import GroupSettings

    try:
        return msgspec.convert(fields, GroupSettings)
    except msgspec.ValidationError as e:
        fail(f"bad group settings: {e}")


@app.command("create")
def group_create(
    ctx: typer.Context,
    group: str,
    queue: QueueOpt = None,
    policy: PolicyOpt = None,
    pending_timeout: Annotated[
        int | None, typer.Option(min=0, help="Cancel after waiting this long (0: at once).")
    ] = None,
    default_lifetime: SecondsOpt = None,
    max_lifetime: SecondsOpt = None,
    idle_timeout: SecondsOpt = None,
    project: ProjectsOpt = None,
    fgpu_quantum: QuantumOpt = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Create a resource group (superadmins).

    Agents join it with `fgpu agent --group`; sessions ask for it with `--group`."""
    from events import CreateGroup

    times = (pending_timeout, default_lifetime, max_lifetime, idle_timeout)
    settings = _make(_given(queue, policy, times, project, fgpu_quantum))
    answer = ask(ctx, CreateGroup(group=group, settings=settings), timeout)
    said(answer, f"resource group {group} created", as_json)


@app.command("update")
def group_update(
    ctx: typer.Context,
    group: str,
    queue: QueueOpt = None,
    policy: PolicyOpt = None,
    pending_timeout: SecondsOpt = None,
    default_lifetime: SecondsOpt = None,
    max_lifetime: SecondsOpt = None,
    idle_timeout: SecondsOpt = None,
    project: ProjectsOpt = None,
    fgpu_quantum: QuantumOpt = None,
    clear: ClearOpt = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Change a group's settings (superadmins).

    Those given change, the rest are kept; they act on the sessions it holds from now on.
    The change names the settings it was made from: one made at the same time by someone
    else is not undone but read again, and this one made on top of it."""
    from events import UpdateGroup

    for name in clear or ():
        if name not in _CLEARABLE:
            fail(f"--clear takes {', '.join(_CLEARABLE)}; not {name!r}")
    times = (pending_timeout, default_lifetime, max_lifetime, idle_timeout)
    given = _given(queue, policy, times, project, fgpu_quantum)
    for attempt in range(_UPDATE_ATTEMPTS):
        before = _current(ctx, group)
        if not before and policy is None:
            # Its settings are the scheduler's own (--policy, --pending-timeout), which
            # the log does not hold: what is not given here would not be kept but replaced.
            fail(
                f"resource group {group} runs under the scheduler's settings until given its "
                "own: give them whole, --policy first (and --pending-timeout if the scheduler "
                "has one)"
            )
        fields = {**before, **given}
        for name in clear or ():
            fields.pop(_CLEARABLE[name], None)
        change = UpdateGroup(
            group=group, settings=_make(fields), expected=_make(before) if before else None
        )
        answer = ask(ctx, change, timeout, refusal=True)
        if answer["applied"]:
            said(answer, f"resource group {group} updated", as_json)
            return
        if answer["code"] != "conflict" or "changed since it was read" not in answer["reason"]:
            refused(answer)
        time.sleep(0.2 * (attempt + 1))  # someone else's change: read it, then try again
    fail(f"resource group {group} kept changing while this change was made; try again", code=1)


@app.command("rm")
def group_rm(
    ctx: typer.Context, group: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Remove a group (superadmins).

    No new session may ask for it; those it holds go on under the defaults."""
    from events import RemoveGroup

    answer = ask(ctx, RemoveGroup(group=group), timeout)
    said(answer, f"resource group {group} removed", as_json)


@app.command("ls")
def group_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The groups you may use, with their settings (a superadmin: all)."""
    found = listed(ctx, "/v1/groups")
    if as_json:
        print_json(found)
        return
    for g in found:
        if not g["configured"]:
            out().print(f"{g['group']}: the scheduler's settings", highlight=False)
            continue
        shown = {k: v for k, v in g.items() if k not in ("group", "configured") and v is not None}
        if "projects" in shown:
            shown["projects"] = ",".join(shown["projects"])
        text = ", ".join(f"{k}={v}" for k, v in shown.items())
        out().print(f"{g['group']}: {text}", highlight=False)
