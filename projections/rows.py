"""Rows of the projection tables, as Arrow tables, from records and the fold's views.

Pure: no DuckDB, no I/O. Every row is a function of what it describes (a record, a
session's view, an agent's view), never of how the log was cut into batches, so a
projection built batch by batch and one rebuilt in one go hold the same rows.
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec
import pyarrow as pa

from events import (
    AdminRequested,
    GpuUsageSampled,
    PolicyLevel,
    PolicySet,
    ResourcePolicy,
    ServeRequested,
    SessionDestroyRequested,
)
from projections.schema import ROWS
from services.domain.records import AgentView, SessionView, Transition
from services.domain.serving.shape import endpoint_detail
from services.domain.serving.state import ServingState
from services.domain.status import HOLDS_ALLOCATION, MOMENT
from services.domain.tenancy.model import Tenancy

__all__ = [
    "admin_answer_table",
    "agent_table",
    "destroy_table",
    "event_table",
    "history_table",
    "packed",
    "policy_table",
    "session_table",
    "snapshot_table",
    "tenancy_tables",
    "usage_table",
]

# Which timestamp column each status sets (the ended ones share ``ended_at``).
_STAMP = {status: f"{moment}_at" for status, moment in MOMENT.items()}
_STAMP_COLUMNS = tuple(dict.fromkeys(_STAMP.values()))


# A list column as the JSON text the table stores (``schema.ROWS``): Arrow takes the
# UTF-8 bytes for text as they are.
_encode = msgspec.json.Encoder().encode


def event_table(
    seqs: Sequence[int],
    subjects: Sequence[str],
    kinds: Sequence[str | None],
    errors: Sequence[str | None],
    payloads: "Sequence[bytes] | pa.Array[Any]",
) -> pa.Table:
    """The audit rows of a batch as far as Python builds them (``schema.ROWS``): DuckDB
    reads the rest from ``payloads``, their JSON. ``kinds``: None where the payload's tag
    says the type ("malformed" where it is no event); ``errors``: the fold's verdicts."""
    return pa.table([seqs, subjects, kinds, errors, payloads], schema=ROWS["events"])


def packed(body: bytes, offsets: bytes, count: int) -> "pa.Array[Any]":
    """The ``count`` values stored end to end in ``body``, value i from ``offsets[i]`` to
    ``offsets[i + 1]`` (native int64s), as a binary column that shares ``body``'s memory.

    Raises ValueError if the offsets do not describe ``count`` values within ``body``.
    """
    try:
        column = pa.Array.from_buffers(
            pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(body)]
        )
        column.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ValueError(f"packed values out of bounds: {e}") from e
    return column


def session_table(views: Iterable[SessionView]) -> pa.Table:
    vs = list(views)
    # One pass over the transitions; a later one of the same column wins.
    stamps: dict[str, list[datetime | None]] = {name: [None] * len(vs) for name in _STAMP_COLUMNS}
    for i, v in enumerate(vs):
        for t in v.history:
            stamps[_STAMP[t.status]][i] = t.at
    cols: dict[str, list[Any]] = {
        "session_id": [v.session_id for v in vs],
        "name": [v.name for v in vs],
        "owner": [v.owner for v in vs],
        "image": [v.image for v in vs],
        "command": [_encode(v.command) for v in vs],
        "priority": [v.priority for v in vs],
        "status": [v.status for v in vs],
        "req_cpu": [v.slots.cpu for v in vs],
        "req_mem": [v.slots.mem for v in vs],
        "req_fgpu": [v.slots.fgpu for v in vs],
        "holds_allocation": [v.status in HOLDS_ALLOCATION for v in vs],
        "agent_id": [v.agent_id for v in vs],
        # DevicePlacement encodes as {"gpu_index": .., "fgpu": ..}
        "devices": [_encode(v.devices) for v in vs],
        "mounts": [_encode(v.mounts) for v in vs],  # VfolderMount: {"name", "read_only", "at"}
        "container_id": [v.container_id for v in vs],
        "exit_code": [v.exit_code for v in vs],
        "reason": [v.reason for v in vs],
        "user": [v.user for v in vs],
        "project": [v.project for v in vs],
        "domain": [v.domain for v in vs],
        "resource_group": [v.group for v in vs],
        "session_type": [v.session_type.value for v in vs],
        "waiting": [v.waiting for v in vs],
        "pulled": [v.pulled for v in vs],
        "pull_total": [v.pull_total for v in vs],
        "invalid": [v.invalid for v in vs],
        "request_id": [v.request_id for v in vs],
        "correlation_id": [v.correlation_id for v in vs],
        "arrival_seq": [v.arrival_seq for v in vs],
        "last_seq": [v.history[-1].seq if v.history else v.arrival_seq for v in vs],
    }
    cols.update(stamps)
    return pa.table(cols, schema=ROWS["sessions"])


