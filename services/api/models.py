"""The read API's response bodies (they are its OpenAPI schema).

Amounts are exact decimal strings as users write them (``"1.5"`` fGPU, ``"0.5"`` CPU
cores); memory is in bytes. Times are RFC 3339 in UTC.
"""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "AdminAnswer",
    "Agent",
    "AgentCount",
    "AgentList",
    "AgentUsage",
    "Amounts",
    "ClusterAt",
    "DestroyAnswer",
    "Device",
    "DomainInfo",
    "Endpoint",
    "EndpointList",
    "EndpointReplica",
    "EndpointRevision",
    "EndpointTarget",
    "EndpointToken",
    "Event",
    "EventPage",
    "FileEntry",
    "FileStat",
    "Gpu",
    "GpuMemory",
    "GpuUsage",
    "Health",
    "ImageName",
    "ImagePolicy",
    "ImageTag",
    "Images",
    "KeypairInfo",
    "LogSpace",
    "Mount",
    "Moved",
    "OwnerUsage",
    "PolicyInfo",
    "Problem",
    "PullProgress",
    "Removed",
    "Session",
    "SessionHistory",
    "SessionPage",
    "Share",
    "Status",
    "StoryLine",
    "Times",
    "Transition",
    "Uploaded",
    "Usage",
    "UserInfo",
    "VfolderInfo",
]


class Problem(BaseModel):
    """Every error: what was wrong, in words."""

    detail: str
    errors: list[dict[str, Any]] = []


class Amounts(BaseModel):
    fgpu: str = Field(description="fGPU, exact decimal (0.01 steps)")
    cpu: str = Field(description="CPU cores, exact decimal (0.001 steps)")
    mem: int = Field(description="bytes")


class Device(BaseModel):
    gpu: int
    fgpu: str


class Mount(BaseModel):
    name: str = Field(description="the folder's name (or id) as its user gave it")
    read_only: bool
    at: str | None = Field(
        default=None, description="where it is mounted, if not /home/work/NAME (/pipeline)"
    )


class Times(BaseModel):
    """When the session entered each status (null: it never did)."""

    requested: datetime | None = None
    admitted: datetime | None = None
    scheduled: datetime | None = None
    preparing: datetime | None = None
    pulling: datetime | None = None
    running: datetime | None = None
    terminating: datetime | None = None
    ended: datetime | None = None


class Session(BaseModel):
    id: str
    name: str | None
    owner: str = Field(description="the access key that asked for it")
    user: str | None = Field(description="the key's user when it asked (null: none)")
    project: str = Field(description="domain/project it belongs to")
    domain: str
    group: str = Field(description="the resource group it runs in")
    type: str = Field(description="batch (ends with its command) or interactive (kept alive)")
    status: str
    image: str
    command: list[str]
    priority: int
    requested: Amounts
    holds_allocation: bool = Field(description="placed and not yet ended")
    agent: str | None
    devices: list[Device]
    mounts: list[Mount] = Field(
        default_factory=list, description="the virtual folders it mounts at /home/work/NAME"
    )
    container: str | None
    exit_code: int | None
    reason: str | None = Field(description="why it was rejected, cancelled, stopped or failed")
    waiting: str | None = Field(
        description="why the scheduler could not place it at first: the resource that was "
        "short and where (docs/scheduling.md)"
    )
    invalid: str | None
    correlation_id: str
    times: Times
    pull: "PullProgress | None" = Field(
        default=None, description="how far its agent got pulling its image (null: no pull)"
    )
    gpu_memory: "list[GpuMemory]" = Field(
        default_factory=list,
        description="while it holds its devices: the GPU memory its last usage sample on "
        "each counted (gpu.usage-sampled events bring the next ones)",
    )


class GpuMemory(BaseModel):
    gpu: int = Field(description="the device, as the agent numbers its GPUs")
    used: int = Field(description="bytes in use there, as the GPU shim last counted them")
    limit: int = Field(description="the slice's bytes there")
    at: datetime = Field(description="when it was counted")
    charged_ns: int | None = Field(
        None,
        description="GPU time charged against the slice's share of the SMs there, in all"
        " (nanoseconds; null: not counted, as for a whole device)",
    )
    busy: float | None = Field(
        None,
        description="how much of the device (0 to 1) the session kept busy between its"
        " last two samples: the charged time's growth over the time between them (null"
        " until there are two, or where it is not counted)",
    )


class PullProgress(BaseModel):
    current: int = Field(description="bytes pulled so far")
    total: int = Field(description="bytes in all (0: not known yet)")


