"""How the CLI shows what the read API answers: rich tables of the API's own JSON.

One shape: a session, an agent or an event is the dict the API returns (its OpenAPI
schema), printed as is with ``--json`` and laid out here otherwise.
"""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "agents_table",
    "event_line",
    "images_table",
    "session_lines",
    "sessions_table",
    "shares_table",
    "story_lines",
    "timed_table",
]

Json = Mapping[str, Any]
_STYLE = {
    "RUNNING": "green",
    "PENDING": "yellow",
    "PULLING": "cyan",
    "REJECTED": "red",
    "ERROR": "red",
    "TERMINATED": "dim",
    "CANCELLED": "dim",
}
_UNITS = (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))


def mem(n: int | str) -> str:
    """Bytes for people: ``2G``, ``512M``; ``unlimited`` as it is."""
    if isinstance(n, str):
        return n
    for unit, size in _UNITS:
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + unit
    return f"{n}B"


def _e(value: object) -> str:
    """``value`` as text that rich prints as it is: names, reasons and commands come from
    users, and a ``[`` in them must not be read as markup."""
    from rich.markup import escape

    return escape(str(value))


def _table(title: str, *columns: str) -> "Table":
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, no_wrap=col != "NOTE")
    return t


def _pull_note(s: Json) -> str | None:
    """How far a PULLING session's image has come: ``pulling 3M/10M (30%)``."""
    pull = s.get("pull")
    if s["status"] != "PULLING" or not pull:
        return None
    if not pull["total"]:
        return f"pulling {mem(pull['current'])}"
    share = 100 * pull["current"] // pull["total"]
    return f"pulling {mem(pull['current'])}/{mem(pull['total'])} ({share}%)"


def _note(s: Json) -> str:
    note: str = (
        s.get("reason")
        or (s.get("waiting") if s["status"] == "PENDING" else None)
        or _pull_note(s)
        or ""
    )
    if s.get("exit_code") is not None:
        note = f"exit {s['exit_code']}" + (f"; {note}" if note else "")
    return _e(note)


def sessions_table(sessions: Iterable[Json], title: str = "sessions") -> "Table":
    t = _table(title, "ID", "STATUS", "USER", "IMAGE", "fGPU", "AGENT", "DEVICES", "NOTE")
    for s in sessions:
        devices = " ".join(f"gpu{d['gpu']}:{d['fgpu']}" for d in s["devices"])
        style = _STYLE.get(s["status"], "")
        status = f"[{style}]{s['status']}[/]" if style else s["status"]
        t.add_row(
            s["id"],
            status,
            _e(s.get("user") or s["owner"]),  # the access key where there is no user
            _e(s["image"]),
            s["requested"]["fgpu"],
            _e(s["agent"] or ""),
            devices,
            _note(s),
        )
    return t


def session_lines(s: Json) -> list[str]:
    """One session, field by field, with the moment it reached each status."""
    command = _e(" ".join(s["command"])) or "(image default)"
    lines = [
        f"[bold]{s['id']}[/]  {s['status']}" + (f"  ({_note(s)})" if _note(s) else ""),
        f"  owner     {_e(s.get('user') or s['owner'])} (key {_e(s['owner'])})"
        f" in {_e(s['project'])}" + (f"  name {_e(s['name'])}" if s.get("name") else ""),
        f"  image     {_e(s['image'])}  command {command}",
        f"  requested {s['requested']['fgpu']} fGPU, {s['requested']['cpu']} cpu, "
        f"{mem(s['requested']['mem'])} mem, priority {s['priority']}",
        f"  group     {_e(s['group'])}  type {s['type']}",
    ]
    if s.get("mounts"):
        mounts = ", ".join(
            f"{_e(m['name'])} at /home/work/{_e(m['name'])} ({'ro' if m['read_only'] else 'rw'})"
            for m in s["mounts"]
        )
        lines.append(f"  mounts    {mounts}")
    if s.get("agent"):
        devices = ", ".join(f"gpu{d['gpu']}: {d['fgpu']} fGPU" for d in s["devices"])
        lines.append(f"  agent     {_e(s['agent'])}  {devices}")
    if s.get("container"):
        lines.append(f"  container {s['container']}")
    for moment, at in s["times"].items():
        if at:
            lines.append(f"  {moment:<9} {at}")
    return lines


def agents_table(agents: Iterable[Json], title: str = "agents") -> "Table":
    t = _table(title, "AGENT", "STATE", "fGPU used/total", "CPU used/total", "MEM used/total")
    t.add_column("GPUS")
    for a in agents:
        gpus = " ".join(f"gpu{g['index']}[{g['allocated']}/{g['capacity']}]" for g in a["gpus"])
        alloc, cap = a["allocated"], a["capacity"]
        t.add_row(
            _e(a["id"]),
            "[red]LOST[/]" if a["lost"] else "[green]alive[/]",
            f"{alloc['fgpu']}/{cap['fgpu']}",
            f"{alloc['cpu']}/{cap['cpu']}",
            f"{mem(alloc['mem'])}/{mem(cap['mem'])}",
            gpus,
        )
    return t


