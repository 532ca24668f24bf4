"""Endpoints as a pure fold of the log: ``evolve(state, event)``.

The serving actor's decisions (``fgpu.serving``) and the routers' health reports are
folded here; requests wait in ``requests`` until a decision names them as its cause.
Every handler checks that its event fits the state (a replica's phase moves only
forward, a removed endpoint takes no new revision), else changes nothing, so a fold is
deterministic and a redelivered or late event harmless. The state is msgspec Structs so
that a snapshot is the state encoded as it is.

Invariants: a live endpoint's name is in ``names`` and no other endpoint's is; every
replica not gone is in its endpoint's ``replicas`` and in ``replica_of``; a slot's
``next_generation`` is above every generation a replica of it had.
"""

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import msgspec

from events import (
    AnyEvent,
    AutoscaleRule,
    AutoscaleSet,
    EndpointCreated,
    EndpointRemoved,
    Event,
    ReplicaChanged,
    ReplicaHealthReported,
    ReplicaPhase,
    ReplicaRotation,
    ReplicasSet,
    RevisionAdded,
    RevisionSpec,
    RevisionTarget,
    RolloutEnded,
    RolloutPolicy,
    RolloutStarted,
    RouteStatsReported,
    ServeRefused,
    ServeRequested,
    ServingTicked,
    TokenCreated,
    TokenRevoked,
)

__all__ = [
    "DECISIONS",
    "SERVING_EVENTS",
    "EndpointView",
    "ReplicaView",
    "RolloutView",
    "ServingState",
    "TokenView",
    "TrafficSample",
    "evolve",
    "live_replicas",
    "slot",
]

P = ReplicaPhase
# A replica in these phases has a session that runs or may run, and fills its slot.
_FILLING = (P.PROVISIONING, P.WARMING, P.HEALTHY, P.UNHEALTHY)
# The order a replica's phase may take (healthy and unhealthy alternate).
_RANK = {
    P.PROVISIONING: 0,
    P.WARMING: 1,
    P.HEALTHY: 2,
    P.UNHEALTHY: 2,
    P.DRAINING: 3,
    P.GONE: 4,
}


class TokenView(msgspec.Struct, kw_only=True):
    token_id: str
    sha256: str
    expires_at: datetime
    revoked: bool = False


class ReplicaView(msgspec.Struct, kw_only=True):
    session_id: str
    revision: int
    ordinal: int
    generation: int
    phase: ReplicaPhase
    host: str | None = None
    port: int | None = None
    in_rotation: bool = False
    reported_healthy: bool | None = None  # the latest router report; None: none yet
    reason: str = ""
    since: datetime | None = None  # when it entered its phase (the record's time)


class RolloutView(msgspec.Struct, kw_only=True):
    """A rolling update under way: to ``replicas`` of ``revision``."""

    revision: int
    replicas: int
    policy: RolloutPolicy
    requester: str
    started_id: str  # its ``endpoint.rollout-started``: the cause of each step
    started_at: datetime


class TrafficSample(msgspec.Struct, frozen=True, kw_only=True):
    """An endpoint's traffic over every router from ``at`` on (until the next sample):
    each router's latest report summed."""

    at: datetime
    rps: float
    in_flight: int
    queued: int
    p95_ms: int | None = None


class EndpointView(msgspec.Struct, kw_only=True):
    endpoint_id: str
    name: str
    owner: str
    domain: str
    project: str
    group: str
    public: bool
    created_id: str  # the id of its ``endpoint.created``: its replicas' ids derive from it
    created_at: datetime
    revisions: dict[int, RevisionSpec] = {}
    targets: tuple[RevisionTarget, ...] = ()
    tokens: dict[str, TokenView] = {}
    replicas: dict[str, ReplicaView] = {}  # not gone, by session id
    # "<revision>/<ordinal>" -> the generation its next replica gets
    next_generation: dict[str, int] = {}
    # "<revision>/<ordinal>" -> why its last replica ended before it ran: not asked for
    # again until the targets are set anew (a replica its quota refuses is not retried
    # for ever).
    stalled: dict[str, str] = {}
    removed: bool = False
    rollout: RolloutView | None = None
    autoscale: AutoscaleRule | None = None
    scaled_at: datetime | None = None  # the ``at`` of its last ``endpoint.replicas-set``
    reports: dict[str, RouteStatsReported] = {}  # each router's latest, by router
    # Samples from the one in force ``cooldown_s`` before the newest on: what the rule
    # looks back over (``services.domain.serving.autoscale``).
    traffic: list[TrafficSample] = []