class SessionPage(BaseModel):
    total: int
    limit: int
    offset: int
    last_seq: int = Field(description="the last log sequence the projection holds")
    sessions: list[Session]


class Transition(BaseModel):
    seq: int
    at: datetime
    status: str
    event_id: str
    actor: str | None
    type: str | None


class Event(BaseModel):
    seq: int
    subject: str
    type: str = Field(description="the event's tag, or 'malformed'")
    id: str | None
    at: datetime | None
    actor: str | None
    causation_id: str | None
    correlation_id: str | None
    session_id: str | None
    agent_id: str | None
    owner: str | None
    error: str | None = Field(description="why the fold refused it, if it did")
    data: dict[str, Any] | None = Field(description="the event as JSON")
    raw: str | None = Field(description="the payload, when it is not JSON")


class EventPage(BaseModel):
    events: list[Event]
    last_seq: int
    next_after: int = Field(description="pass as `after` for the next page")


class StoryLine(BaseModel):
    seq: int
    at: datetime
    actor: str
    text: str
    effect: bool = Field(description="false: the fold ignored this event")


class SessionHistory(BaseModel):
    session: Session
    summary: str
    story: list[StoryLine]
    transitions: list[Transition]
    events: list[Event]


class Share(BaseModel):
    session: str
    owner: str | None
    fgpu: str


class Gpu(BaseModel):
    index: int
    model: str
    uuid: str
    mem: int
    sm_count: int
    capacity: str
    allocated: str
    free: str
    shares: list[Share]


class Agent(BaseModel):
    id: str
    lost: bool
    runtime: str
    group: str = Field(description="the resource group it serves")
    fgpu_per_gpu: str
    capacity: Amounts
    allocated: Amounts
    free: Amounts
    sessions: int
    images: list[str]
    gpus: list[Gpu]


class AgentList(BaseModel):
    last_seq: int
    agents: list[Agent]


class GpuUsage(BaseModel):
    index: int
    capacity: str
    allocated: str
    free: str


class AgentUsage(BaseModel):
    id: str
    lost: bool
    capacity: Amounts
    allocated: Amounts
    free: Amounts
    gpus: list[GpuUsage]


class OwnerUsage(BaseModel):
    owner: str
    sessions: int = Field(description="sessions holding an allocation on an agent")
    allocated: Amounts
    quota_sessions: int = Field(description="sessions counted against the owner's policy")
    quota: Amounts


class Usage(BaseModel):
    last_seq: int
    capacity: Amounts
    allocated: Amounts
    free: Amounts
    agents: list[AgentUsage]
    owners: list[OwnerUsage]


class ClusterAt(BaseModel):
    """The cluster as the log says it was after record ``seq``."""

    seq: int
    at: datetime | None = Field(description="when the event at `seq` happened")
    last_seq: int
    counts: dict[str, int] = Field(description="sessions by status, ended ones included")
    sessions: list[Session] = Field(description="sessions that had not ended by then")
    agents: list[Agent]
    owners: list[OwnerUsage]


class DestroyAnswer(BaseModel):
    """How a destroy request was answered: by the first event naming it as its cause."""

    request_id: str
    session_id: str
    requester: str = Field(description="the access key that asked")
    answered_seq: int = Field(description="the log sequence of the answer")
    refused: str | None = Field(description="why it was refused; null: carried out")


class AdminAnswer(BaseModel):
    """The registrar's answer to an admin request (or the serving actor's to a serve
    request)."""

    request_id: str
    requester: str
    command: str = Field(description="what was asked (create-user, set-policy, ...)")
    applied: bool
    code: str | None = Field(description="forbidden, invalid or conflict; null: applied")
    reason: str | None
    answered_seq: int


class DomainInfo(BaseModel):
    domain: str
    projects: list[str]


class UserInfo(BaseModel):
    user: str
    domain: str
    role: str
    projects: list[str]
    default_project: str | None


class KeypairInfo(BaseModel):
    """A keypair, never its secret (nor the secret's hash)."""

    access_key: str
    user: str | None
    service: str | None = Field(description="the service it is of; null: a user's")
    revoked: bool


class PolicyInfo(BaseModel):
    """A resource policy; an absent limit is null, amounts as everywhere else."""

    level: str
    target: str
    max_sessions: int | None
    max_pending_sessions: int | None
    max_pending: Amounts | None
    total: Amounts | None
    max_priority: int | None


