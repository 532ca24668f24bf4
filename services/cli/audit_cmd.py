"""``fgpu audit`` (the cluster at a past instant, a session's story) and ``fgpu projections``.

``fgpu audit`` replays the log itself, with the same fold and the same story as the read
API, so it works wherever the log can be read, with or without ``fgpu up``'s API.
"""

import json
import sys
from collections.abc import Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from events import AnyEvent, Malformed, Record
from projections.story import Line, story, summary
from services.cli.options import Settings, console, fail, print_json, run_async
from services.cli.render import agents_table, session_dict, sessions_table
from services.cli.stack import connected, projections_db
from services.domain.resources import format_fgpu
from services.domain.state import ClusterState, evolve, fold
from services.domain.status import ENDED
from services.ports import EventLog

__all__ = ["parse_time", "register"]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def parse_time(text: str) -> datetime:
    """An instant from ISO 8601 (``2025-03-01T12:00:00Z``, with an offset, or without one:
    UTC) or ``now``. Raises ValueError."""
    if text.strip().lower() == "now":
        return datetime.now(UTC)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise ValueError(f"{text!r} is not a time like 2025-03-01T12:00:00Z") from e
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


# Records read past the newest one stamped in time that are kept in hand, in case a later
# one is stamped in time too (its writer's clock behind the others').
_HELD = 10_000


async def _replay(
    events: EventLog, *, at: datetime | None = None, seq: int | None = None
) -> tuple[ClusterState, datetime | None]:
    """The fold of the log up to ``seq``, or up to the last event stamped at or before
    ``at`` (as the read API's ``/v1/state``); and when that event happened."""
    if at is not None:
        return await _replay_at(events, at)
    s = ClusterState()
    when: datetime | None = None
    if not seq:
        return s, None
    async with aclosing(events.read(0, until=seq)) as batches:
        async for batch in batches:
            for r in batch:
                evolve(s, r)
                when = None if isinstance(r.event, Malformed) else r.event.at
    return s, when


async def _replay_at(events: EventLog, at: datetime) -> tuple[ClusterState, datetime | None]:
    """The fold of the log up to the last event stamped at or before ``at``, and its stamp.

    One read of the log, which finds that event and folds up to it. A stamp is its
    writer's clock, so an event in time may come after later-stamped ones: the records
    after the newest event in time are held, and folded when another in time comes. Past
    ``_HELD`` of them they are dropped instead, and the stretch up to the last event in
    time is read again at the end (a second read, of that stretch only).
    """
    s = ClusterState()
    when: datetime | None = None
    end = 0  # the newest record stamped in time
    held: list[Record] | None = []  # the records after s.last_seq; None: dropped
    async with aclosing(events.read(0)) as batches:
        async for batch in batches:
            for r in batch:
                e = r.event
                if isinstance(e, Malformed) or e.at > at:
                    if held is not None:
                        held.append(r)
                        if len(held) > _HELD:
                            held = None
                    continue
                end, when = r.seq, e.at
                if held is not None:
                    fold(held, s)
                    held.clear()
                    evolve(s, r)
    if end > s.last_seq:
        async with aclosing(events.read(s.last_seq, until=end)) as batches:
            async for batch in batches:
                fold(batch, s)
    return s, when


def _shares_table(s: ClusterState) -> Table:
    t = Table(title="fGPU shares")
    for col in ("AGENT", "GPU", "USED/TOTAL", "SHARES (session: fGPU)"):
        t.add_column(col)
    for a in s.agents.values():
        for index, g in sorted(a.gpus.items()):
            owners = {sid: s.sessions[sid].owner for sid in g.shares if sid in s.sessions}
            shares = ", ".join(
                f"{sid} ({owners.get(sid, '?')}): {format_fgpu(q)}" for sid, q in g.shares.items()
            )
            used = f"{format_fgpu(g.allocated)}/{format_fgpu(g.capacity)}"
            t.add_row(a.agent_id, f"gpu{index}", used, shares or "[dim]free[/]")
    return t


def _counts(s: ClusterState) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in s.sessions.values():
        out[v.status.value] = out.get(v.status.value, 0) + 1
    return out


def _print_state(s: ClusterState, when: datetime | None, as_json: bool) -> None:
    live = [v for v in s.sessions.values() if v.status not in ENDED]
    if as_json:
        print_json(
            {
                "seq": s.last_seq,
                "at": when.isoformat() if when else None,
                "counts": _counts(s),
                "sessions": [session_dict(v) for v in live],
                "agents": [
                    {
                        "id": a.agent_id,
                        "lost": a.lost,
                        "gpus": [
                            {
                                "index": i,
                                "capacity": format_fgpu(g.capacity),
                                "allocated": format_fgpu(g.allocated),
                                "shares": {k: format_fgpu(q) for k, q in g.shares.items()},
                            }
                            for i, g in sorted(a.gpus.items())
                        ],
                    }
                    for a in s.agents.values()
                ],
            }
        )
        return
    stamp = f" ({when.isoformat()})" if when else ""
    console.print(f"[bold]The cluster after event #{s.last_seq}{stamp}[/]")
    counts = ", ".join(f"{n} {k}" for k, n in sorted(_counts(s).items())) or "no sessions"
    console.print(f"sessions: {counts}")
    console.print(sessions_table(live, title="sessions not ended then"))
    console.print(agents_table(s))
    console.print(_shares_table(s))


