"""The intake's pure rules: what a key may hand in, at which rate, and what is said of the
rest (services/domain/intake.py)."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import (
    AdminRequested,
    AnyEvent,
    CreateDomain,
    PipelineCancelRequested,
    PipelineRerunRequested,
    PipelineRunRequested,
    PipelineScheduleRemoved,
    PipelineScheduleSet,
    PipelineSpec,
    PipelineTask,
    PolicySet,
    ScaleEndpoint,
    ServeRequested,
    SessionDestroyRequested,
    SessionRequested,
    Slots,
)
from events import subjects as subj
from services.domain.intake import Dropped, Drops, KeyRates, routed
from services.domain.provenance import Provenance, stamp

AT = datetime(2026, 1, 1, tzinfo=UTC)
SMALL = Slots(cpu=1000, mem=1 << 30, fgpu=50)


def _create(actor: str, owner: str, sid: str = "s1") -> SessionRequested:
    return stamp(
        SessionRequested,
        Provenance(actor, AT),
        session_id=sid,
        owner=owner,
        image="fgpu/busybox:latest",
        slots=SMALL,
    )


def _serve(actor: str, requester: str) -> ServeRequested:
    return stamp(
        ServeRequested,
        Provenance(actor, AT),
        requester=requester,
        command=ScaleEndpoint(endpoint_id="ep-1", replicas=2),
    )


def _destroy(actor: str, requester: str, sid: str = "s1") -> SessionDestroyRequested:
    return stamp(
        SessionDestroyRequested, Provenance(actor, AT), session_id=sid, requester=requester
    )


def test_a_keys_own_requests_go_on_their_own_subjects_in_order() -> None:
    create, destroy, serve = _create("k", "k"), _destroy("k", "k"), _serve("k", "k")
    ask = stamp(
        AdminRequested, Provenance("k", AT), requester="k", command=CreateDomain(domain="d")
    )
    assert routed("k", [create, destroy, ask, serve]) == [
        (subj.request("k", "s1"), create),
        (subj.request("k", "s1"), destroy),
        (subj.admin("k", ask.id), ask),
        (subj.request("k", serve.id), serve),  # a serve request: on its own id
    ]


@pytest.mark.parametrize(
    ("events", "why"),
    [
        ([_create("k", "v")], "a request of k in the name of v"),
        ([_destroy("k", "v")], "a request of k in the name of v"),
        ([_create("v", "k")], "a request of k in the name of v"),  # who caused it: another
        ([_create("k", "k"), _destroy("k", "v")], "a request of k in the name of v"),
        ([_serve("k", "v")], "a request of k in the name of v"),
        ([_serve("v", "k")], "a request of k in the name of v"),
        ([], "no request"),
    ],
)
def test_a_request_in_anothers_name_is_refused_whole(events: list[object], why: str) -> None:
    assert routed("k", events) == why  # type: ignore[arg-type]


def test_only_requests_are_handed_in_and_only_on_subjects_of_the_log() -> None:
    policy = stamp(PolicySet, Provenance("k", AT), owner="k")
    assert routed("k", [policy]) == "policy.set.v1 is not a request"
    bad = routed("k", [_create("k", "k", sid="s.1")])
    assert bad == "'fgpu.req.k.s.1' is no subject of the log"


def test_a_bucket_holds_its_burst_and_refills_at_its_rate() -> None:
    rates = KeyRates(rate=10, burst=5)
    assert rates.take("k", 5, 0.0)
    assert not rates.take("k", 1, 0.0) and not rates.any_left("k", 0.05)
    assert rates.take("other", 5, 0.0)  # each key its own
    assert rates.take("k", 1, 0.1)  # one token back after a tenth of a second
    assert not rates.take("k", 1, 0.1)
    assert not rates.take("k", 6, 100.0)  # never more than the burst at once
    assert rates.take("k", 5, 100.0)


def test_full_buckets_are_forgotten() -> None:
    rates = KeyRates(rate=1, burst=2)
    for key in ("a", "b", "c"):
        rates.take(key, 1, 0.0)
    rates.forget_full(0.5)
    assert len(rates) == 3
    rates.forget_full(1.0)
    assert len(rates) == 0


@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 4)), max_size=60))
def test_a_bucket_never_lets_more_through_than_burst_plus_rate_times_time(
    asks: list[tuple[float, int]],
) -> None:
    rates, now, taken = KeyRates(rate=3, burst=4), 0.0, 0
    for gap, n in asks:
        now += gap
        taken += n if rates.take("k", n, now) else 0
    assert taken <= 4 + 3 * now + 1e-9


def test_a_keys_first_drop_is_said_at_once_then_once_a_window() -> None:
    drops = Drops(window_s=10)
    drops.rate_limited("k", 3, 1.0)
    drops.refused("k", 1, "not requests", 1.0)
    assert drops.due(1.0) == [Dropped("k", 1.0, 3, 1, "not requests")]
    drops.rate_limited("k", 5, 2.0)
    drops.refused("k", 1, "a request of k in the name of v", 3.0)
    assert drops.due(5.0) == []  # within the window: counted
    assert drops.due(11.0) == [Dropped("k", 2.0, 5, 1, "a request of k in the name of v")]
    assert drops.due(30.0) == [] and drops.pending() == 0
    drops.rate_limited("k", 1, 40.0)  # quiet for a window: said at once again
    assert drops.due(40.0) == [Dropped("k", 40.0, 1, 0, None)]


def test_a_record_not_written_is_said_with_what_follows() -> None:
    drops = Drops(window_s=10)
    drops.rate_limited("k", 2, 1.0)
    [said] = drops.due(1.0)
    drops.unsay(said)
    drops.rate_limited("k", 1, 2.0)
    assert drops.due(2.0) == [Dropped("k", 1.0, 3, 0, None)]


def _pipeline(actor: str, requester: str, run_id: str = "p1") -> list[AnyEvent]:
    spec = PipelineSpec(
        name="p",
        tasks=(
            PipelineTask(name="a", image="fgpu/busybox:latest", command=("true",), slots=SMALL),
        ),
    )
    prov = Provenance(actor, AT)
    return [
        stamp(PipelineRunRequested, prov, run_id=run_id, requester=requester, spec=spec),
        stamp(PipelineCancelRequested, prov, run_id=run_id, requester=requester),
        stamp(PipelineRerunRequested, prov, run_id=run_id, requester=requester, from_task="a"),
    ]


def test_a_keys_pipeline_requests_go_on_its_own_request_subject() -> None:
    asked = _pipeline("k", "k")
    assert routed("k", asked) == [(subj.request("k", "p1"), e) for e in asked]
    prov = Provenance("k", AT)
    spec = PipelineSpec(name="p", tasks=())
    set_ = stamp(
        PipelineScheduleSet, prov, schedule_id="c1", requester="k", cron="* * * * *", spec=spec
    )
    off = stamp(PipelineScheduleRemoved, prov, schedule_id="c1", requester="k")
    assert routed("k", [set_, off]) == [
        (subj.request("k", "c1"), set_),
        (subj.request("k", "c1"), off),
    ]
    assert routed("k", [stamp(PipelineScheduleRemoved, prov, schedule_id="c1", requester="v")]) == (
        "a request of k in the name of v"
    )


@pytest.mark.parametrize("i", range(3))
def test_a_pipeline_request_in_anothers_name_or_on_no_subject_is_refused(i: int) -> None:
    assert routed("k", [_pipeline("k", "v")[i]]) == "a request of k in the name of v"
    assert routed("k", [_pipeline("v", "k")[i]]) == "a request of k in the name of v"
    bad = routed("k", [_pipeline("k", "k", run_id="a.b")[i]])
    assert bad == f"{subj.request('k', 'a.b')!r} is no subject of the log"