class GroupInfo(BaseModel):
    """A resource group and its settings (times in seconds; null: no limit).
    ``configured``: whether an administrator gave it settings (the default group runs
    under the scheduler's own until then)."""

    group: str
    configured: bool
    queue: str
    policy: str | None
    pending_timeout_s: int | None
    default_lifetime_s: int | None
    max_lifetime_s: int | None
    idle_timeout_s: int | None
    projects: list[str] | None
    fgpu_quantum: str | None = Field(
        default=None, description="the step of its sessions' fGPU; null: the cluster's, 0.01"
    )


class TokenRequest(BaseModel):
    """A keypair, to sign in with."""

    access_key: str = Field(min_length=1, max_length=64)
    secret_key: str = Field(min_length=1, max_length=256)


class Identity(BaseModel):
    """Who a request reads as, and what it sees."""

    access_key: str = Field(description="empty on a cluster with no tenancy")
    user: str | None = Field(description="null on a cluster with no tenancy")
    role: str
    domain: str | None
    sees: str = Field(description="everything, domain or own")


class Token(BaseModel):
    """A bearer token for this API: send ``Authorization: Bearer <token>``."""

    token: str
    token_type: str = "bearer"
    expires_at: datetime
    identity: Identity


class ImageTag(BaseModel):
    """One tag of an image name, as the agents that hold it report it."""

    tag: str = Field(description="the tag; the name and tag together are ``ref``")
    ref: str
    ids: list[str] = Field(description="the engines' image ids (one, unless agents differ)")
    digests: list[str] = Field(description="the registry's manifest digests (none: local)")
    size: int = Field(description="bytes on disk (the largest any agent reports)")
    agents: list[str] = Field(description="the agents that hold it")
    allowed: bool | None = Field(
        default=None,
        description="whether sessions of the listing's domain may run it (its allow-list);"
        " null: the listing is for no domain (a reader without one)",
    )


class ImageName(BaseModel):
    name: str
    tags: list[ImageTag]


class Images(BaseModel):
    last_seq: int
    domain: str | None = Field(
        default=None, description="the domain ``allowed`` is said for (null: none)"
    )
    images: list[ImageName]


class ImagePolicy(BaseModel):
    """What sessions of a domain may run, and the aliases its requests may name."""

    domain: str
    images: list[str] | None = Field(
        description="the allow-list: names (every tag) or name:tag; null: every image"
    )
    aliases: dict[str, str] = Field(description="alias -> the image it runs")


class VfolderInfo(BaseModel):
    """A virtual folder: whose it is, where, its quota and usage as last scanned, and
    what the viewer may do with its files (``rw``, ``ro``; null: manage it only)."""

    id: str
    name: str
    host: str
    domain: str
    user: str | None = Field(description="the owner user; null: a project's folder")
    project: str | None = Field(description="the owner project (domain/project)")
    quota_bytes: int | None
    bytes: int = Field(description="the bytes of its files, as last scanned")
    files: int
    state: str = Field(description="live, trashed (until the trash is emptied) or purged")
    access: str | None
    shares: dict[str, str] = Field(
        description="user:<name> or project:<domain/project> -> ro|rw (to those who manage it)"
    )


class FileEntry(BaseModel):
    name: str
    kind: str = Field(description="file, dir, link (not followed) or other")
    size: int
    mtime: datetime


class FileStat(BaseModel):
    """A file's size, and its folder's bytes (counted now) against its quota: what an
    upload may add."""

    path: str
    size: int | None = Field(description="its size; null: no such file")
    partial: int | None = Field(
        default=None,
        description="the bytes an upload into it left when it stopped short (where a "
        "resumed upload starts); null: none, an upload starts at 0",
    )
    folder_bytes: int
    quota_bytes: int | None


class Uploaded(BaseModel):
    """What an upload left: the file's size (or, after a chunk short of the file's total,
    the bytes held so far), and the folder's bytes against its quota."""

    path: str
    size: int | None = Field(description="the file's size; null: not whole yet (a chunk)")
    partial: int | None = Field(
        default=None,
        description="after a chunk: the bytes held aside so far (where the next chunk "
        "starts); null: the file is whole",
    )
    folder_bytes: int
    quota_bytes: int | None


class Removed(BaseModel):
    """What was removed from a folder (file, dir, link, other), and the folder's bytes
    left against its quota."""

    path: str
    kind: str
    folder_bytes: int
    quota_bytes: int | None


class Moved(BaseModel):
    path: str
    to: str


