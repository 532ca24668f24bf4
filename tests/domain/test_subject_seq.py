"""An actor's knowledge of a subject's last sequence never goes backwards.

An actor that appended to a subject knows its new last sequence before its consumer hands
it the older records of that subject; folding those must not make it expect an older
sequence on its next append (which the server refuses as a conflict).
"""

from datetime import UTC, datetime

from events import Record, SessionAdmitted
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve


def test_folding_an_older_record_keeps_the_later_sequence_the_actor_knows() -> None:
    s = ClusterState()
    s.subject_seq["fgpu.quota.alice"] = 10  # set by the actor from its own append's ack
    e = SessionAdmitted(
        id="e1", at=datetime.now(UTC), actor="quota", session_id="s1", owner="alice"
    )
    evolve(s, Record(seq=5, subject="fgpu.quota.alice", event=e))
    assert s.subject_seq["fgpu.quota.alice"] == 10
    evolve(s, Record(seq=12, subject="fgpu.quota.alice", event=e))
    assert s.subject_seq["fgpu.quota.alice"] == 12