class ServingState(msgspec.Struct, kw_only=True):
    endpoints: dict[str, EndpointView] = {}
    names: dict[str, str] = {}  # live endpoints' names -> id
    replica_of: dict[str, str] = {}  # session id -> endpoint id, replicas not gone
    requests: dict[str, ServeRequested] = {}  # undecided, by id, in the order they came
    changed: bool = False  # an endpoint changed since the owner last cleared it
    ticked_at: datetime | None = None  # the serving actor's latest tick: the log's "now"


def slot(revision: int, ordinal: int) -> str:
    return f"{revision}/{ordinal}"


def live_replicas(ep: EndpointView) -> list[ReplicaView]:
    """Replicas that fill their slot (not draining, not gone)."""
    return [r for r in ep.replicas.values() if r.phase in _FILLING]


def evolve(s: ServingState, e: AnyEvent) -> None:
    """Apply one event of serving (any other changes nothing)."""
    handler = _HANDLERS.get(type(e))
    if handler is not None:
        handler(s, e)
    cause = e.causation_id
    if cause is not None and isinstance(e, DECISIONS):
        s.requests.pop(cause, None)


def _requested(s: ServingState, e: ServeRequested) -> None:
    s.requests.setdefault(e.id, e)


def _created(s: ServingState, e: EndpointCreated) -> None:
    if e.endpoint_id in s.endpoints or e.name in s.names:
        return
    s.endpoints[e.endpoint_id] = EndpointView(
        endpoint_id=e.endpoint_id,
        name=e.name,
        owner=e.owner,
        domain=e.domain,
        project=e.project,
        group=e.group,
        public=e.public,
        created_id=e.id,
        created_at=e.at,
    )
    s.names[e.name] = e.endpoint_id
    s.changed = True


def _live(s: ServingState, endpoint_id: str) -> EndpointView | None:
    ep = s.endpoints.get(endpoint_id)
    return None if ep is None or ep.removed else ep


def _revision(s: ServingState, e: RevisionAdded) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is None or e.revision != len(ep.revisions) + 1:
        return
    ep.revisions[e.revision] = e.spec
    s.changed = True


def _targets(s: ServingState, e: ReplicasSet) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is None or any(t.revision not in ep.revisions for t in e.targets):
        return
    ep.targets = e.targets
    ep.scaled_at = e.at
    ep.stalled.clear()
    s.changed = True


def _removed(s: ServingState, e: EndpointRemoved) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is None:
        return
    ep.removed = True
    ep.targets = ()
    ep.rollout = None
    del s.names[ep.name]
    _forget_if_done(s, ep)
    s.changed = True


def _token(s: ServingState, e: TokenCreated) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is None or e.token_id in ep.tokens:
        return
    ep.tokens[e.token_id] = TokenView(token_id=e.token_id, sha256=e.sha256, expires_at=e.expires_at)
    s.changed = True


def _revoked(s: ServingState, e: TokenRevoked) -> None:
    ep = _live(s, e.endpoint_id)
    token = None if ep is None else ep.tokens.get(e.token_id)
    if token is not None and not token.revoked:
        token.revoked = True
        s.changed = True


def _replica(s: ServingState, e: ReplicaChanged) -> None:
    ep = s.endpoints.get(e.endpoint_id)
    if ep is None:
        return
    r = ep.replicas.get(e.session_id)
    if r is None:
        if e.phase is P.PROVISIONING and e.session_id not in s.replica_of:
            _provisioned(s, ep, e)
        return
    if _RANK[e.phase] < _RANK[r.phase] or e.phase is r.phase:
        return
    if e.phase is P.GONE:
        _gone(s, ep, r, e.reason)
        return
    if e.phase is P.WARMING:
        r.host, r.port = e.host, e.port
    r.phase = e.phase
    r.reason = e.reason
    r.since = e.at
    s.changed = True


def _provisioned(s: ServingState, ep: EndpointView, e: ReplicaChanged) -> None:
    key = slot(e.revision, e.ordinal)
    ep.replicas[e.session_id] = ReplicaView(
        session_id=e.session_id,
        revision=e.revision,
        ordinal=e.ordinal,
        generation=e.generation,
        phase=P.PROVISIONING,
        since=e.at,
    )
    ep.next_generation[key] = max(ep.next_generation.get(key, 0), e.generation + 1)
    s.replica_of[e.session_id] = ep.endpoint_id
    s.changed = True


def _gone(s: ServingState, ep: EndpointView, r: ReplicaView, reason: str) -> None:
    key = slot(r.revision, r.ordinal)
    if r.phase is P.PROVISIONING:
        ep.stalled[key] = reason or "its session ended before it ran"
    else:
        ep.stalled.pop(key, None)
    del ep.replicas[r.session_id]
    s.replica_of.pop(r.session_id, None)
    _forget_if_done(s, ep)
    s.changed = True