class LogSpace(BaseModel):
    """The room on the disk under one of the log's servers (``log.health``)."""

    server: str
    path: str = Field(description="the server's store")
    state: str = Field(description="ok, low (no new sessions are admitted) or full")
    reason: str = Field(description="the state in one line; empty when ok")
    free_bytes: int
    total_bytes: int
    watermark_bytes: int = Field(description="under this much free, the disk is low")
    unwritable_since: datetime | None = Field(
        description="the server could write nothing from then until this record"
    )
    at: datetime = Field(description="when it was found")
    live: bool = Field(
        description="found now by the watcher beside the server (else read off the log)"
    )


class Health(BaseModel):
    log: list[LogSpace]


class AgentCount(BaseModel):
    alive: int
    lost: int


class SnapshotState(BaseModel):
    """One kind of actor snapshot, as an actor starting now would find its latest (the
    rows of ``fgpu admin snapshots --json``)."""

    kind: str = Field(description="scheduler or quota")
    health: str = Field(description="ok, none, corrupt, unusable or unreadable")
    reason: str | None = Field(description="why, when not ok or none")
    seq: int | None = Field(description="the log's sequence it covers (ok alone)")
    behind: int | None = Field(description="how far the log is past it (ok alone)")
    bytes: int | None
    saved_at: datetime | None
    age_s: float | None


class Status(BaseModel):
    """The stack at a glance (``fgpu status``)."""

    ok: bool = Field(
        description="every log server has room, no agent is lost, no snapshot is corrupt, "
        "unusable or unreadable"
    )
    last_seq: int = Field(description="how far the projections have read the log")
    log: list[LogSpace]
    agents: AgentCount
    snapshots: list[SnapshotState] | None = Field(
        description="the actors' snapshots; null where this API cannot read them (a read "
        "API of its own, not fgpu up's: fgpu admin snapshots says)"
    )


class SecretReference(BaseModel):
    variable: str = Field(description="the environment variable a replica finds it in")
    secret: str = Field(description="the name of the owner's secret (never its value)")


class EndpointRevision(BaseModel):
    revision: int
    image: str
    command: list[str]
    port: int
    model: str | None = Field(description="the folder mounted read-only, if any")
    slots: Amounts = Field(description="each replica's")
    env: list[str] = Field(description="the names of its environment variables")
    secrets: list[SecretReference] = Field(
        default_factory=list, description="variables that hold the owner's secrets"
    )
    health_path: str
    drain_s: float = Field(0.0, description="a draining replica's grace for requests in flight")
    warmup_s: float = Field(0.0, description="its deadline to become healthy (0: none)")
    traffic: int = Field(0, description="its share of the requests now, percent")


class EndpointTarget(BaseModel):
    revision: int
    replicas: int
    traffic: int = Field(description="percent of requests")


class EndpointReplica(BaseModel):
    session_id: str
    revision: int
    ordinal: int
    generation: int
    phase: str = Field(description="provisioning, warming, healthy, unhealthy, draining")
    host: str | None
    port: int | None
    in_rotation: bool
    reason: str


class EndpointRollout(BaseModel):
    """A rolling update under way and its progress."""

    revision: int = Field(description="the revision it moves to")
    replicas: int = Field(description="how many of it are wanted")
    max_surge: int
    max_unavailable: int
    started_at: datetime
    healthy: int = Field(description="its replicas healthy and in rotation now")


class EndpointToken(BaseModel):
    token_id: str
    expires_at: datetime
    revoked: bool


class EndpointAutoscale(BaseModel):
    metric: str = Field(description="rps_per_replica, in_flight or p95_ms")
    up: float = Field(description="above it (per replica), a step up")
    down: float = Field(description="below it for the whole cooldown, a step down")
    step: int
    cooldown_s: float
    min_replicas: int = Field(description="0: scales to zero when idle")
    max_replicas: int
    cold_start_s: float = Field(description="how long a proxy holds a request at zero")


class Endpoint(BaseModel):
    """A serving endpoint (``docs/serving.md``)."""

    endpoint_id: str
    name: str
    owner: str
    domain: str
    project: str
    group: str
    public: bool
    path: str = Field(description="its path prefix on every proxy")
    created_at: datetime
    revisions: list[EndpointRevision]
    targets: list[EndpointTarget]
    replicas: list[EndpointReplica]
    tokens: list[EndpointToken]
    stalled: dict[str, str] = Field(
        description="slots (revision/ordinal) not asked for again, and why their replica ended"
    )
    rollout: EndpointRollout | None = Field(None, description="the rolling update under way")
    autoscale: EndpointAutoscale | None = Field(
        default=None, description="its autoscaling rule; none: replicas as set"
    )


class EndpointList(BaseModel):
    last_seq: int
    endpoints: list[Endpoint]