def history_table(views: Iterable[SessionView], after_seq: int) -> pa.Table:
    """The transitions of ``views`` made by records after ``after_seq``."""
    sids: list[str] = []
    new: list[Transition] = []
    for v in views:
        # A history is in sequence order: most are new from their first transition on.
        h = v.history
        if h and h[0].seq <= after_seq:
            h = [t for t in h if t.seq > after_seq]
        new += h
        sids += [v.session_id] * len(h)
    return pa.table(
        {
            "session_id": sids,
            "seq": [t.seq for t in new],
            "happened_at": [t.at for t in new],
            "status": [t.status for t in new],  # a StrEnum: its members are the text
            "event_id": [t.event_id for t in new],
        },
        schema=ROWS["session_history"],
    )


def agent_table(agents: Iterable[AgentView]) -> pa.Table:
    """Rows of ``agents``, each with its GPUs and the fGPU shares on each GPU."""
    cols: dict[str, list[object]] = {name: [] for name in ROWS["agents"].names}
    for a in agents:
        free = a.free
        for name, value in (
            ("agent_id", a.agent_id),
            ("runtime", a.runtime),
            ("resource_group", a.group),
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
            ("images", _encode(sorted(a.images))),
            ("image_details", _encode(sorted(a.image_details, key=lambda i: i.ref))),
            ("registry", a.registry),
        ):
            cols[name].append(value)
        gpus = []
        for index, g in a.gpus.items():
            allocated = g.allocated
            gpus.append(
                {
                    "gpu_index": index,
                    "uuid": g.info.uuid,
                    "model": g.info.model,
                    "mem": g.info.mem,
                    "sm_count": g.info.sm_count,
                    "capacity": g.capacity,
                    "allocated": allocated,
                    "free": g.capacity - allocated,
                    "shares": [{"session_id": k, "fgpu": q} for k, q in g.shares.items()],
                }
            )
        cols["gpus"].append(_encode(gpus))
    return pa.table(cols, schema=ROWS["agents"])


def policy_table(policies: Iterable[PolicySet]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ROWS["policies"].names}
    for p in policies:
        limits = p.max_slots
        cols["owner"].append(p.owner)
        cols["max_sessions"].append(p.max_concurrent_sessions)
        cols["max_cpu"].append(None if limits is None else limits.cpu)
        cols["max_mem"].append(None if limits is None else limits.mem)
        cols["max_fgpu"].append(None if limits is None else limits.fgpu)
        cols["set_at"].append(p.at)
    return pa.table(cols, schema=ROWS["policies"])


def usage_table(samples: Iterable[tuple[int, GpuUsageSampled]]) -> pa.Table:
    cols: dict[str, list[object]] = {name: [] for name in ROWS["gpu_usage"].names}
    for seq, e in samples:
        cols["seq"].append(seq)
        cols["happened_at"].append(e.at)
        for name in cols:
            if name not in ("seq", "happened_at"):
                cols[name].append(getattr(e, name))
    return pa.table(cols, schema=ROWS["gpu_usage"])


def snapshot_table(snapshots: Sequence[tuple[int, bytes]]) -> pa.Table:
    return pa.table(
        {"seq": [s for s, _ in snapshots], "state": [b for _, b in snapshots]},
        schema=ROWS["snapshots"],
    )


