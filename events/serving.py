"""Events of model serving: endpoints, their revisions and replicas, tokens, health.

A person asks (``ServeRequested``, on ``fgpu.req.<its key>.<request id>``, through the
intake like every request); the serving actor judges the request against the tenancy
and the endpoints as the log has them and answers on ``fgpu.serving``: the decision
itself (``EndpointCreated``, ``RevisionAdded``, ``ReplicasSet``, ``EndpointRemoved``,
``TokenCreated``, ``TokenRevoked``), each caused by the request, or ``ServeRefused``.
Only decisions change anything. The serving actor alone writes replicas' lifecycle
(``ReplicaChanged``) and rotation (``ReplicaRotation``); routers say what their health
checks found (``ReplicaHealthReported``, on ``fgpu.route.<router>``), changes only.

A token never stands on the log: only the lower-case hex SHA-256 of it, which is what
the proxy matches a request's bearer token against.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

import msgspec

from events.base import Event
from events.slots import Slots

__all__ = [
    "AddRevision",
    "AutoscaleRule",
    "AutoscaleSet",
    "CreateEndpoint",
    "CreateToken",
    "EndpointCreated",
    "EndpointRemoved",
    "HealthSpec",
    "PointEndpoint",
    "RemoveEndpoint",
    "ReplicaChanged",
    "ReplicaHealthReported",
    "ReplicaPhase",
    "ReplicaRotation",
    "ReplicasSet",
    "RevisionAdded",
    "RevisionSpec",
    "RevisionTarget",
    "RevokeToken",
    "RolloutEnded",
    "RolloutPolicy",
    "RolloutStarted",
    "RouteStatsReported",
    "ScaleEndpoint",
    "ServeCommand",
    "ServeRefused",
    "ServeRequested",
    "ServingTicked",
    "SetAutoscale",
    "SetTraffic",
    "TokenCreated",
    "TokenRevoked",
    "TrafficShare",
]

_Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class _Part(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A value events of serving hold."""


class HealthSpec(_Part, frozen=True, kw_only=True):
    """How a replica is checked (the fields of the proxies' ``HealthCheck``): ``GET path``
    every ``interval_s``; an answer in 2xx/3xx within ``timeout_s`` passes;
    ``healthy_after`` passes in a row bring a replica into rotation, ``unhealthy_after``
    failures in a row take it out; none before ``initial_delay_s`` after it runs."""

    path: str = "/health"
    interval_s: float = 2.0
    timeout_s: float = 1.0
    initial_delay_s: float = 0.0
    healthy_after: int = 1
    unhealthy_after: int = 2


class RevisionSpec(_Part, frozen=True, kw_only=True):
    """What each replica of a revision runs: ``image`` with ``command`` (empty: the
    image's own), answering HTTP on ``port`` in its container; ``model`` a virtual folder
    of the owner's mounted read-only at ``/home/work/<model>`` (None: none); ``slots``
    each replica holds (``cpu_only``: no fGPU, as for sessions); ``env`` its environment,
    sorted by name; ``secret_env`` variables whose values are the owner's secrets, as
    (variable, secret name), sorted: each replica's session carries them, the names and
    never the values (none in every revision from before the field)."""

    image: str
    command: tuple[str, ...] = ()
    port: int = 8000
    model: str | None = None
    slots: Slots
    cpu_only: bool = False
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()
    health: HealthSpec = HealthSpec()
    # Seconds a draining replica keeps its session (requests in flight finish) before it
    # is stopped; 0: stopped once its draining is on the log.
    drain_s: float = 0.0
    # Seconds a running replica has to be found healthy, else it is replaced; 0: no limit.
    warmup_s: float = 0.0


class RevisionTarget(_Part, frozen=True, kw_only=True):
    """How many replicas of revision ``revision`` are wanted, and its share of the
    traffic (``traffic``, 0-100; the shares of an endpoint's targets sum to 100)."""

    revision: int
    replicas: int
    traffic: int = 100


class RolloutPolicy(_Part, frozen=True, kw_only=True):
    """How a rolling update moves: at most ``max_surge`` replicas above the wanted count,
    at most ``max_unavailable`` healthy ones below it (not both 0)."""

    max_surge: int = 1
    max_unavailable: int = 0


class TrafficShare(_Part, frozen=True, kw_only=True):
    """Revision ``revision`` takes ``traffic`` percent of the endpoint's requests."""

    revision: int
    traffic: int


# ---- what a person asks ---------------------------------------------------------------------


class CreateEndpoint(_Part, frozen=True, kw_only=True, tag="create-endpoint"):
    """A new endpoint ``name`` (unique among live endpoints; served under ``/e/<name>/``)
    in ``project`` (None: the requester's default) and resource ``group``, its first
    revision at ``replicas``; ``public``: anyone may call it, else a token is needed."""

    endpoint_id: str
    name: str
    project: str | None = None
    group: str | None = None
    public: bool = False
    revision: RevisionSpec
    replicas: int = 1


