"""Who may reach into a running session through its agent
(``services.domain.access.session_access``): the rules tests/e2e/test_exec.py does not reach
through the bus."""

from datetime import UTC, datetime

import pytest

from events import (
    AdminCommand,
    CreateKeypair,
    CreateUser,
    RemoveUser,
    RevokeKeypair,
    Role,
    Slots,
)
from services.domain.access.session_access import (
    exec_problem,
    key_refusal,
    may_not_exec,
    may_not_read,
    may_not_read_kept,
)
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import forget_ended
from services.domain.records import SessionView
from services.domain.status import SessionStatus
from tests.support.access_state import tenancy


def _with_session(s: ClusterState, status: SessionStatus = SessionStatus.RUNNING) -> ClusterState:
    s.sessions["s1"] = SessionView(
        session_id="s1",
        owner="AKana",
        image="",
        command=(),
        slots=Slots(),
        priority=0,
        name=None,
        request_id="r1",
        correlation_id="r1",
        arrival_seq=1,
        requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        status=status,
        agent_id="a1",
        domain="lab",
    )
    return s


def _with_tenancy(*more: AdminCommand) -> ClusterState:
    """Ana, the session's owner, and root (a superadmin), each with a keypair; then
    ``more``."""
    return _with_session(
        tenancy(
            CreateUser(user="root", domain="lab", role=Role.SUPERADMIN),
            CreateKeypair(access_key="AKroot", user="root", secret_hash="scrypt$1$1$1$AA$AA"),
            *more,
        )
    )


def test_without_tenancy_only_the_owner_may_run_a_command_anyone_may_read() -> None:
    s = _with_session(ClusterState())
    assert may_not_exec(s, "AKana", "s1", "a1") is None
    assert may_not_exec(s, "AKbob", "s1", "a1") == "AKbob may not run commands in session s1"
    assert may_not_read(s, "AKbob", "s1") is None


def test_a_superadmin_may_run_a_command_in_any_session() -> None:
    s = _with_tenancy()
    assert s.tenancy.on
    assert may_not_exec(s, "AKroot", "s1", "a1") is None
    assert may_not_exec(s, "AKbob", "s1", "a1") == "AKbob may not run commands in session s1"
    assert may_not_exec(s, "AKroot", "s-none", "a1") == (
        "AKroot may not run commands in session s-none"
    )


@pytest.mark.parametrize(
    ("ended", "why"),
    [
        (RevokeKeypair(access_key="AKana"), "access key AKana was revoked"),
        (RemoveUser(user="ana"), "the user of access key AKana was removed"),
    ],
)
def test_a_revoked_key_reaches_no_session_not_even_its_own(ended: AdminCommand, why: str) -> None:
    live = _with_tenancy()
    assert key_refusal(live, "AKana") is None
    assert may_not_exec(live, "AKana", "s1", "a1") is None
    assert may_not_read(live, "AKana", "s1") is None
    assert may_not_read_kept(live, "AKana", "AKana", "lab") is None
    s = _with_tenancy(ended)
    assert key_refusal(s, "AKana") == why
    assert may_not_exec(s, "AKana", "s1", "a1") == why
    assert may_not_read(s, "AKana", "s1") == why
    assert may_not_read_kept(s, "AKana", "AKana", "lab") == why
    # Another's key is untouched; a key the ledger does not hold is judged as before.
    assert may_not_exec(s, "AKroot", "s1", "a1") is None
    assert key_refusal(s, "AKnobody") is None


def test_a_session_not_running_on_the_agent_is_refused_with_its_status() -> None:
    s = _with_session(ClusterState(), SessionStatus.PREPARING)
    assert may_not_exec(s, "AKana", "s1", "a1") == (
        "session s1 is not running on a1 (it is PREPARING)"
    )
    s = _with_session(ClusterState())
    assert may_not_exec(s, "AKana", "s1", "a2") == "session s1 is not running on a2 (it is RUNNING)"
    s.sessions["s1"].status = SessionStatus.TERMINATED
    forget_ended(s, ["s1"])  # let go of: only its id is known
    assert "s1" not in s.sessions
    assert may_not_exec(s, "AKana", "s1", "a1") == "session s1 has ended"


def test_a_command_must_be_something_short_within_an_hour() -> None:
    assert exec_problem(("true",), 60) is None
    assert exec_problem((), 60) == "the command is empty"
    assert exec_problem(("",), 60) == "the command is empty"
    assert exec_problem(("echo", "é" * 9000), 60) == (
        "the command is 18004 bytes long; at most 16384 are run"
    )
    assert exec_problem(("true",), 0) is not None
    assert exec_problem(("true",), 3601) is not None
