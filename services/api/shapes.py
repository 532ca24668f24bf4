"""Response bodies from projection rows (now) and from the fold's views (time travel).

Both give the same shapes, so a client reads the cluster of the past as it reads today's.
"""

import json
from collections.abc import Iterable, Sequence
from typing import Any

from events import Slots
from services.api.models import (
    Agent,
    Amounts,
    Device,
    DomainInfo,
    Event,
    Gpu,
    GpuMemory,
    ImageName,
    ImageTag,
    Mount,
    OwnerUsage,
    PolicyInfo,
    PullProgress,
    Session,
    Share,
    Times,
)
from services.domain.access.visibility import Scope
from services.domain.fold.cluster import ClusterState
from services.domain.records import AgentView, SessionView
from services.domain.resources import format_cpu, format_fgpu
from services.domain.status import HOLDS_ALLOCATION, MOMENT

__all__ = [
    "agent_from_row",
    "agent_from_view",
    "amounts",
    "domains_from_rows",
    "event_from_row",
    "images_from_agents",
    "owners_from_rows",
    "owners_from_state",
    "policy_from_row",
    "session_from_row",
    "session_from_view",
]

Row = dict[str, Any]


def amounts(fgpu: int, cpu: int, mem: int) -> Amounts:
    return Amounts(fgpu=format_fgpu(fgpu), cpu=format_cpu(cpu), mem=mem)


def _slots(s: Slots) -> Amounts:
    return amounts(s.fgpu, s.cpu, s.mem)


def session_from_row(r: Row, memory: Sequence[Row] = ()) -> Session:
    """The session of its projection row; ``memory``: its devices' last usage samples
    and how busy each was (``queries.last_gpu_memory``), shown while it holds them."""
    return Session(
        id=r["session_id"],
        name=r["name"],
        owner=r["owner"],
        user=r["user"],
        project=r["project"],
        domain=r["domain"],
        group=r["resource_group"],
        type=r["session_type"],
        status=r["status"],
        image=r["image"],
        command=list(r["command"] or ()),
        priority=r["priority"],
        requested=amounts(r["req_fgpu"], r["req_cpu"], r["req_mem"]),
        holds_allocation=r["holds_allocation"],
        agent=r["agent_id"],
        devices=[Device(gpu=d["gpu_index"], fgpu=format_fgpu(d["fgpu"])) for d in r["devices"]],
        mounts=[
            Mount(name=m["name"], read_only=m["read_only"], at=m.get("at")) for m in r["mounts"]
        ],
        container=r["container_id"],
        exit_code=r["exit_code"],
        reason=r["reason"],
        waiting=r["waiting"],
        invalid=r["invalid"],
        correlation_id=r["correlation_id"],
        times=Times(
            requested=r["requested_at"],
            admitted=r["admitted_at"],
            scheduled=r["scheduled_at"],
            preparing=r["preparing_at"],
            pulling=r["pulling_at"],
            running=r["running_at"],
            terminating=r["terminating_at"],
            ended=r["ended_at"],
        ),
        pull=(
            PullProgress(current=r["pulled"], total=r["pull_total"])
            if r["pulling_at"] is not None
            else None
        ),
        gpu_memory=[
            GpuMemory(
                gpu=u["gpu_index"],
                used=u["mem_used"],
                limit=u["mem_limit"],
                at=u["at"],
                charged_ns=u["charged_ns"],
                busy=u["busy"],
            )
            for u in memory
        ]
        if r["holds_allocation"]
        else [],
    )


def session_from_view(v: SessionView) -> Session:
    """The session of the fold's view: as its projection row says it (one shape)."""
    return session_from_row(_session_row(v))


