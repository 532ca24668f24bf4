"""The autoscaling rule, pure: bounds, cooldown, steps, scale to zero and the wake from
it; the traffic window as the fold keeps it."""

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import given
from hypothesis import strategies as st

from events import AutoscaleRule, AutoscaleSet, RouteStatsReported
from services.domain.serving.autoscale import next_due, wanted
from services.domain.serving.state import EndpointView, ServingState, TrafficSample, evolve

E = TypeVar("E", AutoscaleSet, RouteStatsReported)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
RULE = AutoscaleRule(
    metric="rps_per_replica", up=10, down=2, step=1, cooldown_s=30, min_replicas=1, max_replicas=4
)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def sample(s: float, rps: float = 0.0, in_flight: int = 0) -> TrafficSample:
    return TrafficSample(at=at(s), rps=rps, in_flight=in_flight, queued=0)


def test_busy_replicas_step_up_to_the_maximum_and_not_within_the_cooldown() -> None:
    busy = [sample(100, rps=50)]
    assert wanted(RULE, busy, 2, at(0), at(100)) == 3
    assert wanted(RULE, busy, 4, at(0), at(100)) is None  # at the maximum
    assert wanted(RULE, busy, 2, at(80), at(100)) is None  # scaled 20 s ago, cooldown 30
    step3 = AutoscaleRule(**{**_fields(RULE), "step": 3})
    assert wanted(step3, busy, 2, at(0), at(100)) == 4  # a step ends at the maximum


def test_a_step_down_wants_the_whole_cooldown_calm() -> None:
    calm_since_50 = [sample(10, rps=40), sample(50, rps=1)]
    assert wanted(RULE, calm_since_50, 3, at(0), at(79)) is None  # calm for 29 s only
    assert wanted(RULE, calm_since_50, 3, at(0), at(80)) == 2
    assert wanted(RULE, calm_since_50, 1, at(0), at(200)) is None  # at the minimum


def test_to_zero_only_with_no_request_for_the_cooldown_and_a_waiting_request_wakes_it() -> None:
    zero = AutoscaleRule(**{**_fields(RULE), "min_replicas": 0, "down": 5})
    trickle = [sample(10, rps=0.5)]
    assert wanted(zero, trickle, 1, at(0), at(100)) is None  # calm, not idle
    idle = [sample(10, rps=0.5), sample(60, rps=0.0)]
    assert wanted(zero, idle, 1, at(0), at(89)) is None
    assert wanted(zero, idle, 1, at(0), at(90)) == 0
    assert wanted(zero, [], 1, None, at(90)) == 0  # no traffic ever reported
    held = [*idle, sample(95, in_flight=1)]
    assert wanted(zero, held, 0, at(94), at(95)) == 1  # within the cooldown: a wake
    assert wanted(zero, idle, 0, at(90), at(500)) is None


def test_replicas_out_of_the_bounds_are_brought_in_at_once() -> None:
    assert wanted(RULE, [], 0, at(99), at(100)) == 1
    assert wanted(RULE, [], 9, at(99), at(100)) == 4


def test_the_other_metrics() -> None:
    flight = AutoscaleRule(**{**_fields(RULE), "metric": "in_flight", "up": 3, "down": 1})
    assert wanted(flight, [sample(1, in_flight=8)], 2, None, at(100)) == 3
    p95 = AutoscaleRule(**{**_fields(RULE), "metric": "p95_ms", "up": 200, "down": 50})
    slow = TrafficSample(at=at(1), rps=1, in_flight=0, queued=0, p95_ms=300)
    assert wanted(p95, [slow], 2, None, at(100)) == 3


rules = st.builds(
    lambda lo, span, up, gap, step, cooldown: AutoscaleRule(
        metric="rps_per_replica",
        up=up + gap,
        down=up,
        step=step,
        cooldown_s=cooldown,
        min_replicas=lo,
        max_replicas=max(lo + span, 1),
    ),
    st.integers(0, 5),
    st.integers(0, 5),
    st.floats(0, 100),
    st.floats(0.1, 100),
    st.integers(1, 4),
    st.floats(1, 120),
)
windows = st.lists(
    st.builds(sample, st.floats(0, 300), st.floats(0, 500), st.integers(0, 20)), max_size=6
).map(lambda xs: sorted(xs, key=lambda x: x.at))


@given(rules, windows, st.integers(0, 12), st.floats(0, 300), st.floats(0, 400))
def test_never_beyond_the_bounds_and_never_within_the_cooldown(
    rule: AutoscaleRule, window: list[TrafficSample], replicas: int, scaled: float, now: float
) -> None:
    n = wanted(rule, window, replicas, at(scaled), at(now))
    if n is None:
        return
    assert rule.min_replicas <= n <= rule.max_replicas
    assert n != replicas
    in_bounds = rule.min_replicas <= replicas <= rule.max_replicas
    if in_bounds and replicas > 0 and now >= scaled:
        assert now - scaled >= rule.cooldown_s
    if in_bounds:
        assert abs(n - replicas) <= rule.step


def test_the_fold_keeps_the_window_of_the_cooldown_and_sums_the_routers() -> None:
    s = ServingState()
    ep = EndpointView(
        endpoint_id="ep",
        name="e",
        owner="AK",
        domain="d",
        project="p",
        group="g",
        public=True,
        created_id="c",
        created_at=T0,
    )
    s.endpoints["ep"] = ep
    evolve(s, _event(AutoscaleSet, 0, endpoint_id="ep", rule=RULE, requester="AK"))
    for t, router, requests in [(0, "a", 10), (10, "b", 20), (20, "a", 0), (60, "a", 30)]:
        e = _event(
            RouteStatsReported,
            t,
            router=router,
            endpoint_id="ep",
            window_ms=1000,
            requests=requests,
            in_flight=1,
        )
        evolve(s, e)
    # from the one in force 30 s before the newest (at 20) on
    assert [(x.at, x.rps, x.in_flight) for x in ep.traffic] == [(at(20), 20, 2), (at(60), 50, 2)]
    assert next_due(ep, at(61)) == at(90)
    evolve(
        s,
        _event(
            RouteStatsReported,
            5,
            router="a",
            endpoint_id="ep",
            window_ms=1,
            requests=9,
            in_flight=0,
        ),
    )
    assert len(ep.traffic) == 2  # a late report of a router is older than its last: ignored


def _fields(rule: AutoscaleRule) -> dict[str, object]:
    return {f: getattr(rule, f) for f in rule.__struct_fields__}


def _event(cls: type[E], t: float, **kw: Any) -> E:
    return cls(id=f"e{t}-{kw.get('router', '')}", at=at(t), actor="test", **kw)
