"""Which JetStream consumers each identity may touch, read from its permissions: every
consumer a service (or a static user of the server's) may make, change, delete, pull
from, acknowledge or look at is named there, and is its own: its reader names and its
kind's durables. The server enforces the lists (``test_adversarial`` tries them)."""

import pytest

from events import Role
from events import subjects as subj
from services.adapters.memory_log import _matches  # NATS's matching (``*``, ``>``)
from services.adapters.nats_auth import GATE_USER, SETUP_PERMISSIONS, SETUP_USER, ServerAuth
from services.domain.access.permissions import (
    Permissions,
    durables,
    reader_names,
    service_permissions,
    user_permissions,
)

KEY, OTHER = "SKMINE0000000000000000", "SKTHEIRS00000000000000"
KINDS = (
    "quota",
    "scheduler",
    "registrar",
    "serving",
    "router:r1",
    "archiver",
    "api",
    "intake",
    "auth",
    "agent-host",
    "agent:a1",
)
STREAMS = (subj.STREAM, subj.INTAKE_STREAM, *map(subj.snapshot_stream, subj.SNAPSHOT_KINDS))


def _touches(stream: str, name: str) -> dict[str, str]:
    """What making (by name, unnamed with the name in the body, legacy durable), deleting,
    pulling from, acknowledging, looking at and flow control of the consumer ``name`` of
    ``stream`` publish on."""
    api = "$JS.API.CONSUMER"
    return {
        "create": f"{api}.CREATE.{stream}.{name}.fgpu.>",
        "create by name": f"{api}.CREATE.{stream}.{name}",
        "create, named in the body": f"{api}.CREATE.{stream}",
        "durable create": f"{api}.DURABLE.CREATE.{stream}.{name}",
        "delete": f"{api}.DELETE.{stream}.{name}",
        "pull": f"{api}.MSG.NEXT.{stream}.{name}",
        "info": f"{api}.INFO.{stream}.{name}",
        "ack": f"$JS.ACK.{stream}.{name}.1.2.3.4.0",
        "flow control": f"$JS.FC.{stream}.{name}.x",
        "list": f"{api}.LIST.{stream}",
        "names": f"{api}.NAMES.{stream}",
        "pause": f"{api}.PAUSE.{stream}.{name}",
    }


def _allowed(p: Permissions, subject: str) -> bool:
    return any(_matches(a, subject) for a in p.publish) and not any(
        _matches(d, subject) for d in p.deny_publish
    )


def _others(kind: str) -> list[str]:
    """Consumer names that are not ``kind``'s (with key KEY): another key's readers, other
    kinds' durables, names of no one's."""
    names = [*reader_names(OTHER), "stranger", "agent-a2", "agent-host-sim-0"]
    names += [d for k in KINDS for d in durables(k) if d not in durables(kind)]
    # The intake's durable, of the intake stream: its own (and of the log's, no one's).
    return names if kind == "intake" else [*names, "intake"]


def _granted(kind: str) -> Permissions:
    p = service_permissions(KEY, kind)
    assert p is not None
    return p


@pytest.mark.parametrize("kind", KINDS)
def test_a_service_touches_no_consumer_but_its_own(kind: str) -> None:
    p = _granted(kind)
    touched = [
        (stream, name, what)
        for stream in STREAMS
        for name in _others(kind)
        for what, subject in _touches(stream, name).items()
        if _allowed(p, subject)
    ]
    assert touched == []


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "intake"])
def test_a_service_reads_and_follows_the_log_through_its_own(kind: str) -> None:
    """Its readers: made (by name, filter in the subject), pulled from, deleted; its
    durables: those, looked at and acknowledged too. Never made unnamed or as a legacy
    durable, nor by a name alone (the filter unpinned)."""
    p = _granted(kind)
    for name in reader_names(KEY):
        ops = _touches(subj.STREAM, name)
        assert [w for w, s in ops.items() if _allowed(p, s)] == ["create", "delete", "pull"]
    for name in durables(kind):
        ops = _touches(subj.STREAM, name)
        allowed = [w for w, s in ops.items() if _allowed(p, s)]
        assert allowed == ["create", "delete", "pull", "info", "ack"]


