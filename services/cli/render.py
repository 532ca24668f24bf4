"""How the CLI shows sessions, agents and events: rich tables, or JSON for scripts."""

from typing import Any

import msgspec
from rich.table import Table

from events import Malformed, Record
from services.domain.resources import format_cpu, format_fgpu, format_mem
from services.domain.state import AgentView, ClusterState, SessionView

__all__ = ["agent_dict", "agents_table", "record_dict", "session_dict", "sessions_table"]

_STYLE = {
    "RUNNING": "green",
    "PENDING": "yellow",
    "REJECTED": "red",
    "ERROR": "red",
    "TERMINATED": "dim",
    "CANCELLED": "dim",
}


def session_dict(v: SessionView, *, history: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": v.session_id,
        "name": v.name,
        "owner": v.owner,
        "status": v.status.value,
        "image": v.image,
        "command": list(v.command),
        "fgpu": format_fgpu(v.slots.fgpu),
        "cpu": format_cpu(v.slots.cpu),
        "mem": v.slots.mem,
        "priority": v.priority,
        "agent": v.agent_id,
        "devices": [{"gpu": d.gpu_index, "fgpu": format_fgpu(d.fgpu)} for d in v.devices],
        "container": v.container_id,
        "exit_code": v.exit_code,
        "reason": v.reason,
        "waiting": v.waiting,
        "requested_at": v.requested_at.isoformat(),
    }
    if history:
        out["history"] = [
            {"status": t.status.value, "at": t.at.isoformat(), "seq": t.seq} for t in v.history
        ]
    return out


def sessions_table(sessions: list[SessionView], title: str = "sessions") -> Table:
    t = Table(title=title)
    for col in ("ID", "STATUS", "OWNER", "IMAGE", "fGPU", "AGENT", "DEVICES"):
        t.add_column(col, no_wrap=True)
    t.add_column("NOTE")
    for v in sessions:
        devices = " ".join(f"gpu{d.gpu_index}:{format_fgpu(d.fgpu)}" for d in v.devices)
        note = v.reason or (v.waiting if v.status.value == "PENDING" else None) or ""
        if v.exit_code is not None:
            note = f"exit {v.exit_code}" + (f"; {note}" if note else "")
        style = _STYLE.get(v.status.value, "")
        t.add_row(
            v.session_id,
            f"[{style}]{v.status.value}[/]" if style else v.status.value,
            v.owner,
            v.image,
            format_fgpu(v.slots.fgpu),
            v.agent_id or "",
            devices,
            note,
        )
    return t


def agent_dict(a: AgentView) -> dict[str, Any]:
    return {
        "id": a.agent_id,
        "lost": a.lost,
        "runtime": a.runtime,
        "fgpu_per_gpu": format_fgpu(a.fgpu_per_gpu),
        "capacity": {
            "fgpu": format_fgpu(a.capacity.fgpu),
            "cpu": format_cpu(a.capacity.cpu),
            "mem": a.capacity.mem,
        },
        "allocated": {
            "fgpu": format_fgpu(a.allocated.fgpu),
            "cpu": format_cpu(a.allocated.cpu),
            "mem": a.allocated.mem,
        },
        "gpus": [
            {
                "index": g.info.index,
                "model": g.info.model,
                "uuid": g.info.uuid,
                "mem": g.info.mem,
                "capacity": format_fgpu(g.capacity),
                "allocated": format_fgpu(g.allocated),
                "shares": {sid: format_fgpu(q) for sid, q in g.shares.items()},
            }
            for g in a.gpus.values()
        ],
        "images": sorted(a.images),
    }


def agents_table(s: ClusterState) -> Table:
    t = Table(title="agents")
    for col in ("AGENT", "STATE", "fGPU used/total", "CPU used/total", "MEM used/total", "GPUS"):
        t.add_column(col)
    for a in s.agents.values():
        gpus = " ".join(
            f"gpu{g.info.index}[{format_fgpu(g.allocated)}/{format_fgpu(g.capacity)}]"
            for g in a.gpus.values()
        )
        t.add_row(
            a.agent_id,
            "[red]LOST[/]" if a.lost else "[green]alive[/]",
            f"{format_fgpu(a.allocated.fgpu)}/{format_fgpu(a.capacity.fgpu)}",
            f"{format_cpu(a.allocated.cpu)}/{format_cpu(a.capacity.cpu)}",
            f"{format_mem(a.allocated.mem)}/{format_mem(a.capacity.mem)}",
            gpus,
        )
    return t


def record_dict(r: Record) -> dict[str, Any]:
    if isinstance(r.event, Malformed):
        event: Any = {"type": "malformed", "error": r.event.error}
    else:
        event = msgspec.to_builtins(r.event)
    return {"seq": r.seq, "subject": r.subject, "event": event}
