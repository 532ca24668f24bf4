"""The route table the proxies serve, made from the serving fold. Pure.

Each live endpoint is a route under ``/e/<name>/``; its backends are its replicas that
have an address, each at weight 0 unless it is healthy and in rotation (so a proxy
keeps a draining replica's requests in flight, and sends it no new one); its tokens are
those neither revoked nor expired at ``now``. A replica in rotation weighs its
revision's share of the traffic divided among that revision's replicas in rotation,
scaled so that the heaviest weighs ``IN_ROTATION_WEIGHT`` (one revision alone: every
replica the same); a share above 0 never rounds to weight 0. Should no replica in
rotation have a share (every revision with traffic has none in rotation), they all weigh
the same rather than none answering. The health check is that of the revision
taking most traffic (all of them, until rolling updates, share the same).
"""

from datetime import datetime
from fractions import Fraction

from events import HealthSpec, ReplicaPhase
from services.domain.serving.route_table import Backend, HealthCheck, Route, RouteTable
from services.domain.serving.state import EndpointView, ReplicaView, ServingState

__all__ = ["IN_ROTATION_WEIGHT", "next_expiry", "route_table", "weights"]

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
        backends=_backends(ep),
    )


def _cold_start(ep: EndpointView) -> float:
    """How long a proxy holds a request while the endpoint has no replica in rotation:
    only an endpoint that may scale to zero waits (a request wakes it)."""
    rule = ep.autoscale
    return rule.cold_start_s if rule is not None and rule.min_replicas == 0 else 0.0


def _serving(r: ReplicaView) -> bool:
    return r.in_rotation and r.phase is ReplicaPhase.HEALTHY


def weights(ep: EndpointView) -> dict[str, int]:
    """Each replica in rotation's weight, by session id (see the module)."""
    serving = [r for r in ep.replicas.values() if _serving(r)]
    share = {t.revision: t.traffic for t in ep.targets}
    count: dict[int, int] = {}
    for r in serving:
        count[r.revision] = count.get(r.revision, 0) + 1
    raw = {r.session_id: Fraction(share.get(r.revision, 0), count[r.revision]) for r in serving}
    top = max(raw.values(), default=Fraction(0))
    if top == 0:
        return dict.fromkeys(raw, IN_ROTATION_WEIGHT)
    return {
        sid: 0 if x == 0 else max(1, round(x / top * IN_ROTATION_WEIGHT)) for sid, x in raw.items()
    }


def _backends(ep: EndpointView) -> tuple[Backend, ...]:
    weight = weights(ep)
    return tuple(
        Backend(
            session_id=r.session_id, host=r.host, port=r.port, weight=weight.get(r.session_id, 0)
        )
        for r in sorted(ep.replicas.values(), key=lambda r: r.session_id)
        if r.host is not None and r.port is not None
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