def destroy_table(
    answered: Mapping[str, tuple[int, SessionDestroyRequested, str | None]],
) -> pa.Table:
    """The destroy requests answered in a batch (``ClusterState.answered``)."""
    items = sorted(answered.items(), key=lambda item: item[1][0])
    return pa.table(
        {
            "request_id": [rid for rid, _ in items],
            "session_id": [request.session_id for _, (_, request, _) in items],
            "requester": [request.requester for _, (_, request, _) in items],
            "answered_seq": [seq for _, (seq, _, _) in items],
            "refused": [refused for _, (_, _, refused) in items],
        },
        schema=ROWS["destroys"],
    )


def admin_answer_table(
    answered: Mapping[str, tuple[int, AdminRequested | ServeRequested, tuple[str, str] | None]],
) -> pa.Table:
    """The admin and serve requests answered in a batch (``ClusterState.admin_answered``)."""
    items = sorted(answered.values(), key=lambda item: item[0])
    return pa.table(
        {
            "request_id": [request.id for _, request, _ in items],
            "requester": [request.requester for _, request, _ in items],
            "command": [str(request.command.__struct_config__.tag) for _, request, _ in items],
            "applied": [refused is None for _, _, refused in items],
            "code": [refused[0] if refused else None for _, _, refused in items],
            "reason": [refused[1] if refused else None for _, _, refused in items],
            "answered_seq": [seq for seq, _, _ in items],
        },
        schema=ROWS["admin_answers"],
    )


def tenancy_tables(t: Tenancy) -> dict[str, pa.Table]:
    """The tenancy's rows, whole: domains and projects, users, keypairs, policies."""
    domains = [(d, p) for d, projects in sorted(t.domains.items()) for p in projects or [None]]
    users = [t.users[k] for k in sorted(t.users)]
    keys = [t.keypairs[k] for k in sorted(t.keypairs)]
    policies = sorted(t.policies.items())
    return {
        "domains": pa.table(
            {"domain": [d for d, _ in domains], "project": [p for _, p in domains]},
            schema=ROWS["domains"],
        ),
        "users": pa.table(
            {
                "user": [u.user for u in users],
                "domain": [u.domain for u in users],
                "role": [u.role.value for u in users],
                "projects": [list(u.projects) for u in users],
                "default_project": [u.default_project for u in users],
            },
            schema=ROWS["users"],
        ),
        "keypairs": pa.table(
            {
                "access_key": [k.access_key for k in keys],
                "user": [k.user for k in keys],
                "service": [k.service for k in keys],
                "revoked": [k.revoked for k in keys],
            },
            schema=ROWS["keypairs"],
        ),
        "level_policies": pa.table(_policy_columns(policies), schema=ROWS["level_policies"]),
    }


def _policy_columns(
    policies: Sequence[tuple[tuple[PolicyLevel, str], ResourcePolicy]],
) -> dict[str, list[object]]:
    cols: dict[str, list[object]] = {name: [] for name in ROWS["level_policies"].names}
    for (level, target), p in policies:
        pending, total = p.max_pending_slots, p.total_slots
        values: dict[str, object] = {
            "level": level.value,
            "target": target,
            "max_sessions": p.max_sessions,
            "max_pending_sessions": p.max_pending_sessions,
            "max_pending_cpu": pending.cpu if pending else None,
            "max_pending_mem": pending.mem if pending else None,
            "max_pending_fgpu": pending.fgpu if pending else None,
            "total_cpu": total.cpu if total else None,
            "total_mem": total.mem if total else None,
            "total_fgpu": total.fgpu if total else None,
            "max_priority": p.max_priority,
        }
        for name, value in values.items():
            cols[name].append(value)
    return cols


def endpoint_table(s: ServingState) -> pa.Table:
    """The endpoints not removed, whole, by name (``endpoint_detail`` as JSON)."""
    live = sorted((ep for ep in s.endpoints.values() if not ep.removed), key=lambda ep: ep.name)
    return pa.table(
        {
            "endpoint_id": [ep.endpoint_id for ep in live],
            "name": [ep.name for ep in live],
            "owner": [ep.owner for ep in live],
            "domain": [ep.domain for ep in live],
            "project": [ep.project for ep in live],
            "detail": [msgspec.json.encode(endpoint_detail(ep)).decode() for ep in live],
        },
        schema=ROWS["endpoints"],
    )