def _session_row(v: SessionView) -> Row:
    """``v`` as a row of the sessions table (the columns ``session_from_row`` reads)."""
    row: Row = {f"{moment}_at": None for moment in MOMENT.values()}
    row.update((f"{MOMENT[t.status]}_at", t.at) for t in v.history)  # a later one wins
    row.update(
        session_id=v.session_id,
        name=v.name,
        owner=v.owner,
        user=v.user,
        project=v.project,
        domain=v.domain,
        resource_group=v.group,
        session_type=v.session_type.value,
        status=v.status.value,
        image=v.image,
        command=v.command,
        priority=v.priority,
        req_fgpu=v.slots.fgpu,
        req_cpu=v.slots.cpu,
        req_mem=v.slots.mem,
        holds_allocation=v.status in HOLDS_ALLOCATION,
        agent_id=v.agent_id,
        devices=[{"gpu_index": d.gpu_index, "fgpu": d.fgpu} for d in v.devices],
        mounts=[{"name": m.name, "read_only": m.read_only, "at": m.at} for m in v.mounts],
        container_id=v.container_id,
        exit_code=v.exit_code,
        reason=v.reason,
        waiting=v.waiting,
        invalid=v.invalid,
        correlation_id=v.correlation_id,
        pulled=v.pulled,
        pull_total=v.pull_total,
    )
    return row


def agent_from_row(a: Row) -> Agent:
    return Agent(
        id=a["agent_id"],
        lost=a["lost"],
        runtime=a["runtime"],
        group=a["resource_group"],
        fgpu_per_gpu=format_fgpu(a["fgpu_per_gpu"]),
        capacity=amounts(a["cap_fgpu"], a["cap_cpu"], a["cap_mem"]),
        allocated=amounts(a["alloc_fgpu"], a["alloc_cpu"], a["alloc_mem"]),
        free=amounts(a["free_fgpu"], a["free_cpu"], a["free_mem"]),
        sessions=a["sessions"],
        images=list(a["images"] or ()),
        gpus=[
            Gpu(
                index=g["gpu_index"],
                model=g["model"],
                uuid=g["uuid"],
                mem=g["mem"],
                sm_count=g["sm_count"],
                capacity=format_fgpu(g["capacity"]),
                allocated=format_fgpu(g["allocated"]),
                free=format_fgpu(g["free"]),
                shares=[
                    Share(session=s["session_id"], owner=s["owner"], fgpu=format_fgpu(s["fgpu"]))
                    for s in g["shares"]
                ],
            )
            for g in a["gpus"]
        ],
    )


def agent_from_view(a: AgentView, owners: dict[str, str]) -> Agent:
    """``owners``: session id -> owner, for the shares' labels."""
    return Agent(
        id=a.agent_id,
        lost=a.lost,
        runtime=a.runtime,
        group=a.group,
        fgpu_per_gpu=format_fgpu(a.fgpu_per_gpu),
        capacity=_slots(a.capacity),
        allocated=_slots(a.allocated),
        free=_slots(a.free),
        sessions=len(a.sessions),
        images=sorted(a.images),
        gpus=[
            Gpu(
                index=index,
                model=g.info.model,
                uuid=g.info.uuid,
                mem=g.info.mem,
                sm_count=g.info.sm_count,
                capacity=format_fgpu(g.capacity),
                allocated=format_fgpu(g.allocated),
                free=format_fgpu(g.free),
                shares=[
                    Share(session=sid, owner=owners.get(sid), fgpu=format_fgpu(q))
                    for sid, q in g.shares.items()
                ],
            )
            for index, g in sorted(a.gpus.items())
        ],
    )


def owners_from_rows(rows: Iterable[Row]) -> list[OwnerUsage]:
    return [
        OwnerUsage(
            owner=r["owner"],
            sessions=r["alloc_sessions"],
            allocated=amounts(r["alloc_fgpu"], r["alloc_cpu"], r["alloc_mem"]),
            quota_sessions=r["quota_sessions"],
            quota=amounts(r["quota_fgpu"], r["quota_cpu"], r["quota_mem"]),
        )
        for r in rows
    ]


