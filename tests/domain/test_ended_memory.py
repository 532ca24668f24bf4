"""What the fold keeps of history is 16 bytes an id: the sessions that ended and the
destroy requests answered (``IdSet``), so a process's memory and its snapshots follow
what is alive; and a request for an ended id, or a destroy stored again, still changes
nothing once they are let go of."""

import tracemalloc

import msgspec
import pytest

from events import (
    Record,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionRequested,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.id_set import DIGEST_BYTES, Answers, IdSet
from services.domain.fold.state import clear_changes, evolve, forget_ended
from services.domain.fold.state_codec import (
    FOLD_VERSION,
    SnapshotUndecodable,
    SnapshotUnusable,
    decode_actor_state,
    encode_actor_state,
    encode_state,
)
from tests.support.fold_log import IMAGE, NEED, T0

LOG = "log-1"


def test_an_id_set_holds_exactly_what_was_added_across_merges() -> None:
    # Short ids (kept as themselves, many sharing their first 8 bytes) and long ones
    # (hashed), past several merges.
    ids = [f"s{n:012x}" for n in range(2000)] + [f"d{n:032x}" for n in range(1000)]
    s = IdSet()
    for i in ids:
        s.add(i)
    s.add(ids[0])  # twice: once
    assert len(s) == 3000
    assert all(i in s for i in ids)
    assert not any(f"t{n:012x}" in s for n in range(3000))
    assert not any(f"d{n:032x}" in s for n in range(1000, 2000))
    assert "s" not in s and "s\0" not in s and "" not in s  # padding is not an id
    assert 5 not in s
    # The same ids in another order: the same bytes, 16 each.
    again = IdSet(reversed(ids))
    assert again == s and again.to_bytes() == s.to_bytes()
    assert len(s.to_bytes()) == DIGEST_BYTES * 3000
    assert IdSet.from_bytes(s.to_bytes()) == s
    with pytest.raises(ValueError, match="whole number"):
        IdSet.from_bytes(b"x" * 17)


def test_answers_say_each_refusal_and_compare_with_a_mapping() -> None:
    a = Answers()
    a.add("d1", None)
    a.add("d2", "no such session")
    assert "d1" in a and "d3" not in a
    assert a["d1"] is None and a["d2"] == "no such session"
    assert a == {"d1": None, "d2": "no such session"}
    assert a != {"d1": None}
    with pytest.raises(KeyError):
        a["d3"]


class _Churn:
    """Sessions asked for, admitted and destroyed while pending, one after the other, as
    an actor folds them: what each batch ended is let go of."""

    def __init__(self) -> None:
        self.state = ClusterState()
        self.seq = 0

    def add(self, subject: str, e: object) -> Record:
        self.seq += 1
        r = Record(seq=self.seq, subject=subject, event=e)  # type: ignore[arg-type]
        evolve(self.state, r)
        return r

    def life(self, n: int) -> None:
        sid, s = f"s{n:012x}", self.state
        self.add(subj.request("alice", sid), _asked(sid))
        self.add(
            subj.quota("alice"),
            SessionAdmitted(id=f"adm-{n}", at=T0, actor="quota", session_id=sid, owner="alice"),
        )
        self.add(subj.request("alice", sid), _destroy(sid))
        cancel = SessionCancelled(
            id=f"cancel-{n}",
            at=T0,
            actor="scheduler",
            causation_id=f"destroy-{sid}",
            session_id=sid,
            owner="alice",
            reason="destroyed",
        )
        self.add(subj.LEDGER, cancel)
        forget_ended(s, s.changed)
        clear_changes(s)


def _asked(sid: str) -> SessionRequested:
    return SessionRequested(
        id=f"req-{sid}",
        at=T0,
        actor="alice",
        session_id=sid,
        owner="alice",
        image=IMAGE,
        slots=NEED,
    )


def _destroy(sid: str) -> SessionDestroyRequested:
    return SessionDestroyRequested(
        id=f"destroy-{sid}", at=T0, actor="alice", session_id=sid, requester="alice"
    )


def test_the_fold_keeps_a_few_bytes_of_each_ended_session() -> None:
    churn = _Churn()
    for n in range(500):
        churn.life(n)
    s = churn.state
    subjects = len(s.subject_seq)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(500, 3500):
            churn.life(n)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not s.sessions and not s.destroys and not s.destroy_answers.refused
    assert len(s.subject_seq) == subjects  # only the shared subjects
    assert len(s.ended) == len(s.destroy_answers) == 3500
    # Two 16-byte digests a session, and the set of recent ones (before: a string and a
    # dict entry for each, ~250 bytes).
    assert grown / 3000 < 64


def test_a_request_for_a_let_go_id_or_a_destroy_stored_again_changes_nothing() -> None:
    churn = _Churn()
    for n in range(300):
        churn.life(n)
    s = churn.state
    sid = f"s{5:012x}"
    assert sid not in s.sessions and sid in s.ended
    # Stored again after the log's dedup window: the fold ignores both, as when it kept
    # every session whole.
    churn.add(subj.request("alice", sid), _asked(sid))
    churn.add(subj.request("alice", sid), _destroy(sid))
    assert sid not in s.sessions and not s.undecided and not s.destroys
    # Redelivered: at or below what was folded, a no-op.
    last = s.last_seq
    evolve(s, Record(seq=3, subject=subj.request("alice", sid), event=_asked(sid)))
    assert s.last_seq == last and sid not in s.sessions


def test_an_actor_snapshot_carries_the_ended_ids_as_digests() -> None:
    churn = _Churn()
    for n in range(2000):
        churn.life(n)
    s = churn.state
    data = encode_actor_state(s, LOG)
    # Beside the projections' snapshot, 32 bytes a session: its id's digest and its
    # destroy's (before: both as strings, to decode one by one).
    assert len(data) - len(encode_state(s)) < 2000 * 2 * DIGEST_BYTES + 500
    restored = decode_actor_state(data, LOG)
    assert restored.ended == s.ended and restored.destroy_answers == s.destroy_answers
    assert f"s{7:012x}" in restored.ended


def test_a_snapshot_of_the_previous_fold_version_is_unusable_not_corrupt() -> None:
    # Version 8 kept ended ids and destroy answers as strings: another shape of fields.
    old = msgspec.msgpack.encode([FOLD_VERSION - 1, LOG, 0, b"", {}, {"d": None}, ["s1"]])
    with pytest.raises(SnapshotUnusable, match="fold version") as caught:
        decode_actor_state(old, LOG)
    assert not isinstance(caught.value, SnapshotUndecodable)
