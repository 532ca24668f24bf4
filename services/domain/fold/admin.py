"""The fold of administrators" and the log"s own events: tenancy commands answered,
policies, payloads rejected, folders scanned, archives and the log"s health.

``HANDLERS`` maps each event type to its handler (``services.domain.fold.state``
dispatches on the exact type).
"""

from collections.abc import Callable
from typing import Any

from events import (
    AdminApplied,
    AdminRefused,
    AdminRequested,
    Event,
    LogArchived,
    LogHealth,
    PayloadRejected,
    PolicySet,
    VfolderScanned,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.tenancy.admin import apply
from services.domain.tenancy.vfolders import note_scan

__all__ = ["HANDLERS"]


def _policy_set(s: ClusterState, seq: int, e: PolicySet) -> None:
    s.policies[e.owner] = e


def _payload_rejected(s: ClusterState, seq: int, e: PayloadRejected) -> None:
    s.malformed.pop(e.stream_seq, None)


def _admin_requested(s: ClusterState, seq: int, e: AdminRequested) -> None:
    s.admin_requests[e.id] = e


def _admin_applied(s: ClusterState, seq: int, e: AdminApplied) -> None:
    _admin_answer(s, seq, e.causation_id, None)
    apply(s.tenancy, e.command)
    s.tenancy_changed = True


def _admin_refused(s: ClusterState, seq: int, e: AdminRefused) -> None:
    _admin_answer(s, seq, e.causation_id, (e.code, e.reason))


def _admin_answer(
    s: ClusterState, seq: int, cause: str | None, refused: tuple[str, str] | None
) -> None:
    """The first answer naming a request as its cause answers it (what the system applied
    at the start answers none)."""
    request = s.admin_requests.pop(cause, None) if cause is not None else None
    if request is not None:
        s.admin_answered[request.id] = (seq, request, refused)


def _archived(s: ClusterState, seq: int, e: LogArchived) -> None:
    """Records up to ``e.last_seq`` leave the stream (but those on subjects kept for good):
    a subject whose last record was one of them has none left, and an append expecting
    its last sequence must expect none (0), as the server then does."""
    seqs = s.subject_seq
    for subject in [k for k, v in seqs.items() if v <= e.last_seq]:
        if subject not in subj.KEPT_SUBJECTS:
            del seqs[subject]


def _vfolder_scanned(s: ClusterState, seq: int, e: VfolderScanned) -> None:
    note_scan(s.tenancy, e)


def _log_health(s: ClusterState, seq: int, e: LogHealth) -> None:
    s.log_space[e.server] = e  # the latest of each server"s stands


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
    PolicySet: _policy_set,
    PayloadRejected: _payload_rejected,
    AdminRequested: _admin_requested,
    AdminApplied: _admin_applied,
    AdminRefused: _admin_refused,
    LogArchived: _archived,
    VfolderScanned: _vfolder_scanned,
    LogHealth: _log_health,
}