class AddRevision(_Part, frozen=True, kw_only=True, tag="add-revision"):
    """A new revision of the endpoint; it takes ``replicas`` (None: as many as now) and
    all traffic: at once (``rollout`` None), or by a rolling update."""

    endpoint_id: str
    revision: RevisionSpec
    replicas: int | None = None
    rollout: RolloutPolicy | None = None
    # Blue/green: the new revision takes this share of the traffic beside the revision
    # taking most now (which keeps its replicas and the rest); None: all of it.
    traffic: int | None = None


class ScaleEndpoint(_Part, frozen=True, kw_only=True, tag="scale-endpoint"):
    """``replicas`` of the revision taking most traffic."""

    endpoint_id: str
    replicas: int


class PointEndpoint(_Part, frozen=True, kw_only=True, tag="point-endpoint"):
    """Revision ``revision`` (any of the endpoint's, an earlier one for a rollback) takes
    all replicas (``replicas``; None: as many as now) and all traffic."""

    endpoint_id: str
    revision: int
    replicas: int | None = None
    rollout: RolloutPolicy | None = None  # None: at once; else a rolling update


class SetTraffic(_Part, frozen=True, kw_only=True, tag="set-traffic"):
    """Blue/green: the endpoint's traffic split, whole (the shares sum to 100; a revision
    not named runs no replica). A named revision keeps its replicas, or takes
    ``replicas`` (None: as many as the revision taking most traffic now) if it had none."""

    endpoint_id: str
    shares: tuple[TrafficShare, ...]
    replicas: int | None = None


class RemoveEndpoint(_Part, frozen=True, kw_only=True, tag="remove-endpoint"):
    endpoint_id: str


class CreateToken(_Part, frozen=True, kw_only=True, tag="create-token"):
    """A token for the endpoint, good until ``expires_at``: made by the requester, who
    shows it once; only its ``sha256`` (hex) is sent."""

    endpoint_id: str
    token_id: str
    sha256: _Sha256
    expires_at: datetime


class RevokeToken(_Part, frozen=True, kw_only=True, tag="revoke-token"):
    endpoint_id: str
    token_id: str


# What an autoscaling rule's thresholds are about (``AutoscaleRule``).
AutoscaleMetric = Literal["rps_per_replica", "in_flight", "p95_ms"]


class AutoscaleRule(_Part, frozen=True, kw_only=True):
    """How the serving actor sets an endpoint's replicas from its traffic as the proxies
    count it: ``metric`` per replica above ``up`` adds ``step`` replicas, below ``down``
    (for a whole ``cooldown_s``) takes ``step`` away, never beyond ``min_replicas`` and
    ``max_replicas``, and never sooner than ``cooldown_s`` after the last change of the
    targets. ``rps_per_replica``: requests a second; ``in_flight``: requests in flight
    (held ones included) per replica; ``p95_ms``: the routes' worst p95 latency. With
    ``min_replicas`` 0 the endpoint goes to zero when idle and a request wakes it: a proxy
    holds it up to ``cold_start_s`` for a replica."""

    metric: AutoscaleMetric
    up: float
    down: float
    step: int = 1
    cooldown_s: float = 60.0
    min_replicas: int = 1
    max_replicas: int
    cold_start_s: float = 30.0


class SetAutoscale(_Part, frozen=True, kw_only=True, tag="set-autoscale"):
    """The endpoint's autoscaling ``rule`` from now on (None: off; its replicas stay as
    they are)."""

    endpoint_id: str
    rule: AutoscaleRule | None = None


ServeCommand = (
    CreateEndpoint
    | AddRevision
    | ScaleEndpoint
    | PointEndpoint
    | SetTraffic
    | RemoveEndpoint
    | CreateToken
    | RevokeToken
    | SetAutoscale
)


class ServeRequested(Event, frozen=True, kw_only=True, tag="serve.requested.v1"):
    """A person (``requester``, the key the server let in) asks about an endpoint."""

    requester: str
    command: ServeCommand


class ServeRefused(Event, frozen=True, kw_only=True, tag="serve.refused.v1"):
    """The serving actor refused the request (its id is ``causation_id``): ``code``
    ``forbidden``, ``invalid`` or ``conflict``; ``reason`` in words, naming nothing the
    requester may not see."""

    requester: str
    code: Literal["forbidden", "invalid", "conflict"]
    reason: str


# ---- what the serving actor decided ---------------------------------------------------------


class EndpointCreated(Event, frozen=True, kw_only=True, tag="endpoint.created.v1"):
    """``owner`` (the requester's key: replicas are its sessions, charged to it) has an
    endpoint, of ``domain`` and ``project``, in resource group ``group``."""

    endpoint_id: str
    name: str
    owner: str
    domain: str
    project: str
    group: str
    public: bool


