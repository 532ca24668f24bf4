"""Autoscaling: an endpoint's replicas from its traffic as the proxies count it. Pure.

``wanted(rule, traffic, replicas, scaled_at, now)`` is the whole rule: the replicas the
endpoint should have now, or None to leave them. Everything it reads is folded from the
log (the rule, the routers' traffic reports, the targets and when they were last set),
so a serving actor that restarts, or one that is handed a batch again, decides the same;
the cooldown runs from the last ``endpoint.replicas-set`` on the log, never from a clock
started with the process.

Invariants (``tests/serving/test_autoscale.py``):

* the answer is never below ``min_replicas`` nor above ``max_replicas``;
* within ``cooldown_s`` of the last change of the targets the answer is None, except
  to bring the replicas within the bounds (a rule set or changed) or to wake an endpoint
  at zero that a request waits for (a held request must not wait out a cooldown);
* a step down needs the metric below ``down`` for the whole cooldown (the sample in
  force ``cooldown_s`` ago and every one since), a step up only the newest sample above
  ``up``.

``autoscale(serving, now, prov)`` applies it to every endpoint with a rule and one
target and no rollout under way (a rollout sets the targets until it ends), and
``next_due`` says when the answer may change with time alone (the actor's timer).
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from events import AutoscaleRule, ReplicasSet
from events import subjects as subj
from services.domain.provenance import Provenance, stamp
from services.domain.serving.state import EndpointView, ServingState, TrafficSample

__all__ = ["autoscale", "metric", "next_due", "wanted"]

Item = tuple[str, ReplicasSet]


def metric(rule: AutoscaleRule, sample: TrafficSample | None, replicas: int) -> float:
    """The rule's metric of ``sample`` (None: no traffic reported) over ``replicas``."""
    if sample is None:
        return 0.0
    per = max(replicas, 1)
    match rule.metric:
        case "rps_per_replica":
            return sample.rps / per
        case "in_flight":
            return (sample.in_flight + sample.queued) / per
        case "p95_ms":
            return float(sample.p95_ms or 0)


def _waiting(sample: TrafficSample | None) -> bool:
    """Requests are held or coming (for an endpoint at zero)."""
    return sample is not None and (sample.in_flight + sample.queued > 0 or sample.rps > 0)


def _since(
    rule: AutoscaleRule, traffic: Sequence[TrafficSample], now: datetime
) -> Sequence[TrafficSample]:
    """The samples in force over the last ``cooldown_s``: the one in force then (the
    earliest known stands for the time before it) and every later one."""
    since = now - timedelta(seconds=rule.cooldown_s)
    start = 0
    for i, sample in enumerate(traffic):
        if sample.at <= since:
            start = i
    return traffic[start:]


def _step_down(
    rule: AutoscaleRule, traffic: Sequence[TrafficSample], replicas: int, now: datetime
) -> int | None:
    """One step down if the metric was below ``down`` all the cooldown long; to zero
    only if no request came in that time at all."""
    window = _since(rule, traffic, now)
    if any(metric(rule, x, replicas) >= rule.down for x in window):
        return None
    n = max(replicas - rule.step, rule.min_replicas)
    if n == 0 and any(_waiting(x) for x in window):
        n = 1
    return n if n < replicas else None


def wanted(
    rule: AutoscaleRule,
    traffic: Sequence[TrafficSample],
    replicas: int,
    scaled_at: datetime | None,
    now: datetime,
) -> int | None:
    """The replicas the endpoint should have now under ``rule``; None: as they are.
    ``traffic``: samples oldest first; ``scaled_at``: the last change of the targets."""
    lo, hi = rule.min_replicas, rule.max_replicas
    if not lo <= replicas <= hi:
        return min(max(replicas, lo), hi)
    latest = traffic[-1] if traffic else None
    if replicas == 0:
        return 1 if _waiting(latest) and hi >= 1 else None
    if scaled_at is not None and now - scaled_at < timedelta(seconds=rule.cooldown_s):
        return None
    if metric(rule, latest, replicas) > rule.up and replicas < hi:
        return min(replicas + rule.step, hi)
    return _step_down(rule, traffic, replicas, now) if replicas > lo else None


def next_due(ep: EndpointView, now: datetime) -> datetime | None:
    """The first time after ``now`` that ``wanted`` may answer otherwise with no new
    event: a cooldown ending, or a sample leaving the look-back window."""
    rule = ep.autoscale
    if rule is None:
        return None
    cooldown = timedelta(seconds=rule.cooldown_s)
    times = [x.at + cooldown for x in ep.traffic]
    if ep.scaled_at is not None:
        times.append(ep.scaled_at + cooldown)
    return min((t for t in times if t > now), default=None)


def autoscale(serving: ServingState, now: datetime, prov: Provenance) -> list[Item]:
    """The targets every endpoint with a rule should have now (changes only)."""
    out: list[Item] = []
    for ep in serving.endpoints.values():
        if ep.removed or ep.autoscale is None or ep.rollout is not None or len(ep.targets) != 1:
            continue
        [target] = ep.targets
        n = wanted(ep.autoscale, ep.traffic, target.replicas, ep.scaled_at, now)
        if n is None or n == target.replicas:
            continue
        targets = (msgspec.structs.replace(target, replicas=n),)
        # Caused by the traffic report it follows (none: by the rule), for the audit.
        cause = max(ep.reports.values(), key=lambda r: r.at).id if ep.reports else None
        why = Provenance(prov.actor, prov.at, cause, ep.endpoint_id)
        e = stamp(
            ReplicasSet, why, endpoint_id=ep.endpoint_id, targets=targets, requester=prov.actor
        )
        out.append((subj.SERVING, e))
    return out
