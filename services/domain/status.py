"""Session statuses and which of them hold what."""

from enum import StrEnum

__all__ = ["ENDED", "HOLDS_ALLOCATION", "MOMENT", "SessionStatus"]


class SessionStatus(StrEnum):
    REQUESTED = "REQUESTED"  # on the log, quota not yet decided
    PENDING = "PENDING"  # admitted, waiting in the queue, holding no device
    SCHEDULED = "SCHEDULED"  # placed on an agent, which has not started it yet
    PREPARING = "PREPARING"
    PULLING = "PULLING"  # its agent pulls its image from a registry (between the two)
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"
    REJECTED = "REJECTED"


ENDED = frozenset(
    {
        SessionStatus.TERMINATED,
        SessionStatus.CANCELLED,
        SessionStatus.ERROR,
        SessionStatus.REJECTED,
    }
)

# A session holds an allocation on its agent exactly while in one of these.
HOLDS_ALLOCATION = frozenset(
    {
        SessionStatus.SCHEDULED,
        SessionStatus.PREPARING,
        SessionStatus.PULLING,
        SessionStatus.RUNNING,
        SessionStatus.TERMINATING,
    }
)

# The moment of a session's life that reaching each status marks (the ended statuses
# share one): the projections' ``<moment>_at`` columns, the read API's ``times`` fields.
MOMENT: dict[SessionStatus, str] = {
    SessionStatus.REQUESTED: "requested",
    SessionStatus.PENDING: "admitted",
    SessionStatus.SCHEDULED: "scheduled",
    SessionStatus.PREPARING: "preparing",
    SessionStatus.PULLING: "pulling",
    SessionStatus.RUNNING: "running",
    SessionStatus.TERMINATING: "terminating",
    **dict.fromkeys(ENDED, "ended"),
}