class RevisionAdded(Event, frozen=True, kw_only=True, tag="endpoint.revision-added.v1"):
    """Revision number ``revision`` (1, 2, ... in order) of the endpoint."""

    endpoint_id: str
    revision: int
    spec: RevisionSpec
    requester: str


class ReplicasSet(Event, frozen=True, kw_only=True, tag="endpoint.replicas-set.v1"):
    """The endpoint's wanted replicas and traffic per revision, whole: a revision not
    named wants none."""

    endpoint_id: str
    targets: tuple[RevisionTarget, ...]
    requester: str


class EndpointRemoved(Event, frozen=True, kw_only=True, tag="endpoint.removed.v1"):
    """No more traffic; its replicas are drained and stopped, and its name is free."""

    endpoint_id: str
    requester: str


class TokenCreated(Event, frozen=True, kw_only=True, tag="endpoint.token-created.v1"):
    endpoint_id: str
    token_id: str
    sha256: _Sha256
    expires_at: datetime
    requester: str


class TokenRevoked(Event, frozen=True, kw_only=True, tag="endpoint.token-revoked.v1"):
    endpoint_id: str
    token_id: str
    requester: str


# ---- replicas -------------------------------------------------------------------------------


class ReplicaPhase(StrEnum):
    PROVISIONING = "provisioning"  # its session is asked for, not running yet
    WARMING = "warming"  # running, reachable at its address; not yet found healthy
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DRAINING = "draining"  # out of rotation; its session is being stopped
    GONE = "gone"  # its session ended


class ReplicaChanged(Event, frozen=True, kw_only=True, tag="replica.changed.v1"):
    """Replica ``session_id`` of the endpoint (slot ``ordinal`` of ``revision``, the
    ``generation``-th session to fill that slot) entered ``phase``: the serving actor's
    record, changes only. ``host``/``port``: where proxies reach it (from ``warming``)."""

    endpoint_id: str
    session_id: str
    revision: int
    ordinal: int
    generation: int = 0
    phase: ReplicaPhase
    host: str | None = None
    port: int | None = None
    reason: str = ""


class ReplicaRotation(Event, frozen=True, kw_only=True, tag="replica.rotation.v1"):
    """Whether proxies send the replica new requests: changes only."""

    endpoint_id: str
    session_id: str
    in_rotation: bool


class ReplicaHealthReported(Event, frozen=True, kw_only=True, tag="replica.health-reported.v1"):
    """What router ``router``'s checks found of a replica, when it changed."""

    router: str
    endpoint_id: str
    session_id: str
    healthy: bool
    detail: str = ""


# ---- rolling updates, time ------------------------------------------------------------------


class RolloutStarted(Event, frozen=True, kw_only=True, tag="endpoint.rollout-started.v1"):
    """The endpoint moves to ``replicas`` of revision ``revision`` by a rolling update
    (``policy``): the serving actor writes each step as ``endpoint.replicas-set`` while
    replicas' health comes back. It replaces a rollout under way."""

    endpoint_id: str
    revision: int
    replicas: int
    policy: RolloutPolicy
    requester: str


class RolloutEnded(Event, frozen=True, kw_only=True, tag="endpoint.rollout-ended.v1"):
    """The rollout to ``revision`` ended: ``done`` (its targets reached) or ``superseded``
    (targets set otherwise: a scale, a traffic split, a change at once)."""

    endpoint_id: str
    revision: int
    outcome: Literal["done", "superseded"]


class ServingTicked(Event, frozen=True, kw_only=True, tag="serving.ticked.v1"):
    """The serving actor's clock on the log: written when a drain's grace or a warm-up
    deadline falls due, so that the fold, not a local clock, says the time has come
    (``at`` is the time)."""


# ---- autoscaling ----------------------------------------------------------------------------


class AutoscaleSet(Event, frozen=True, kw_only=True, tag="endpoint.autoscale-set.v1"):
    """The serving actor's decision: the endpoint's autoscaling rule (None: off). The
    replicas it sets are ``endpoint.replicas-set`` events of the serving actor's own
    (``requester`` ``serving``), caused by the traffic report or the rule they follow."""

    endpoint_id: str
    rule: AutoscaleRule | None
    requester: str


class RouteStatsReported(Event, frozen=True, kw_only=True, tag="route.stats-reported.v1"):
    """What router ``router``'s proxies counted of an endpoint's traffic over the last
    ``window_ms`` (``requests`` answered or begun in it), and now: ``in_flight`` (requests
    held for a cold start included) and ``queued``; ``p95_ms`` where the proxy keeps a
    distribution. Changes only: a report stands until the next."""

    router: str
    endpoint_id: str
    window_ms: int
    requests: int
    in_flight: int
    queued: int = 0
    p95_ms: int | None = None
