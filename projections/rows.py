"""Rows of the projection tables, as Arrow tables, from records and the fold's views.

Pure: no DuckDB, no I/O. Every row is a function of what it describes (a record, a
session's view, an agent's view), never of how the log was cut into batches, so a
projection built batch by batch and one rebuilt in one go hold the same rows.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime

import pyarrow as pa

from events import GpuUsageSampled, PolicySet
from projections.schema import ARROW
from services.domain.state import AgentView, ClusterState, OwnerUsage, SessionView
from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus
from services.ports import Malformed, Record

__all__ = [
    "agent_tables",
    "changed_owners",
    "event_table",
    "history_table",
    "owner_table",
    "policy_table",
    "session_table",
    "snapshot_table",
    "usage_table",
]

S = SessionStatus
# Which timestamp column each status sets (the ended ones share ``ended_at``).
_STAMP = {
    S.REQUESTED: "requested_at",
    S.PENDING: "admitted_at",
    S.SCHEDULED: "scheduled_at",
    S.PREPARING: "preparing_at",
    S.RUNNING: "running_at",
    S.TERMINATING: "terminating_at",
    **{status: "ended_at" for status in ENDED},
}
_STAMP_COLUMNS = tuple(dict.fromkeys(_STAMP.values()))


def _tag(event: object) -> str:
    tag = type(event).__struct_config__.tag  # type: ignore[attr-defined]
    return str(tag)


def event_table(
    records: Sequence[Record], payloads: Sequence[bytes], errors: Sequence[str | None]
) -> pa.Table:
    """The audit rows of ``records``; ``payloads`` their JSON, ``errors`` the fold's verdict."""
    cols: dict[str, list[object]] = {name: [] for name in ARROW["events"].names}
    for r in records:
        e = r.event
        cols["seq"].append(r.seq)
        cols["subject"].append(r.subject)
        if isinstance(e, Malformed):
            for name in ("event_id", "happened_at", "actor", "causation_id", "correlation_id"):
                cols[name].append(None)
            cols["type"].append("malformed")
            cols["session_id"].append(None)
            cols["agent_id"].append(None)
            cols["owner"].append(None)
            continue
        cols["type"].append(_tag(e))
        cols["event_id"].append(e.id)
        cols["happened_at"].append(e.at)
        cols["actor"].append(e.actor)
        cols["causation_id"].append(e.causation_id)
        cols["correlation_id"].append(e.correlation_id)
        cols["session_id"].append(getattr(e, "session_id", None))
        cols["agent_id"].append(getattr(e, "agent_id", None))
        cols["owner"].append(getattr(e, "owner", None) or getattr(e, "requester", None))
    cols["error"] = list(errors)
    cols["payload"] = list(payloads)
    return pa.table(cols, schema=ARROW["events"])


def session_table(views: Iterable[SessionView]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ARROW["sessions"].names}
    for v in views:
        stamps: dict[str, datetime] = {}
        for t in v.history:
            stamps[_STAMP[t.status]] = t.at
        cols["session_id"].append(v.session_id)
        cols["name"].append(v.name)
        cols["owner"].append(v.owner)
        cols["image"].append(v.image)
        cols["command"].append(list(v.command))
        cols["priority"].append(v.priority)
        cols["status"].append(v.status.value)
        cols["req_cpu"].append(v.slots.cpu)
        cols["req_mem"].append(v.slots.mem)
        cols["req_fgpu"].append(v.slots.fgpu)
        cols["holds_allocation"].append(v.status in HOLDS_ALLOCATION)
        cols["agent_id"].append(v.agent_id)
        cols["devices"].append([{"gpu_index": d.gpu_index, "fgpu": d.fgpu} for d in v.devices])
        cols["container_id"].append(v.container_id)
        cols["exit_code"].append(v.exit_code)
        cols["reason"].append(v.reason)
        cols["waiting"].append(v.waiting)
        cols["invalid"].append(v.invalid)
        cols["request_id"].append(v.request_id)
        cols["correlation_id"].append(v.correlation_id)
        cols["arrival_seq"].append(v.arrival_seq)
        cols["last_seq"].append(v.history[-1].seq if v.history else v.arrival_seq)
        for name in _STAMP_COLUMNS:
            cols[name].append(stamps.get(name))
    return pa.table(cols, schema=ARROW["sessions"])