def _forget_if_done(s: ServingState, ep: EndpointView) -> None:
    """A removed endpoint is let go of once its last replica is gone."""
    if ep.removed and not ep.replicas:
        del s.endpoints[ep.endpoint_id]


def _rotation(s: ServingState, e: ReplicaRotation) -> None:
    ep = s.endpoints.get(e.endpoint_id)
    r = None if ep is None else ep.replicas.get(e.session_id)
    if r is None or r.in_rotation is e.in_rotation:
        return
    if e.in_rotation and r.phase is not P.HEALTHY:
        return  # only a healthy replica takes traffic
    r.in_rotation = e.in_rotation
    s.changed = True


def _health(s: ServingState, e: ReplicaHealthReported) -> None:
    ep = s.endpoints.get(e.endpoint_id)
    r = None if ep is None else ep.replicas.get(e.session_id)
    if r is not None:
        r.reported_healthy = e.healthy


def _rollout_started(s: ServingState, e: RolloutStarted) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is None or e.revision not in ep.revisions:
        return
    ep.rollout = RolloutView(
        revision=e.revision,
        replicas=e.replicas,
        policy=e.policy,
        requester=e.requester,
        started_id=e.id,
        started_at=e.at,
    )
    s.changed = True


def _rollout_ended(s: ServingState, e: RolloutEnded) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is not None and ep.rollout is not None and ep.rollout.revision == e.revision:
        ep.rollout = None
        s.changed = True


def _ticked(s: ServingState, e: ServingTicked) -> None:
    if s.ticked_at is None or e.at > s.ticked_at:
        s.ticked_at = e.at
        s.changed = True


def _autoscale(s: ServingState, e: AutoscaleSet) -> None:
    ep = _live(s, e.endpoint_id)
    if ep is not None and ep.autoscale != e.rule:
        ep.autoscale = e.rule
        s.changed = True


def _stats(s: ServingState, e: RouteStatsReported) -> None:
    """A router's report replaces its last; the sum over routers is a new sample. Not a
    change of the endpoint (``changed``): traffic is not what the projections show."""
    ep = _live(s, e.endpoint_id)
    if ep is None:
        return
    before = ep.reports.get(e.router)
    if before is not None and before.at > e.at:
        return  # an older report delivered late
    ep.reports[e.router] = e
    ep.traffic.append(_sample(e.at, ep.reports.values()))
    _forget_old_traffic(ep)


def _sample(at: datetime, reports: Iterable[RouteStatsReported]) -> TrafficSample:
    rs = list(reports)
    p95s = [r.p95_ms for r in rs if r.p95_ms is not None]
    return TrafficSample(
        at=at,
        rps=sum(r.requests * 1000 / max(r.window_ms, 1) for r in rs),
        in_flight=sum(r.in_flight for r in rs),
        queued=sum(r.queued for r in rs),
        p95_ms=max(p95s) if p95s else None,
    )


_MAX_SAMPLES = 1000


def _forget_old_traffic(ep: EndpointView) -> None:
    """Keep the samples from the one in force ``cooldown_s`` before the newest."""
    horizon = ep.autoscale.cooldown_s if ep.autoscale is not None else 0.0
    newest = ep.traffic[-1].at
    keep = len(ep.traffic) - 1
    while keep > 0 and (newest - ep.traffic[keep].at).total_seconds() < horizon:
        keep -= 1
    del ep.traffic[: max(keep, len(ep.traffic) - _MAX_SAMPLES)]


def _refused(s: ServingState, e: ServeRefused) -> None:
    """Only answers its request (``evolve`` lets go of it)."""


# The serving actor's answers to a request: the first one a request gets answers it.
DECISIONS = (
    ServeRefused,
    EndpointCreated,
    RevisionAdded,
    ReplicasSet,
    EndpointRemoved,
    Event,
    TokenCreated,
    TokenRevoked,
    RolloutStarted,
    AutoscaleSet,
)
_HANDLERS: dict[type[Event], Callable[[ServingState, Any], None]] = dict(
    {
        ServeRequested: _requested,
        ServeRefused: _refused,
        EndpointCreated: _created,
        RevisionAdded: _revision,
        ReplicasSet: _targets,
        EndpointRemoved: _removed,
        TokenCreated: _token,
        TokenRevoked: _revoked,
        ReplicaChanged: _replica,
        ReplicaRotation: _rotation,
        ReplicaHealthReported: _health,
        RolloutStarted: _rollout_started,
        RolloutEnded: _rollout_ended,
        ServingTicked: _ticked,
        AutoscaleSet: _autoscale,
        RouteStatsReported: _stats,
    }
)

# Every event this fold looks at.
SERVING_EVENTS: tuple[type[Event], ...] = tuple(_HANDLERS)