def owners_from_state(
    s: ClusterState, sessions: Iterable[SessionView], scope: Scope
) -> list[OwnerUsage]:
    """Per owner of ``sessions`` (those the viewer sees) and per access key in ``scope``:
    what its sessions hold on agents, and the quota it holds in ``s``. A key out of scope
    is not named, even as holding nothing."""
    held: dict[str, tuple[int, Slots]] = {}
    for v in sessions:
        if v.status in HOLDS_ALLOCATION:
            n, total = held.get(v.owner, (0, Slots()))
            held[v.owner] = (
                n + 1,
                Slots(
                    cpu=total.cpu + v.slots.cpu,
                    mem=total.mem + v.slots.mem,
                    fgpu=total.fgpu + v.slots.fgpu,
                ),
            )
    out = []
    # The owners of ``sessions`` are in scope already (the caller chose them).
    for owner in sorted(set(held) | {o for o in s.usage if scope.sees_key(o)}):
        n, alloc = held.get(owner, (0, Slots()))
        quota = s.usage.get(owner)
        out.append(
            OwnerUsage(
                owner=owner,
                sessions=n,
                allocated=_slots(alloc),
                quota_sessions=quota.sessions if quota else 0,
                quota=_slots(quota.slots if quota else Slots()),
            )
        )
    return out


def event_from_row(r: Row) -> Event:
    payload = bytes(r["payload"])
    data: dict[str, Any] | None = None
    raw: str | None = None
    try:
        decoded = json.loads(payload)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and r["type"] != "malformed":
        data = decoded
    else:
        raw = payload.decode("utf-8", errors="replace")
    return Event(
        seq=r["seq"],
        subject=r["subject"],
        type=r["type"],
        id=r["event_id"],
        at=r["happened_at"],
        actor=r["actor"],
        causation_id=r["causation_id"],
        correlation_id=r["correlation_id"],
        session_id=r["session_id"],
        agent_id=r["agent_id"],
        owner=r["owner"],
        error=r["error"],
        data=data,
        raw=raw,
    )


def domains_from_rows(rows: Iterable[Row]) -> list[DomainInfo]:
    found: dict[str, list[str]] = {}
    for r in rows:
        projects = found.setdefault(r["domain"], [])
        if r["project"] is not None:
            projects.append(r["project"])
    return [DomainInfo(domain=d, projects=p) for d, p in found.items()]


def policy_from_row(r: Row) -> PolicyInfo:
    def maybe(prefix: str) -> Amounts | None:
        values = (r[f"{prefix}_fgpu"], r[f"{prefix}_cpu"], r[f"{prefix}_mem"])
        return None if values[0] is None else amounts(*values)

    return PolicyInfo(
        level=r["level"],
        target=r["target"],
        max_sessions=r["max_sessions"],
        max_pending_sessions=r["max_pending_sessions"],
        max_pending=maybe("max_pending"),
        total=maybe("total"),
        max_priority=r["max_priority"],
    )


def images_from_agents(agents: Iterable[Row]) -> list[ImageName]:
    """The images of agent rows, by name and tag: which agents hold each, the engines'
    ids, the registry's digests and the size. An agent that registered before images had
    details gives its tags alone."""
    tags: dict[str, dict[str, Any]] = {}
    for a in agents:
        details = a.get("image_details") or [
            {"ref": ref, "id": None, "digest": None, "size": 0} for ref in a["images"] or ()
        ]
        for d in details:
            t = tags.setdefault(d["ref"], {"ids": set(), "digests": set(), "size": 0, "agents": []})
            t["ids"].update([d["id"]] if d["id"] else [])
            t["digests"].update([d["digest"]] if d["digest"] else [])
            t["size"] = max(t["size"], d["size"] or 0)
            t["agents"].append(a["agent_id"])
    names: dict[str, list[ImageTag]] = {}
    for ref in sorted(tags):
        name, tag = _name_and_tag(ref)
        t = tags[ref]
        names.setdefault(name, []).append(
            ImageTag(
                tag=tag,
                ref=ref,
                ids=sorted(t["ids"]),
                digests=sorted(t["digests"]),
                size=t["size"],
                agents=sorted(t["agents"]),
            )
        )
    return [ImageName(name=n, tags=names[n]) for n in sorted(names)]


def _name_and_tag(ref: str) -> tuple[str, str]:
    """``host:port/path:tag`` -> (``host:port/path``, ``tag``); no tag: ``latest``."""
    head, _, last = ref.rpartition("/")
    if ":" not in last:
        return ref, "latest"
    path, _, tag = last.partition(":")
    return (f"{head}/{path}" if head else path), tag
