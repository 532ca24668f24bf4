"""The route table the proxies serve, made from the serving fold. Pure.

Each live endpoint is a route under ``/e/<name>/``; its backends are its replicas that
have an address, each at weight 0 unless it is healthy and in rotation (so a proxy
keeps a draining replica's requests in flight, and sends it no new one); its tokens are
those neither revoked nor expired at ``now``. The health check is that of the revision
taking most traffic (all of them, until rolling updates, share the same).
"""

from datetime import datetime

from events import HealthSpec, ReplicaPhase
from services.domain.serving.route_table import Backend, HealthCheck, Route, RouteTable
from services.domain.serving.state import EndpointView, ReplicaView, ServingState

__all__ = ["IN_ROTATION_WEIGHT", "next_expiry", "route_table"]

IN_ROTATION_WEIGHT = 100


def route_table(s: ServingState, now: datetime) -> RouteTable:
    """What every proxy serves at ``now``, endpoints by name."""
    live = sorted((ep for ep in s.endpoints.values() if not ep.removed), key=lambda ep: ep.name)
    return RouteTable(routes=tuple(_route(ep, now) for ep in live))


def next_expiry(s: ServingState, now: datetime) -> datetime | None:
    """When the table of ``now`` next changes with time alone: the earliest expiry, after
    ``now``, of a token a live endpoint's route holds (None: no such token)."""
    times = [
        t.expires_at
        for ep in s.endpoints.values()
        if not ep.removed
        for t in ep.tokens.values()
        if not t.revoked and t.expires_at > now
    ]
    return min(times, default=None)


def _route(ep: EndpointView, now: datetime) -> Route:
    return Route(
        endpoint_id=ep.endpoint_id,
        name=ep.name,
        path_prefix=f"/e/{ep.name}/",
        public=ep.public,
        token_sha256=frozenset(
            t.sha256 for t in ep.tokens.values() if not t.revoked and t.expires_at > now
        ),
        health=_health(ep),
        cold_start_s=_cold_start(ep),
        backends=tuple(
            _backend(r)
            for r in sorted(ep.replicas.values(), key=lambda r: r.session_id)
            if r.host is not None and r.port is not None
        ),
    )


def _cold_start(ep: EndpointView) -> float:
    """How long a proxy holds a request while the endpoint has no replica in rotation:
    only an endpoint that may scale to zero waits (a request wakes it)."""
    rule = ep.autoscale
    return rule.cold_start_s if rule is not None and rule.min_replicas == 0 else 0.0


def _backend(r: ReplicaView) -> Backend:
    assert r.host is not None and r.port is not None
    serving = r.in_rotation and r.phase is ReplicaPhase.HEALTHY
    return Backend(
        session_id=r.session_id,
        host=r.host,
        port=r.port,
        weight=IN_ROTATION_WEIGHT if serving else 0,
    )


def _health(ep: EndpointView) -> HealthCheck:
    spec: HealthSpec | None = None
    if ep.targets:
        top = max(ep.targets, key=lambda t: (t.traffic, t.revision))
        spec = ep.revisions[top.revision].health
    elif ep.revisions:
        spec = ep.revisions[max(ep.revisions)].health
    if spec is None:
        return HealthCheck()
    return HealthCheck(
        path=spec.path,
        interval_s=spec.interval_s,
        timeout_s=spec.timeout_s,
        initial_delay_s=spec.initial_delay_s,
        healthy_after=spec.healthy_after,
        unhealthy_after=spec.unhealthy_after,
    )