@pytest.mark.parametrize(
    ("kind", "buckets"),
    [
        ("scheduler", ["scheduler"]),
        ("quota", ["quota"]),
        ("registrar", ["scheduler"]),
        ("serving", ["scheduler"]),
        ("router:r1", ["scheduler"]),
        ("archiver", ["scheduler", "quota", "pipeline"]),
        ("pipeline", ["pipeline"]),
        ("agent:a1", ["scheduler"]),
        ("agent-host", ["scheduler"]),
        ("api", []),
    ],
)
def test_a_snapshot_is_read_through_the_readers_own_names(kind: str, buckets: list[str]) -> None:
    p = _granted(kind)
    for bucket in subj.SNAPSHOT_KINDS:
        stream = subj.snapshot_stream(bucket)
        for name in reader_names(KEY):
            ops = _touches(stream, name)
            allowed = [w for w, s in ops.items() if _allowed(p, s)]
            assert allowed == (["create", "delete", "pull"] if bucket in buckets else [])


@pytest.mark.parametrize(
    ("kind", "may", "may_not"),
    [
        (
            "serving",
            [subj.SERVING, subj.request("AKuma", "s1")],
            [subj.route("r1"), subj.TENANCY, subj.LEDGER, subj.ADMISSION],
        ),
        (
            "router:r1",
            [subj.route("r1")],
            [subj.route("r2"), subj.SERVING, subj.request("AKuma", "s1"), subj.LEDGER],
        ),
    ],
)
def test_serving_and_routers_publish_only_their_own(
    kind: str, may: list[str], may_not: list[str]
) -> None:
    """The serving actor its decisions and its replicas' requests; a router what its
    checks found, on its own subject alone."""
    p = _granted(kind)
    assert [s for s in may if not _allowed(p, s)] == []
    assert [s for s in may_not if _allowed(p, s)] == []


def test_the_kinds_durables() -> None:
    several = {k: durables(k) for k in ("scheduler", "quota", "agent-host")}
    assert several == {k: (k, f"{k}-2", f"{k}-3", f"{k}-4") for k in several}
    assert durables("registrar") == ("registrar",)
    assert durables("serving") == ("serving",)
    assert durables("router:r1") == ()
    assert durables("agent:a1") == ("agent-a1",)
    assert durables("agent:a.b") == durables("api") == durables("archiver") == ()


@pytest.mark.parametrize(
    ("user", "permissions"),
    [
        (GATE_USER, service_permissions(GATE_USER, "auth")),
        (SETUP_USER, SETUP_PERMISSIONS),
    ],
    ids=["gatekeeper", "setup"],
)
def test_the_servers_static_users_read_through_their_own(
    user: str, permissions: Permissions | None
) -> None:
    assert permissions is not None
    for name in reader_names(user):
        ops = _touches(subj.STREAM, name)
        assert [w for w, s in ops.items() if _allowed(permissions, s)] == [
            "create",
            "delete",
            "pull",
        ]
    strangers = [*reader_names(OTHER), *(d for k in KINDS for d in durables(k)), "stranger"]
    touched = [
        (stream, name, what)
        for stream in STREAMS
        for name in strangers
        for what, subject in _touches(stream, name).items()
        if _allowed(permissions, subject)
    ]
    assert touched == []
    assert f"{user}-r0" in ServerAuth.generate().config()


@pytest.mark.parametrize("role", list(Role))
def test_no_person_and_no_other_service_publishes_what_a_router_found(role: Role) -> None:
    """``fgpu.route.<id>`` is router ``<id>``'s alone: a person of any role (whose
    requests go through the intake), another router and every other service are refused."""
    others = [
        user_permissions(KEY, role),
        _granted("router:r2"),
        *(_granted(k) for k in KINDS if k != "router:r1"),
    ]
    assert [p for p in others if _allowed(p, subj.route("r1"))] == []
