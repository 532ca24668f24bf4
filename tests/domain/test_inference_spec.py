"""An inference replica's container: on its owner's serving network, with its own
environment under fgpu's (pure)."""

from datetime import UTC, datetime

import pytest

from events import SessionRequested, SessionType, Slots
from services.domain.container_spec import session_spec
from services.domain.fold.validation import invalid_request
from services.domain.records import SessionView


def _view(kind: SessionType) -> SessionView:
    return SessionView(
        session_id="s1",
        owner="AKuma",
        image="fgpu/busybox:latest",
        command=("httpd",),
        slots=Slots(cpu=100, mem=1 << 20, fgpu=0),
        priority=0,
        name=None,
        request_id="r",
        correlation_id="c",
        arrival_seq=1,
        requested_at=datetime(2024, 5, 17, tzinfo=UTC),
        session_type=kind,
        env=(("MODEL", "tiny"), ("FGPU_OWNER", "forged")),
    )


@pytest.mark.parametrize(
    ("kind", "network"),
    [
        (SessionType.INFERENCE, "fgpu-serve-AKuma"),
        (SessionType.BATCH, None),
        (SessionType.INTERACTIVE, None),
    ],
)
def test_only_a_replica_joins_a_network_its_owners(kind: SessionType, network: str | None) -> None:
    spec = session_spec(_view(kind), "a1", (), request_devices=False)
    assert spec.network == network
    assert spec.env["MODEL"] == "tiny"
    assert spec.env["FGPU_OWNER"] == "AKuma"  # fgpu's own variables are never the session's


@pytest.mark.parametrize(
    ("env", "ok"),
    [
        ((("MODEL", "tiny"), ("_X1", "")), True),
        ((("A=B", "c"),), False),  # would split as A, B=c in the container
        ((("1X", "c"),), False),
        ((("X", "a"), ("X", "b")), False),
        (tuple((f"V{n}", "") for n in range(65)), False),
        ((("X", "v" * 4097),), False),
    ],
)
def test_a_sessions_environment_is_named_plainly_and_bounded(
    env: tuple[tuple[str, str], ...], ok: bool
) -> None:
    asked = SessionRequested(
        id="e",
        at=datetime(2024, 5, 17, tzinfo=UTC),
        actor="AKuma",
        session_id="s1",
        owner="AKuma",
        image="fgpu/busybox:latest",
        slots=Slots(cpu=100, mem=1 << 20, fgpu=10),
        env=env,
    )
    assert (invalid_request(asked) is None) is ok
