"""``fgpu audit``: the cluster at a past instant, and a session's story, from the read API.

The API answers both from its projections (``/v1/state``, ``/v1/sessions/{id}/history``),
with the same fold and the same story for every reader.
"""

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from services.cli.options import Settings, api_errors, fail, out, print_json
from services.cli.render import agents_table, sessions_table, shares_table, story_lines

__all__ = ["app", "parse_time"]

app = typer.Typer(
    help="What the cluster looked like at any past instant, and why.",
    invoke_without_command=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the read API's JSON.")]


def parse_time(text: str) -> datetime | None:
    """An instant from ISO 8601 (``2025-03-01T12:00:00Z``, with an offset, or without one:
    UTC); None for ``now``. Raises ValueError."""
    if text.strip().lower() == "now":
        return None
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise ValueError(f"{text!r} is not a time like 2025-03-01T12:00:00Z") from e
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


@app.callback()
def audit_at(
    ctx: typer.Context,
    at: Annotated[
        str | None,
        typer.Option(help="An instant: ISO 8601 (UTC without an offset) or 'now'."),
    ] = None,
    seq: Annotated[int | None, typer.Option(min=0, help="A log sequence instead.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The cluster as it was at --at TIME (or right after record --seq N): sessions,
    agents, and each GPU's fGPU shares."""
    if ctx.invoked_subcommand is not None:
        return
    if at is None and seq is None:
        fail("give --at TIME or --seq N (or: fgpu audit session ID)")
    if at is not None and seq is not None:
        fail("give --at or --seq, not both")
    params: dict[str, Any] = {"seq": seq}
    if at is not None:
        try:
            when = parse_time(at)
        except ValueError as e:
            fail(str(e))
        params["at"] = when.isoformat() if when is not None else None
    settings: Settings = ctx.obj
    with api_errors():
        state = settings.read_api().get("/v1/state", params)
    if as_json:
        print_json(state)
        return
    console = out()
    stamp = f" ({state['at']})" if state["at"] else ""
    console.print(f"[bold]The cluster after event #{state['seq']}{stamp}[/]")
    counts = ", ".join(f"{n} {k}" for k, n in sorted(state["counts"].items())) or "no sessions"
    console.print(f"sessions: {counts}")
    console.print(sessions_table(state["sessions"], title="sessions not ended then"))
    console.print(agents_table(state["agents"]))
    console.print(shares_table(state["agents"]))


@app.command("session")
def audit_session(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="The session.")],
    as_json: JsonOpt = False,
) -> None:
    """A session's whole story: who asked, when it waited and why, where it ran, how
    it ended (events the fold ignored are marked)."""
    from events import subjects as subj

    if not subj.is_token(session_id):
        fail(f"{session_id!r} is not a session id")
    settings: Settings = ctx.obj
    with api_errors():
        history = settings.read_api().get(f"/v1/sessions/{session_id}/history")
    if as_json:
        print_json(history)
        return
    for line in story_lines(history):
        out().print(line, highlight=False)
