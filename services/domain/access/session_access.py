"""Who may reach into a running session through its agent: read its output, run a command
in it. Pure: the agent asks these of its own fold of the log.

A session's output is its owner's and its domain's administrators' to read (a superadmin
administers every domain); on a cluster without tenancy, anyone's. Running a command in it
is the same people's, but with no tenancy only the owner's: every key is then a tenant of
its own, and nobody administers another's. A revoked keypair (or one whose user was
removed) reaches no session at all, its owner's included: the agent checks its own fold,
whether or not the servers have cut the key's connections yet.
"""

from collections.abc import Sequence

from events import Role
from services.domain.fold.cluster import ClusterState
from services.domain.status import SessionStatus

__all__ = [
    "MAX_ARGV_BYTES",
    "MAX_EXEC_TIMEOUT_S",
    "exec_problem",
    "key_refusal",
    "may_not_exec",
    "may_not_read",
    "may_not_read_kept",
]

MAX_ARGV_BYTES = 16 << 10  # a command and its arguments, UTF-8: they are written on the log
MAX_EXEC_TIMEOUT_S = 3600.0


def key_refusal(s: ClusterState, requester: str) -> str | None:
    """Why the access key ``requester`` may reach no session at all: it was revoked, or
    its user removed; None for a live key, or one the ledger does not hold (whose rights,
    if any, are its sessions' and its tenancy's)."""
    kp = s.tenancy.keypairs.get(requester)
    if kp is None or not kp.revoked:
        return None
    if kp.user is not None and kp.user not in s.tenancy.users:
        return f"the user of access key {requester} was removed"
    return f"access key {requester} was revoked"


def may_not_read(s: ClusterState, requester: str, session_id: str) -> str | None:
    """Why ``requester`` may not read session ``session_id``'s output; None if it may."""
    if (revoked := key_refusal(s, requester)) is not None:
        return revoked
    if not s.tenancy.on:
        return None
    if _administers(s, requester, session_id):
        return None
    return f"{requester} may not see session {session_id}"


def may_not_read_kept(s: ClusterState, requester: str, owner: str, domain: str) -> str | None:
    """Why ``requester`` may not read the kept output of an ended session of ``owner`` in
    ``domain`` (the fold has let go of it: the agent kept whose it was); None if it may."""
    if (revoked := key_refusal(s, requester)) is not None:
        return revoked
    if not s.tenancy.on or requester == owner:
        return None
    who = s.tenancy.user_of(requester)
    if who is not None and (
        who.role is Role.SUPERADMIN or (who.role is Role.DOMAIN_ADMIN and who.domain == domain)
    ):
        return None
    return f"{requester} may not see that session"


def may_not_exec(s: ClusterState, requester: str, session_id: str, agent_id: str) -> str | None:
    """Why ``requester`` may not run a command in ``session_id`` on agent ``agent_id``; None
    if it may: the session runs there, and the requester owns it or administers its
    domain, with a live key. The reason names no more than the requester may know."""
    if (revoked := key_refusal(s, requester)) is not None:
        return revoked
    v = s.sessions.get(session_id)
    if v is None and session_id in s.ended:  # let go of by the fold: nothing runs to reach
        return f"session {session_id} has ended"
    allowed = v is not None and (
        v.owner == requester or (s.tenancy.on and _administers(s, requester, session_id))
    )
    if v is None or not allowed:
        return f"{requester} may not run commands in session {session_id}"
    if v.status is not SessionStatus.RUNNING or v.agent_id != agent_id:
        return f"session {session_id} is not running on {agent_id} (it is {v.status.value})"
    return None


def exec_problem(argv: Sequence[str], timeout_s: float) -> str | None:
    """Why a command could never be run as asked, or None."""
    if not argv or not argv[0]:
        return "the command is empty"
    size = sum(len(a.encode()) for a in argv)
    if size > MAX_ARGV_BYTES:
        return f"the command is {size} bytes long; at most {MAX_ARGV_BYTES} are run"
    if not 0 < timeout_s <= MAX_EXEC_TIMEOUT_S:
        return f"the time limit must be above 0 and at most {MAX_EXEC_TIMEOUT_S:g} s"
    return None


def _administers(s: ClusterState, requester: str, session_id: str) -> bool:
    """Whether ``requester`` owns the session, or administers its domain (a superadmin
    administers every one)."""
    v = s.sessions.get(session_id)
    if v is not None and v.owner == requester:
        return True
    who = s.tenancy.user_of(requester)
    return who is not None and (
        who.role is Role.SUPERADMIN
        or (who.role is Role.DOMAIN_ADMIN and v is not None and v.domain == who.domain)
    )
