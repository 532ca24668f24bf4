"""The rolling update's step function: never fewer healthy replicas than ``D - U``,
never more wanted than ``D + S``, and it ends with the new revision alone, whatever the
sizes (hypothesis); traffic in proportion to the replicas."""

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from events import ReplicaPhase, ReplicasSet, RevisionSpec, RevisionTarget, RolloutEnded, Slots
from events import RolloutPolicy as Policy
from services.domain.provenance import Provenance
from services.domain.serving.rollout import advance, next_targets, proportional
from services.domain.serving.routes import weights
from services.domain.serving.state import EndpointView, ReplicaView, RolloutView

AT = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = RevisionSpec(image="fgpu/busybox:latest", slots=Slots(cpu=500, mem=1 << 30, fgpu=25))


def endpoint(targets: dict[int, int], to: int, want: int, policy: Policy) -> EndpointView:
    ep = EndpointView(
        endpoint_id="ep-1",
        name="one",
        owner="AK",
        domain="default",
        project="default",
        group="default",
        public=True,
        created_id="c1",
        created_at=AT,
        revisions={n: SPEC for n in range(1, to + 1)},
        targets=proportional(targets),
    )
    ep.rollout = RolloutView(
        revision=to, replicas=want, policy=policy, requester="AK", started_id="r1", started_at=AT
    )
    return ep


def settle(ep: EndpointView, healthy: bool = True) -> None:
    """Every wanted slot filled by a replica (healthy and in rotation, or warming); every
    other replica gone: what reconcile and the routers bring about between steps."""
    wanted = {(t.revision, k) for t in ep.targets for k in range(t.replicas)}
    kept = {(r.revision, r.ordinal): r for r in ep.replicas.values()}
    ep.replicas = {}
    for n, k in sorted(wanted):
        old = kept.get((n, k))
        r = old or ReplicaView(
            session_id=f"s{n}-{k}",
            revision=n,
            ordinal=k,
            generation=0,
            phase=ReplicaPhase.HEALTHY if healthy else ReplicaPhase.WARMING,
            in_rotation=healthy,
        )
        ep.replicas[r.session_id] = r


def healthy_wanted(ep: EndpointView) -> int:
    wanted = {(t.revision, k) for t in ep.targets for k in range(t.replicas)}
    return sum(
        (r.revision, r.ordinal) in wanted and r.phase is ReplicaPhase.HEALTHY and r.in_rotation
        for r in ep.replicas.values()
    )


def wanted_total(ep: EndpointView) -> int:
    return sum(t.replicas for t in ep.targets)


policies = st.builds(Policy, max_surge=st.integers(0, 4), max_unavailable=st.integers(0, 4)).filter(
    lambda p: p.max_surge + p.max_unavailable > 0
)


@given(old=st.integers(0, 8), want=st.integers(0, 8), policy=policies)
def test_a_rollout_keeps_its_bounds_at_every_step_and_ends_on_the_new_revision(
    old: int, want: int, policy: Policy
) -> None:
    ep = endpoint({1: old}, 2, want, policy)
    settle(ep)
    for _ in range(4 * (old + want) + 4):
        healthy_before, wanted_before = healthy_wanted(ep), wanted_total(ep)
        targets = next_targets(ep)
        if targets is None:
            break
        ep.targets = targets
        assert healthy_wanted(ep) >= min(healthy_before, want - policy.max_unavailable)
        assert wanted_total(ep) <= max(want + policy.max_surge, wanted_before)
        assert sum(t.traffic for t in targets) == 100
        settle(ep)
    assert ep.targets == (RevisionTarget(revision=2, replicas=want, traffic=100),)


def test_the_new_revision_grows_by_the_surge_and_the_old_shrinks_only_once_it_is_healthy() -> None:
    ep = endpoint({1: 2}, 2, 2, Policy(max_surge=1, max_unavailable=0))
    settle(ep)
    assert next_targets(ep) == proportional({1: 2, 2: 1})
    ep.targets = proportional({1: 2, 2: 1})
    settle(ep, healthy=False)  # the new replica warms up
    assert next_targets(ep) is None  # nothing moves until it is healthy
    settle(ep)
    ep.replicas["s2-0"].phase = ReplicaPhase.HEALTHY
    ep.replicas["s2-0"].in_rotation = True
    assert next_targets(ep) == proportional({1: 1, 2: 2})


def test_an_old_revision_that_is_not_healthy_gives_way_at_once() -> None:
    """A rollback from a broken revision is not held up by its broken replicas."""
    ep = endpoint({2: 2}, 1, 2, Policy(max_surge=1, max_unavailable=0))
    settle(ep, healthy=False)
    assert next_targets(ep) == proportional({1: 2})


def test_the_last_step_ends_the_rollout_and_each_step_names_its_start_as_cause() -> None:
    ep = endpoint({1: 1, 2: 1}, 2, 1, Policy(max_surge=1, max_unavailable=0))
    settle(ep)
    step, ended = advance(ep, Provenance("serving", AT))
    assert isinstance(step, ReplicasSet) and isinstance(ended, RolloutEnded)
    assert step.targets == (RevisionTarget(revision=2, replicas=1, traffic=100),)
    assert step.causation_id == ended.causation_id == "r1"
    assert ended.outcome == "done"


def test_traffic_follows_the_replicas_and_sums_to_100() -> None:
    assert [t.traffic for t in proportional({1: 2, 2: 1})] == [67, 33]
    assert [t.traffic for t in proportional({1: 1, 2: 1, 3: 1})] == [33, 33, 34]
    assert [t.traffic for t in proportional({1: 0, 2: 0})] == [0, 100]


def test_a_replica_weighs_its_revisions_share_over_that_revisions_replicas_in_rotation() -> None:
    ep = endpoint({1: 2, 2: 1}, 2, 3, Policy())
    ep.targets = (
        RevisionTarget(revision=1, replicas=2, traffic=90),
        RevisionTarget(revision=2, replicas=1, traffic=10),
    )
    settle(ep)
    assert weights(ep) == {"s1-0": 100, "s1-1": 100, "s2-0": 22}
    ep.replicas["s1-1"].in_rotation = False  # one blue replica out: the other takes its part
    assert weights(ep) == {"s1-0": 100, "s2-0": 11}
    ep.targets = (
        RevisionTarget(revision=1, replicas=2, traffic=0),
        RevisionTarget(revision=2, replicas=1, traffic=100),
    )
    assert weights(ep) == {"s1-0": 0, "s2-0": 100}
    ep.replicas["s2-0"].in_rotation = False  # no share left in rotation: all alike
    assert weights(ep) == {"s1-0": 100}
