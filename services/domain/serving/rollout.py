"""Rolling updates: the next targets of an endpoint's rollout, from the fold alone. Pure.

A rollout (``endpoint.rollout-started``) moves an endpoint to ``replicas`` (D) of one
revision (the new one, N) under its policy (surge S, unavailable U). Each step is a
whole set of targets, and it is a function of the folded state only (the targets and
which replicas are healthy and in rotation), so a serving actor that restarts, or gets
an event again, computes the same step, and one already on the log computes none.

A step, in two moves:

* **down**: the other revisions' targets (and N's beyond D) shrink slot by slot, the
  highest ordinal first. Dropping a slot whose replica is not healthy costs nothing;
  dropping a healthy one is allowed while the healthy replicas left in wanted slots stay
  at least D - U. So a step never takes the healthy count below ``D - U`` (or below what
  it was, if it was below already);
* **up**: N's target grows to ``min(D, D + S - the others' targets)``, so the wanted
  replicas never exceed ``D + S`` (or what they were, if above already).

Traffic follows the replicas: each target's share is its part of the wanted replicas
(largest remainder, summing to 100), so every replica in rotation weighs about the same
whichever revision it runs. Once only N is wanted, at D, the targets are N alone with all
traffic and the rollout ends (``done``).
"""

from collections.abc import Mapping

from events import AnyEvent, ReplicaPhase, ReplicasSet, RevisionTarget, RolloutEnded
from services.domain.provenance import Provenance, stamp
from services.domain.serving.state import EndpointView, live_replicas

__all__ = ["advance", "next_targets", "proportional"]


def proportional(counts: Mapping[int, int]) -> tuple[RevisionTarget, ...]:
    """Targets of ``counts`` (revision -> replicas) with traffic in proportion to the
    replicas (all of it to the highest revision when none is wanted), by revision."""
    total = sum(counts.values())
    if total == 0:
        top = max(counts)
        return tuple(
            RevisionTarget(revision=n, replicas=0, traffic=100 if n == top else 0)
            for n in sorted(counts)
        )
    exact = {n: c * 100 / total for n, c in counts.items()}
    share = {n: int(x) for n, x in exact.items()}
    by_remainder = sorted(counts, key=lambda n: (share[n] - exact[n], -n))
    for n in by_remainder[: 100 - sum(share.values())]:
        share[n] += 1
    return tuple(
        RevisionTarget(revision=n, replicas=counts[n], traffic=share[n]) for n in sorted(counts)
    )


def _healthy_slots(ep: EndpointView) -> set[tuple[int, int]]:
    return {
        (r.revision, r.ordinal)
        for r in live_replicas(ep)
        if r.phase is ReplicaPhase.HEALTHY and r.in_rotation
    }


def next_targets(ep: EndpointView) -> tuple[RevisionTarget, ...] | None:
    """The targets of the rollout's next step; None when there is no rollout or it
    cannot move now (see the module)."""
    ro = ep.rollout
    if ro is None:
        return None
    want, new_rev = ro.replicas, ro.revision
    counts = {t.revision: t.replicas for t in ep.targets}
    counts.setdefault(new_rev, 0)
    healthy = _healthy_slots(ep)
    wanted = {(n, k) for n, c in counts.items() for k in range(c)}
    budget = len(healthy & wanted) - (want - ro.policy.max_unavailable)
    for n in sorted(sorted(counts), key=lambda n: n == new_rev):  # the others first, N last
        floor = want if n == new_rev else 0
        while counts[n] > floor:
            if (n, counts[n] - 1) in healthy:
                if budget <= 0:
                    break
                budget -= 1
            counts[n] -= 1
    others = sum(c for n, c in counts.items() if n != new_rev)
    counts[new_rev] = min(want, max(counts[new_rev], want + ro.policy.max_surge - others))
    counts = {n: c for n, c in counts.items() if c > 0 or n == new_rev}
    found = proportional(counts)
    return None if found == ep.targets else found


def advance(ep: EndpointView, prov: Provenance) -> list[AnyEvent]:
    """The events of the rollout's next step: ``endpoint.replicas-set`` (and
    ``endpoint.rollout-ended`` once its targets are reached), each caused by the
    rollout's start; none when it cannot move now."""
    ro = ep.rollout
    if ro is None:
        return []
    targets = next_targets(ep)
    done = ep.targets if targets is None else targets
    out: list[AnyEvent] = []
    cause = Provenance(prov.actor, prov.at, ro.started_id, ep.endpoint_id)
    if targets is not None:
        out.append(
            stamp(
                ReplicasSet,
                cause,
                endpoint_id=ep.endpoint_id,
                targets=targets,
                requester=ro.requester,
            )
        )
    if done == (RevisionTarget(revision=ro.revision, replicas=ro.replicas, traffic=100),):
        out.append(
            stamp(
                RolloutEnded,
                cause,
                endpoint_id=ep.endpoint_id,
                revision=ro.revision,
                outcome="done",
            )
        )
    return out