def images_table(images: Iterable[Json], domain: str | None = None) -> "Table":
    """Each tag of each image name: its id and digest (shortened), size, agents, and
    whether ``domain`` may run it (no such column without a domain)."""
    title = f"images (allowed: in domain {_e(domain)})" if domain else "images"
    columns = ["NAME", "TAG", "IMAGE ID", "DIGEST", "SIZE", "AGENTS"]
    t = _table(title, *columns, *(["ALLOWED"] if domain else []))
    for image in images:
        for tag in image["tags"]:
            row = [
                _e(image["name"]),
                _e(tag["tag"]),
                " ".join(i.removeprefix("sha256:")[:12] for i in tag["ids"]),
                " ".join(d.removeprefix("sha256:")[:12] for d in tag["digests"]),
                mem(tag["size"]),
                _e(", ".join(tag["agents"])),
            ]
            if domain:
                row.append("yes" if tag.get("allowed") else "[red]no[/]")
            t.add_row(*row)
    return t


def shares_table(agents: Iterable[Json]) -> "Table":
    t = _table("fGPU shares", "AGENT", "GPU", "USED/TOTAL", "SHARES (session (owner): fGPU)")
    for a in agents:
        for g in a["gpus"]:
            shares = ", ".join(
                f"{sh['session']} ({_e(sh['owner'] or '?')}): {sh['fgpu']}" for sh in g["shares"]
            )
            used = f"{g['allocated']}/{g['capacity']}"
            t.add_row(_e(a["id"]), f"gpu{g['index']}", used, shares or "[dim]free[/]")
    return t


_PLUMBING = ("type", "id", "at", "actor", "causation_id", "correlation_id")


def event_line(e: Json) -> str:
    """``seq at type field=value ...`` (rich markup) for one API event."""
    data = e.get("data") or {}
    fields = " ".join(
        f"{k}={v}" for k, v in data.items() if k not in _PLUMBING and v not in (None, [], {})
    )
    if e.get("raw") is not None:
        fields = f"raw={e['raw'][:200]!r} error={e.get('error')}"
    return f"{e['seq']:>6} {e.get('at') or ''} [bold]{_e(e['type'])}[/] {_e(fields)}".rstrip()


def story_lines(history: Json) -> list[str]:
    """A session's story (``/v1/sessions/{id}/history``), one line an event."""
    s = history["session"]
    lines = [f"[bold]{s['id']}[/] of {_e(s['owner'])}: {s['status']}. {_e(history['summary'])}"]
    for line in history["story"]:
        text = f"{line['at']}  #{line['seq']:<6} {_e(line['actor'])}: {_e(line['text'])}"
        lines.append(text if line["effect"] else f"[dim]{text}[/]")
    return lines


_TIMED_ROWS = (
    ("sessions", ("sessions",)),
    ("placed", ("placed",)),
    ("rejected", ("rejected",)),
    ("cancelled", ("cancelled",)),
    ("still waiting", ("waiting",)),
    ("wait p50 (s)", ("wait_s", "p50")),
    ("wait p99 (s)", ("wait_s", "p99")),
    ("wait mean (s)", ("wait_s", "mean")),
    ("fGPU allocated, mean %", ("utilisation_pct", "mean")),
)


def timed_table(columns: Mapping[str, Json], title: str = "") -> "Table":
    """Timed replays' summaries (``services.sim.timed.Run.summary``) side by side, a
    column each (a policy, or what happened and what would have)."""
    t = _table(title, "", *columns)
    for label, path in _TIMED_ROWS:
        cells = []
        for summary in columns.values():
            value: Any = summary
            for key in path:
                value = value[key]
            cells.append("-" if value is None else f"{value:,}")
        t.add_row(label, *cells)
    return t


_TASK_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "upstream-failed": "red",
    "cancelled": "yellow",
    "skipped": "dim",
    "retry": "yellow",
    "attempt-failed": "yellow",
}


def runs_table(runs: Iterable[Json]) -> "Table":
    """Pipeline runs (``/v1/pipelines``), a row each: its tasks counted by state."""
    t = _table("pipeline runs", "RUN", "NAME", "STATUS", "OWNER", "TASKS", "REQUESTED")
    for r in runs:
        counts: dict[str, int] = {}
        for task in r["tasks"]:
            counts[task["status"]] = counts.get(task["status"], 0) + 1
        tasks = " ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        t.add_row(r["run_id"], _e(r["name"]), r["status"], _e(r["owner"]), tasks, r["requested_at"])
    return t


def run_lines(r: Json) -> list[str]:
    """One run (``/v1/pipelines/{id}``): its DAG, each task after those it depends on,
    with its state (coloured), attempt and session."""
    reason = f"  ({_e(r['reason'])})" if r["reason"] else ""
    lines = [f"[bold]{r['run_id']}[/]  {_e(r['name'])}  {r['status']}{reason}  round {r['round']}"]
    for task in r["tasks"]:
        style = _TASK_STYLE.get(task["status"], "cyan")
        deps = f"  <- {', '.join(map(_e, task['dependencies']))}" if task["dependencies"] else ""
        session = ""
        if task["session_id"]:
            session = f"  session {task['session_id']} {task['session_status'] or ''}".rstrip()
        attempt = f"  attempt {task['attempt']}/{task['max_attempts']}" if task["attempt"] else ""
        why = f"  ({_e(task['reason'])})" if task["reason"] else ""
        due = f"  next at {task['due']}" if task["due"] else ""
        state = f"[{style}]{task['status']:<15}[/]"
        lines.append(f"  {state} {_e(task['name'])}{deps}{attempt}{session}{why}{due}")
    return lines
