"""A replica's two clocks: its drain's grace and its warm-up deadline. Pure.

Time here is the log's: a replica's phase began at its record's ``at`` (``since``), and
"now" is the serving actor's latest ``serving.ticked`` (``ServingState.ticked_at``). The
actor appends a tick when ``next_due`` says something falls due, so a fold of the log,
not a local clock, decides that a grace is over or a deadline passed; a rebuilt actor
decides the same.

* A draining replica's session is stopped once its revision's ``drain_s`` has passed
  since it began draining (0: at once, as soon as its draining is on the log).
* A warming replica not found healthy within its revision's ``warmup_s`` (0: no limit)
  of starting to run is replaced.
"""

from datetime import datetime, timedelta

from events import ReplicaPhase
from services.domain.serving.state import EndpointView, ReplicaView, ServingState

__all__ = ["grace_over", "next_due", "warmup_over"]


def _due(ep: EndpointView, r: ReplicaView) -> datetime | None:
    """When ``r``'s clock runs out (None: it has none running)."""
    spec = ep.revisions.get(r.revision)
    if spec is None or r.since is None:
        return None
    if r.phase is ReplicaPhase.DRAINING and spec.drain_s > 0:
        return r.since + timedelta(seconds=spec.drain_s)
    if r.phase is ReplicaPhase.WARMING and spec.warmup_s > 0 and r.reported_healthy is not True:
        return r.since + timedelta(seconds=spec.warmup_s)
    return None


def _passed(due: datetime | None, now: datetime | None) -> bool:
    return due is not None and now is not None and now >= due


def grace_over(s: ServingState, ep: EndpointView, r: ReplicaView) -> bool:
    """Whether draining replica ``r`` may be stopped now."""
    spec = ep.revisions.get(r.revision)
    if spec is None or spec.drain_s <= 0 or r.since is None:
        return True
    return _passed(_due(ep, r), s.ticked_at)


def warmup_over(s: ServingState, ep: EndpointView, r: ReplicaView) -> bool:
    """Whether warming replica ``r`` missed its deadline to be healthy."""
    return r.phase is ReplicaPhase.WARMING and _passed(_due(ep, r), s.ticked_at)


def next_due(s: ServingState) -> datetime | None:
    """The earliest time a clock runs out that the latest tick has not reached."""
    found = [
        due
        for ep in s.endpoints.values()
        for r in ep.replicas.values()
        if (due := _due(ep, r)) is not None and not _passed(due, s.ticked_at)
    ]
    return min(found, default=None)