def history_table(views: Iterable[SessionView], after_seq: int) -> pa.Table:
    """The transitions of ``views`` made by records after ``after_seq``."""
    cols: dict[str, list[object]] = {name: [] for name in ARROW["session_history"].names}
    for v in views:
        new = []
        for t in reversed(v.history):
            if t.seq <= after_seq:
                break
            new.append(t)
        for t in reversed(new):
            cols["session_id"].append(v.session_id)
            cols["seq"].append(t.seq)
            cols["happened_at"].append(t.at)
            cols["status"].append(t.status.value)
            cols["event_id"].append(t.event_id)
    return pa.table(cols, schema=ARROW["session_history"])


def agent_tables(agents: Iterable[AgentView]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Rows of ``agents``, of their GPUs, and of the fGPU shares on each GPU."""
    a_cols: dict[str, list[object]] = {name: [] for name in ARROW["agents"].names}
    g_cols: dict[str, list[object]] = {name: [] for name in ARROW["gpus"].names}
    s_cols: dict[str, list[object]] = {name: [] for name in ARROW["gpu_shares"].names}
    for a in agents:
        free = a.free
        for name, value in (
            ("agent_id", a.agent_id),
            ("runtime", a.runtime),
            ("lost", a.lost),
            ("fgpu_per_gpu", a.fgpu_per_gpu),
            ("cap_cpu", a.capacity.cpu),
            ("cap_mem", a.capacity.mem),
            ("cap_fgpu", a.capacity.fgpu),
            ("alloc_cpu", a.allocated.cpu),
            ("alloc_mem", a.allocated.mem),
            ("alloc_fgpu", a.allocated.fgpu),
            ("free_cpu", free.cpu),
            ("free_mem", free.mem),
            ("free_fgpu", free.fgpu),
            ("sessions", len(a.sessions)),
            ("images", sorted(a.images)),
        ):
            a_cols[name].append(value)
        for index, g in a.gpus.items():
            allocated = g.allocated
            for name, value in (
                ("agent_id", a.agent_id),
                ("gpu_index", index),
                ("uuid", g.info.uuid),
                ("model", g.info.model),
                ("mem", g.info.mem),
                ("sm_count", g.info.sm_count),
                ("capacity", g.capacity),
                ("allocated", allocated),
                ("free", g.capacity - allocated),
            ):
                g_cols[name].append(value)
            for session_id, quanta in g.shares.items():
                s_cols["agent_id"].append(a.agent_id)
                s_cols["gpu_index"].append(index)
                s_cols["session_id"].append(session_id)
                s_cols["fgpu"].append(quanta)
    return (
        pa.table(a_cols, schema=ARROW["agents"]),
        pa.table(g_cols, schema=ARROW["gpus"]),
        pa.table(s_cols, schema=ARROW["gpu_shares"]),
    )


def owner_table(usage: Iterable[tuple[str, OwnerUsage]]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ARROW["owners"].names}
    for owner, u in usage:
        cols["owner"].append(owner)
        cols["sessions"].append(u.sessions)
        cols["cpu"].append(u.slots.cpu)
        cols["mem"].append(u.slots.mem)
        cols["fgpu"].append(u.slots.fgpu)
    return pa.table(cols, schema=ARROW["owners"])


def policy_table(policies: Iterable[PolicySet]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ARROW["policies"].names}
    for p in policies:
        limits = p.max_slots
        cols["owner"].append(p.owner)
        cols["max_sessions"].append(p.max_concurrent_sessions)
        cols["max_cpu"].append(None if limits is None else limits.cpu)
        cols["max_mem"].append(None if limits is None else limits.mem)
        cols["max_fgpu"].append(None if limits is None else limits.fgpu)
        cols["set_at"].append(p.at)
    return pa.table(cols, schema=ARROW["policies"])


def usage_table(samples: Iterable[tuple[int, GpuUsageSampled]]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ARROW["gpu_usage"].names}
    for seq, e in samples:
        cols["seq"].append(seq)
        cols["happened_at"].append(e.at)
        for name in cols:
            if name not in ("seq", "happened_at"):
                cols[name].append(getattr(e, name))
    return pa.table(cols, schema=ARROW["gpu_usage"])


def snapshot_table(snapshots: Sequence[tuple[int, bytes]]) -> pa.Table:
    return pa.table(
        {"seq": [s for s, _ in snapshots], "state": [b for _, b in snapshots]},
        schema=ARROW["snapshots"],
    )


def changed_owners(s: ClusterState, owners: Iterable[str]) -> list[tuple[str, OwnerUsage]]:
    """The quota rows of ``owners`` that the fold knows (sorted, for stable output)."""
    return [(o, s.usage[o]) for o in sorted(set(owners)) if o in s.usage]
