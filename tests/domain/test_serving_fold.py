"""The serving fold and the route table made from it (pure)."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from events import (
    AnyEvent,
    EndpointCreated,
    EndpointRemoved,
    ReplicaChanged,
    ReplicaHealthReported,
    ReplicaPhase,
    ReplicaRotation,
    ReplicasSet,
    RevisionAdded,
    RevisionSpec,
    RevisionTarget,
    Slots,
    TokenCreated,
    TokenRevoked,
)
from services.domain.access.event_domains import domains_of
from services.domain.fold.cluster import ClusterState
from services.domain.serving.routes import route_table
from services.domain.serving.state import ServingState, evolve

AT = datetime(2024, 5, 17, 12, tzinfo=UTC)
SPEC = RevisionSpec(image="fgpu/busybox:latest", port=9000, slots=Slots(cpu=1, mem=1, fgpu=25))
P = ReplicaPhase
ENV = {"at": AT, "actor": "serving"}


def created(n: int = 0) -> list[AnyEvent]:
    return [
        EndpointCreated(
            id=f"c{n}",
            endpoint_id="ep",
            name="m",
            owner="AKuma",
            domain="d",
            project="p",
            group="default",
            public=False,
            **ENV,
        ),
        RevisionAdded(
            id=f"r{n}", endpoint_id="ep", revision=1, spec=SPEC, requester="AKuma", **ENV
        ),
        ReplicasSet(
            id=f"t{n}",
            endpoint_id="ep",
            requester="AKuma",
            targets=(RevisionTarget(revision=1, replicas=2),),
            **ENV,
        ),
    ]


def replica(sid: str, phase: P, n: int = 0, **kw: object) -> ReplicaChanged:
    return ReplicaChanged(
        id=f"{sid}-{phase}-{n}",
        endpoint_id="ep",
        session_id=sid,
        revision=1,
        ordinal=0,
        phase=phase,
        **kw,
        **ENV,  # type: ignore[arg-type]
    )


def token(name: str, expires_at: datetime) -> TokenCreated:
    return TokenCreated(
        id=f"k-{name}",
        endpoint_id="ep",
        token_id=name,
        sha256=name * 64,
        expires_at=expires_at,
        requester="x",
        **ENV,
    )


def folded(events: list[AnyEvent]) -> ServingState:
    s = ServingState()
    for e in events:
        evolve(s, e)
    return s


def test_only_healthy_replicas_in_rotation_take_traffic_and_only_live_tokens_open() -> None:
    later = AT + timedelta(hours=1)
    s = folded(
        [
            *created(),
            replica("s1", P.PROVISIONING),
            replica("s1", P.WARMING, host="10.0.0.1", port=9000),
            replica("s2", P.PROVISIONING),
            replica("s2", P.WARMING, host="10.0.0.2", port=9000),
            replica("s1", P.HEALTHY),
            ReplicaRotation(id="in1", endpoint_id="ep", session_id="s1", in_rotation=True, **ENV),
            # a rotation into a replica not healthy changes nothing
            ReplicaRotation(id="in2", endpoint_id="ep", session_id="s2", in_rotation=True, **ENV),
            token("a", later),
            token("b", later),
            token("c", AT),  # expired by the time the table is made
            TokenRevoked(id="k4", endpoint_id="ep", token_id="b", requester="x", **ENV),
        ]
    )
    [route] = route_table(s, AT + timedelta(minutes=1)).routes
    assert route.path_prefix == "/e/m/" and not route.public
    assert {(b.session_id, b.host, b.weight) for b in route.backends} == {
        ("s1", "10.0.0.1", 100),
        ("s2", "10.0.0.2", 0),
    }
    assert route.token_sha256 == frozenset({"a" * 64})


def test_a_phase_never_goes_back_and_a_gone_replica_frees_its_slot() -> None:
    s = folded(
        [
            *created(),
            replica("s1", P.PROVISIONING),
            replica("s1", P.DRAINING),
            replica("s1", P.WARMING, host="h", port=1),  # late: changes nothing
        ]
    )
    assert s.endpoints["ep"].replicas["s1"].phase is P.DRAINING
    evolve(s, replica("s1", P.GONE, reason="stopped"))
    ep = s.endpoints["ep"]
    assert ep.replicas == {} and s.replica_of == {} and ep.next_generation == {"1/0": 1}


def test_a_replica_that_never_ran_stalls_its_slot_until_the_targets_are_set_again() -> None:
    s = folded([*created(), replica("s1", P.PROVISIONING), replica("s1", P.GONE, reason="quota")])
    assert s.endpoints["ep"].stalled == {"1/0": "quota"}
    evolve(s, created(1)[2])
    assert s.endpoints["ep"].stalled == {}


def test_a_removed_endpoint_frees_its_name_and_leaves_the_table() -> None:
    s = folded([*created(), EndpointRemoved(id="x", endpoint_id="ep", requester="a", **ENV)])
    assert s.names == {} and route_table(s, AT).routes == ()
    assert "ep" not in s.endpoints  # no replica left: let go of


@given(st.permutations(range(7)), st.booleans())
def test_the_fold_is_deterministic_and_redelivery_changes_nothing(
    order: list[int], twice: bool
) -> None:
    tail: list[AnyEvent] = [
        replica("s1", P.PROVISIONING),
        replica("s1", P.WARMING, host="h", port=1),
        replica("s1", P.HEALTHY),
        ReplicaRotation(id="in", endpoint_id="ep", session_id="s1", in_rotation=True, **ENV),
        ReplicaHealthReported(
            id="h", router="r", endpoint_id="ep", session_id="s1", healthy=True, **ENV
        ),
        replica("s1", P.DRAINING),
        replica("s1", P.GONE),
    ]
    events = [*created(), *(tail[i] for i in order)]
    once = folded(events)
    again = folded([e for e in events for _ in range(2 if twice else 1)])
    assert route_table(once, AT) == route_table(again, AT)
    assert once.endpoints.keys() == again.endpoints.keys()


def test_a_record_about_an_endpoint_belongs_to_its_domain() -> None:
    """What the domain feed gives that domain's readers (and no other's)."""
    s = ClusterState()
    for e in created():
        evolve(s.serving, e)
    rotation = ReplicaRotation(id="x", endpoint_id="ep", session_id="s9", in_rotation=False, **ENV)
    assert domains_of(s, rotation) == {"d"}
    other = ReplicaRotation(id="y", endpoint_id="nope", session_id="s9", in_rotation=False, **ENV)
    assert domains_of(s, other) == frozenset()