async def _session_story(
    events: EventLog, session_id: str
) -> tuple[ClusterState, list[tuple[int, AnyEvent]]]:
    s = ClusterState()
    mine: list[tuple[int, AnyEvent]] = []
    async with aclosing(events.read(0)) as batches:
        async for batch in batches:
            for r in batch:
                evolve(s, r)
                e = r.event
                if not isinstance(e, Malformed) and getattr(e, "session_id", None) == session_id:
                    mine.append((r.seq, e))
    return s, mine


def _print_story(s: ClusterState, session_id: str, lines: Sequence[Line], as_json: bool) -> None:
    v = s.sessions[session_id]
    if as_json:
        body: dict[str, Any] = session_dict(v, history=True)
        body["summary"] = summary(lines)
        body["story"] = [
            {
                "seq": line.seq,
                "at": line.at.isoformat(),
                "actor": line.actor,
                "text": line.text,
                "effect": line.effect,
            }
            for line in lines
        ]
        sys.stdout.write(json.dumps(body, indent=2, default=str) + "\n")
        return
    console.print(f"[bold]{session_id}[/] of {v.owner}: {v.status.value}. {summary(lines)}")
    for line in lines:
        style = "" if line.effect else "[dim]"
        end = "[/]" if style else ""
        console.print(
            f"{style}{line.at.isoformat(timespec='milliseconds')}  #{line.seq:<6} "
            f"{line.actor}: {line.text}{end}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add ``fgpu audit`` and ``fgpu projections`` to ``app``."""
    audit = typer.Typer(
        help="What the cluster looked like at any past instant, and why.",
        invoke_without_command=True,
    )
    app.add_typer(audit, name="audit")

    @audit.callback()
    def audit_at(
        ctx: typer.Context,
        at: Annotated[
            str | None,
            typer.Option(help="An instant: ISO 8601 (UTC without an offset) or 'now'."),
        ] = None,
        seq: Annotated[int | None, typer.Option(min=0, help="A log sequence instead.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Replay the log up to --at TIME (or --seq N) and show the cluster as it was:
        sessions, agents, and each GPU's fGPU shares."""
        if ctx.invoked_subcommand is not None:
            return
        if at is None and seq is None:
            fail("give --at TIME or --seq N (or: fgpu audit session ID)")
        if at is not None and seq is not None:
            fail("give --at or --seq, not both")
        try:
            when = parse_time(at) if at is not None else None
        except ValueError as e:
            fail(str(e))
        settings: Settings = ctx.obj

        async def go() -> tuple[ClusterState, datetime | None]:
            async with connected(settings.url, "fgpu-audit") as conn:
                events = conn.log
                return await _replay(events, at=when, seq=seq)

        state, happened = run_async(go)
        _print_state(state, happened, as_json)

    @audit.command("session")
    def audit_session(
        ctx: typer.Context,
        session_id: Annotated[str, typer.Argument(help="The session.")],
        as_json: JsonOpt = False,
    ) -> None:
        """A session's whole story: who asked, when it waited and why, where it ran, how
        it ended (events the fold ignored are marked)."""
        settings: Settings = ctx.obj

        async def go() -> tuple[ClusterState, list[tuple[int, AnyEvent]]]:
            async with connected(settings.url, "fgpu-audit") as conn:
                events = conn.log
                return await _session_story(events, session_id)

        state, mine = run_async(go)
        v = state.sessions.get(session_id)
        if v is None:
            fail(f"no session {session_id!r} on the log")
        lines = story(mine, {t.event_id for t in v.history})
        _print_story(state, session_id, lines, as_json)

    projections = typer.Typer(help="The DuckDB projections of the log.", no_args_is_help=True)
    app.add_typer(projections, name="projections")

    @projections.command("rebuild")
    def projections_rebuild(
        ctx: typer.Context,
        db: Annotated[
            Path | None,
            typer.Option(help="The DuckDB file (default: the one `fgpu up` serves)."),
        ] = None,
    ) -> None:
        """Rebuild every table from the start of the log, into a new file moved into place.

        Refused while a projector (`fgpu up`) has the file open: stop it, or pass --db.
        """
        from projections import StoreLocked, rebuild  # DuckDB: loaded only when needed

        settings: Settings = ctx.obj
        path = db or projections_db()
        path.parent.mkdir(parents=True, exist_ok=True)

        async def go() -> Any:
            async with connected(settings.url, "fgpu-rebuild") as conn:
                events = conn.log
                return await rebuild(events, path)

        try:
            result = run_async(go)
        except StoreLocked as e:
            fail(f"{e}; stop `fgpu up` first, or rebuild into another file with --db")
        console.print(
            f"rebuilt {path}: {result.events} events in {result.seconds:.2f} s "
            f"({result.rate:,.0f} events/s)"
        )
