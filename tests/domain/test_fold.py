"""The fold's promises, one by one: status guards, tenancy, refused payloads, quota held from
admission to the end, destroy requests and their answers, and redelivery."""

from typing import Any

import pytest

from events import (
    AgentLost,
    AnyEvent,
    DestroyRejected,
    Malformed,
    PayloadRejected,
    PolicySet,
    Record,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionErrored,
    SessionPreparing,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionTerminated,
    SessionTerminating,
    Slots,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import apply_decision, evolve, fold
from services.domain.records import OwnerUsage
from services.domain.status import SessionStatus
from tests.support.fold_log import IMAGE, NEED, T0, Log

S = SessionStatus


def unchanged_but_seq(before: ClusterState, after: ClusterState) -> bool:
    """Whether two states agree on everything but the sequence bookkeeping."""
    return snapshot(before) == snapshot(after)


def snapshot(s: ClusterState) -> Any:
    return (
        {
            sid: (v.status, v.agent_id, v.devices, v.quota_held, v.reason, v.waiting, v.owner)
            for sid, v in s.sessions.items()
        },
        {
            aid: (
                a.allocated,
                a.lost,
                dict(a.sessions),
                {i: dict(g.shares) for i, g in a.gpus.items()},
            )
            for aid, a in s.agents.items()
        },
        {o: (u.sessions, u.slots) for o, u in s.usage.items()},
        dict(s.policies),
        list(s.queue),
        list(s.undecided),
        list(s.destroys),
        s.destroy_answers,
        dict(s.malformed),
    )


def copy_after(log: Log) -> ClusterState:
    return fold(list(log.records))


# ---- status guards --------------------------------------------------------------------------


def test_a_session_goes_through_its_life() -> None:
    log = Log()
    log.running()
    log.report(SessionTerminated, exit_code=3, reason="exited")
    v = log.state.sessions["s1"]
    assert v.status is S.TERMINATED
    assert v.exit_code == 3
    assert [t.status for t in v.history] == [
        S.REQUESTED,
        S.PENDING,
        S.SCHEDULED,
        S.RUNNING,
        S.TERMINATED,
    ]
    assert [t.seq for t in v.history] == [2, 3, 4, 5, 6]


def test_a_second_scheduled_changes_nothing() -> None:
    log = Log()
    log.agent("a1")
    log.agent("a2")
    log.request()
    log.admit()
    log.schedule(agent_id="a1", gpu=0)
    before = copy_after(log)
    log.schedule(agent_id="a2", gpu=1)
    log.schedule(agent_id="a1", gpu=1)
    assert unchanged_but_seq(before, log.state)
    assert log.state.sessions["s1"].agent_id == "a1"
    assert log.state.agents["a2"].allocated == Slots()
    assert log.state.agents["a1"].gpus[1].shares == {}


def test_a_scheduled_for_an_unknown_agent_or_session_changes_nothing() -> None:
    log = Log()
    log.agent()
    log.request()
    log.admit()
    before = copy_after(log)
    log.schedule(agent_id="nowhere")
    log.schedule(sid="ghost")
    assert unchanged_but_seq(before, log.state)
    assert log.state.sessions["s1"].status is S.PENDING


def test_a_scheduled_before_admission_changes_nothing() -> None:
    log = Log()
    log.agent()
    log.request()
    log.schedule()
    assert log.state.sessions["s1"].status is S.REQUESTED
    assert log.state.agents["a1"].allocated == Slots()


@pytest.mark.parametrize("cls", [SessionRunning, SessionTerminated, SessionErrored])
def test_a_report_from_the_wrong_agent_changes_nothing(cls: type[AnyEvent]) -> None:
    log = Log()
    log.agent("a2")
    log.running()
    before = copy_after(log)
    kw: dict[str, Any] = {
        SessionRunning: {"container_id": "other"},
        SessionTerminated: {"exit_code": 1, "reason": "x"},
        SessionErrored: {"reason": "x"},
    }[cls]
    log.report(cls, agent_id="a2", **kw)
    assert unchanged_but_seq(before, log.state)
    assert log.state.sessions["s1"].status is S.RUNNING


def test_late_reports_change_nothing() -> None:
    log = Log()
    log.running()
    before = copy_after(log)
    log.report(SessionPreparing)  # after RUNNING: late
    assert unchanged_but_seq(before, log.state)
    log.terminated()
    ended = copy_after(log)
    log.report(SessionRunning, container_id="again")
    log.report(SessionErrored, reason="late")
    log.terminated()
    assert unchanged_but_seq(ended, log.state)
    assert log.state.sessions["s1"].status is S.TERMINATED


def test_an_admission_after_a_cancel_changes_nothing() -> None:
    log = Log()
    log.agent()
    log.request()
    log.cancel()
    before = copy_after(log)
    log.admit()
    assert unchanged_but_seq(before, log.state)
    v = log.state.sessions["s1"]
    assert v.status is S.CANCELLED
    assert not v.quota_held
    assert "alice" not in log.state.usage
    assert "s1" not in log.state.queue


def test_a_request_reusing_an_id_changes_nothing() -> None:
    log = Log()
    log.agent()
    log.request("s1", "alice")
    log.admit("s1", "alice")
    before = copy_after(log)
    other = SessionRequested(
        id="req-again",
        at=T0,
        actor="bob",
        session_id="s1",
        owner="bob",
        image="fgpu/other:2",
        slots=Slots(cpu=1, mem=1, fgpu=1),
    )
    log.add(subj.request("bob", "s1"), other)
    assert unchanged_but_seq(before, log.state)
    v = log.state.sessions["s1"]
    assert (v.owner, v.image, v.request_id) == ("alice", IMAGE, "req-s1")


@pytest.mark.parametrize(
    "late",
    [
        lambda log: log.add(
            subj.quota("alice"),
            SessionRejected(
                id="rej", at=T0, actor="quota", session_id="s1", owner="alice", code="q", reason="r"
            ),
        ),
        lambda log: log.cancel(),
        lambda log: log.admit(),
    ],
    ids=["rejected", "cancelled", "admitted"],
)
def test_quota_and_cancel_decisions_after_placement_change_nothing(late: Any) -> None:
    log = Log()
    log.running()
    before = copy_after(log)
    late(log)
    assert unchanged_but_seq(before, log.state)


def test_terminating_only_from_a_placed_session() -> None:
    log = Log()
    log.agent()
    log.request()
    log.admit()
    stop = SessionTerminating(
        id="stop", at=T0, actor="scheduler", session_id="s1", agent_id="a1", reason="r"
    )
    log.add(subj.LEDGER, stop)
    assert log.state.sessions["s1"].status is S.PENDING
    log.schedule()
    log.add(subj.LEDGER, SessionTerminating(**{**_fields(stop), "id": "stop2"}))
    assert log.state.sessions["s1"].status is S.TERMINATING
    log.terminated()
    v = log.state.sessions["s1"]
    assert v.status is S.TERMINATED
    assert v.reason == "r; exited"


def test_queued_keeps_the_first_reason_and_only_for_pending() -> None:
    log = Log()
    log.agent()
    log.request()
    log.admit()
    for n, reason in enumerate(["first", "second"]):
        log.add(
            subj.LEDGER,
            SessionQueued(id=f"q{n}", at=T0, actor="scheduler", session_id="s1", reason=reason),
        )
    assert log.state.sessions["s1"].waiting == "first"
    log.request("s2")
    log.add(
        subj.LEDGER, SessionQueued(id="q3", at=T0, actor="scheduler", session_id="s2", reason="x")
    )
    assert log.state.sessions["s2"].waiting is None


def test_a_re_registration_keeps_allocations_and_lifts_lost() -> None:
    log = Log()
    log.running()
    log.add(
        subj.LEDGER, AgentLost(id="lost", at=T0, actor="scheduler", agent_id="a1", reason="quiet")
    )
    assert log.state.agents["a1"].lost
    log.agent("a1")
    a = log.state.agents["a1"]
    assert not a.lost
    assert a.allocated == NEED
    assert a.gpus[0].shares == {"s1": NEED.fgpu}
    log.terminated()
    assert log.state.agents["a1"].allocated == Slots()
    assert log.state.agents["a1"].gpus[0].shares == {}


# ---- tenancy: a request must stand on its own key's subject ---------------------------------


def test_a_request_on_another_keys_subject_is_malformed() -> None:
    log = Log()
    e = SessionRequested(
        id="spoof", at=T0, actor="mallory", session_id="s1", owner="alice", image=IMAGE, slots=NEED
    )
    r = log.add(subj.request("mallory", "s1"), e)
    assert "s1" not in log.state.sessions
    subject, why = log.state.malformed[r.seq]
    assert subject == "fgpu.req.mallory.s1"
    assert "alice" in why
    assert not log.state.undecided


def test_a_request_naming_another_session_than_its_subject_is_malformed() -> None:
    log = Log()
    e = SessionRequested(
        id="r", at=T0, actor="alice", session_id="s2", owner="alice", image=IMAGE, slots=NEED
    )
    r = log.add(subj.request("alice", "s1"), e)
    assert not log.state.sessions
    assert r.seq in log.state.malformed


def test_a_destroy_on_another_keys_subject_is_malformed() -> None:
    log = Log()
    log.running()
    e = SessionDestroyRequested(id="d", at=T0, actor="mallory", session_id="s1", requester="alice")
    r = log.add(subj.request("mallory", "s1"), e)
    assert r.seq in log.state.malformed
    assert not log.state.destroys


def test_an_owner_with_a_dot_cannot_pass_for_another_key() -> None:
    log = Log()
    e = SessionRequested(
        id="r", at=T0, actor="alice", session_id="s1", owner="alice.x", image=IMAGE, slots=NEED
    )
    log.add("fgpu.req.alice.x.s1", e)
    v = log.state.sessions.get("s1")
    assert v is None or v.invalid is not None


@pytest.mark.parametrize(
    "event",
    [
        PolicySet(id="p", at=T0, actor="alice", owner="alice", max_concurrent_sessions=None),
        SessionAdmitted(id="a", at=T0, actor="alice", session_id="s1", owner="alice"),
    ],
    ids=["policy", "admission"],
)
def test_only_requests_may_stand_on_a_users_subject(event: AnyEvent) -> None:
    log = Log()
    log.add(
        subj.quota("alice"),
        PolicySet(id="p0", at=T0, actor="admin", owner="alice", max_concurrent_sessions=0),
    )
    log.request("s1")
    before = copy_after(log)
    r = log.add(subj.request("alice", "s9"), event)
    assert r.seq in log.state.malformed
    log.state.malformed.pop(r.seq)
    assert unchanged_but_seq(before, log.state)


# ---- refused payloads -----------------------------------------------------------------------


def test_malformed_records_wait_for_their_payload_rejected() -> None:
    log = Log()
    bad = log.add("fgpu.req.alice.s1", Malformed(error="not JSON", payload=b"{"))
    spoof = log.add(
        subj.request("mallory", "s2"),
        SessionRequested(
            id="x", at=T0, actor="m", session_id="s2", owner="alice", image=IMAGE, slots=NEED
        ),
    )
    assert log.state.malformed == {
        bad.seq: ("fgpu.req.alice.s1", "not JSON"),
        spoof.seq: (
            spoof.subject,
            "session.requested.v1 may not stand on subject fgpu.req.mallory.s2"
            " (its subject is fgpu.req.alice.s2)",
        ),
    }
    for r in (bad, spoof):
        answer = PayloadRejected(
            id=f"payload-rejected-{r.seq}",
            at=T0,
            actor="quota",
            stream_seq=r.seq,
            subject=r.subject,
            error="refused",
        )
        log.add(subj.SYS, answer)
    assert log.state.malformed == {}
    assert not log.state.sessions
    # A second answer to the same payload is harmless.
    log.add(
        subj.SYS,
        PayloadRejected(
            id="again",
            at=T0,
            actor="quota",
            stream_seq=bad.seq,
            subject=bad.subject,
            error="refused",
        ),
    )
    assert log.state.malformed == {}


# ---- quota ----------------------------------------------------------------------------------


def usage(log: Log, owner: str = "alice") -> OwnerUsage:
    return log.state.usage.get(owner, OwnerUsage())


def test_quota_is_held_from_admission_until_the_end_and_released_once() -> None:
    log = Log()
    log.agent()
    log.request()
    assert usage(log) == OwnerUsage()
    log.admit()
    held = OwnerUsage(sessions=1, slots=NEED)
    assert usage(log) == held
    log.schedule()
    assert usage(log) == held
    log.report(SessionRunning, container_id="c")
    assert usage(log) == held
    log.terminated()
    assert usage(log) == OwnerUsage()
    # Late and duplicate ends release nothing more.
    log.terminated()
    log.report(SessionErrored, reason="late")
    log.cancel()
    assert usage(log) == OwnerUsage()
    assert not log.state.sessions["s1"].quota_held


@pytest.mark.parametrize("end", ["cancelled", "rejected", "errored", "terminated"])
def test_every_end_releases_quota_exactly_once(end: str) -> None:
    log = Log()
    log.agent()
    log.request("keep")
    log.admit("keep")
    log.request()
    log.admit()
    if end in ("errored", "terminated"):
        log.schedule()
    for _ in range(2):
        if end == "cancelled":
            log.cancel()
        elif end == "rejected":
            log.add(
                subj.LEDGER,
                SessionRejected(
                    id=log.id("rej"),
                    at=T0,
                    actor="scheduler",
                    session_id="s1",
                    owner="alice",
                    code="unsatisfiable",
                    reason="too big",
                ),
            )
        elif end == "errored":
            log.report(SessionErrored, reason="no image")
        else:
            log.terminated()
    assert usage(log) == OwnerUsage(sessions=1, slots=NEED)  # what "keep" holds


def test_a_rejection_before_admission_holds_and_releases_nothing() -> None:
    log = Log()
    log.request()
    log.add(
        subj.quota("alice"),
        SessionRejected(
            id="rej", at=T0, actor="quota", session_id="s1", owner="alice", code="quota", reason="r"
        ),
    )
    assert log.state.sessions["s1"].status is S.REJECTED
    assert usage(log) == OwnerUsage()
    assert not log.state.undecided


def test_policies_are_replaced_by_the_latest() -> None:
    log = Log()
    for n in (1, 3):
        log.add(
            subj.quota("alice"),
            PolicySet(id=f"p{n}", at=T0, actor="admin", owner="alice", max_concurrent_sessions=n),
        )
    assert log.state.policies["alice"].max_concurrent_sessions == 3


# ---- destroy requests -----------------------------------------------------------------------


def destroy(log: Log, sid: str = "s1", requester: str = "alice") -> str:
    e = SessionDestroyRequested(
        id=log.id("destroy"), at=T0, actor=requester, session_id=sid, requester=requester
    )
    log.add(subj.request(requester, sid), e)
    return e.id


def test_a_destroy_is_tracked_until_its_answer() -> None:
    log = Log()
    log.running()
    d = destroy(log)
    assert list(log.state.destroys) == [d]
    assert d not in log.state.destroy_answers
    # An event caused by something else answers nothing.
    log.report(SessionPreparing)
    assert list(log.state.destroys) == [d]
    log.add(
        subj.LEDGER,
        SessionTerminating(
            id="t",
            at=T0,
            actor="scheduler",
            causation_id=d,
            session_id="s1",
            agent_id="a1",
            reason="destroyed",
        ),
    )
    assert log.state.destroys == {}
    assert log.state.destroy_answers == {d: None}


def test_a_cancel_answers_the_destroy_of_a_pending_session() -> None:
    log = Log()
    log.request()
    log.admit()
    d = destroy(log)
    log.cancel(cause=d)
    assert log.state.destroys == {}
    assert log.state.destroy_answers == {d: None}
    assert log.state.sessions["s1"].status is S.CANCELLED


def test_a_refusal_answers_with_its_reason() -> None:
    log = Log()
    log.running()
    d = destroy(log, requester="bob")
    log.add(
        subj.LEDGER,
        DestroyRejected(
            id="no",
            at=T0,
            actor="scheduler",
            causation_id=d,
            session_id="s1",
            requester="bob",
            reason="the session belongs to another access key",
        ),
    )
    assert log.state.destroy_answers == {d: "the session belongs to another access key"}
    assert log.state.sessions["s1"].status is S.RUNNING


def test_an_answer_applied_before_the_log_has_it_is_not_applied_twice() -> None:
    log = Log()
    log.request()
    log.admit()
    d = destroy(log)
    answer = SessionCancelled(
        id="c",
        at=T0,
        actor="scheduler",
        causation_id=d,
        session_id="s1",
        owner="alice",
        reason="destroyed",
    )
    apply_decision(log.state, answer)
    decided = snapshot(log.state)
    log.add(subj.LEDGER, answer)  # the log gives the decision back
    assert snapshot(log.state) == decided
    assert log.state.destroy_answers == {d: None}
    assert snapshot(fold(log.records)) == decided


def test_a_destroy_stored_twice_is_answered_once() -> None:
    log = Log()
    log.running()
    d = destroy(log)
    request = log.records[-1]
    log.add(
        subj.LEDGER,
        SessionTerminating(
            id="t",
            at=T0,
            actor="scheduler",
            causation_id=d,
            session_id="s1",
            agent_id="a1",
            reason="destroyed",
        ),
    )
    log.add(request.subject, request.event)
    assert log.state.destroys == {}
    assert log.state.destroy_answers == {d: None}


# ---- redelivery -----------------------------------------------------------------------------


def test_records_at_or_below_the_last_seq_are_skipped() -> None:
    log = Log()
    log.running()
    log.terminated()
    before = snapshot(log.state)
    last = log.state.last_seq
    for r in log.records:
        evolve(log.state, r)
    # Even a record that would change things, if it came at an old sequence.
    log_request = SessionRequested(
        id="new", at=T0, actor="alice", session_id="s9", owner="alice", image=IMAGE, slots=NEED
    )
    evolve(log.state, Record(seq=last, subject=subj.request("alice", "s9"), event=log_request))
    assert snapshot(log.state) == before
    assert log.state.last_seq == last


def test_subject_seq_follows_each_subject() -> None:
    log = Log()
    log.running()
    seqs = {r.subject: r.seq for r in log.records}
    assert log.state.subject_seq == seqs
    assert log.state.subject_seq[subj.LEDGER] == 4


def test_folding_twice_gives_the_same_state() -> None:
    log = Log()
    log.agent("a2", n_gpus=4, per=200)
    log.running("s1")
    log.request("s2")
    log.admit("s2")
    destroy(log, "s2")
    log.terminated("s1")
    assert snapshot(fold(log.records)) == snapshot(fold(log.records)) == snapshot(log.state)


def _fields(e: AnyEvent) -> dict[str, Any]:
    return {f: getattr(e, f) for f in e.__struct_fields__}


def test_every_event_type_has_its_subject_rule() -> None:
    """The fold looks an event's subject up by its exact type: a type without a rule
    would stop every reader of the log at its first event of that type."""
    from events.union import EVENT_TYPES
    from services.domain.subject_rules import SUBJECT_OF

    assert set(SUBJECT_OF) == set(EVENT_TYPES)
