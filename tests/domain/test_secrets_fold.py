"""The fold of secrets: versions counted per owner and name, anew after a removal; a
request on another key's subject changes nothing; a snapshot keeps them."""

from events import AnyEvent, Record, SecretRemoved, SecretSet, SecretsKeySet
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve
from services.domain.fold.state_codec import decode_state, encode_state
from services.domain.secrets import missing_secret, references_problem
from tests.support.fold_log import T0


def _set(owner: str, name: str, sealed: bytes, n: int) -> SecretSet:
    return SecretSet(id=f"set-{n}", at=T0, actor=owner, owner=owner, name=name, sealed=sealed)


def _fold(items: list[tuple[str, AnyEvent]]) -> ClusterState:
    s = ClusterState()
    for seq, (subject, e) in enumerate(items, 1):
        evolve(s, Record(seq=seq, subject=subject, event=e))
    return s


def _own(e: SecretSet | SecretRemoved) -> tuple[str, AnyEvent]:
    return subj.request(e.owner, e.id), e


def test_versions_count_per_name_and_start_again_after_a_removal() -> None:
    gone = SecretRemoved(id="rm", at=T0, actor="alice", owner="alice", name="hf")
    s = _fold(
        [
            _own(_set("alice", "hf", b"a", 1)),
            _own(_set("alice", "hf", b"b", 2)),
            _own(_set("alice", "db", b"c", 3)),
        ]
    )
    assert (s.secrets.of("alice")["hf"].version, s.secrets.of("alice")["hf"].sealed) == (2, b"b")
    s = _fold([_own(_set("alice", "hf", b"a", 1)), _own(gone), _own(_set("alice", "hf", b"d", 4))])
    assert s.secrets.of("alice")["hf"].version == 1


def test_a_request_on_another_keys_subject_changes_nothing() -> None:
    forged = _set("alice", "hf", b"x", 1)
    removal = SecretRemoved(id="rm", at=T0, actor="bob", owner="alice", name="hf")
    s = _fold(
        [
            _own(_set("alice", "hf", b"a", 2)),
            (subj.request("bob", forged.id), forged),
            (subj.request("bob", removal.id), removal),
        ]
    )
    assert s.secrets.of("alice")["hf"].sealed == b"a" and len(s.malformed) == 2


def test_a_snapshot_keeps_the_secrets_and_the_key() -> None:
    key = SecretsKeySet(id="k", at=T0, actor="system", public_key=bytes(32))
    s = _fold([(subj.TENANCY, key), _own(_set("alice", "hf", b"a", 1))])
    back = decode_state(encode_state(s))
    assert back.secrets == s.secrets and back.secrets.public_key == bytes(32)


def test_references_name_the_missing_secret_and_a_clash_with_the_clear_environment() -> None:
    s = _fold([_own(_set("alice", "hf", b"a", 1))])
    assert missing_secret(s.secrets, "alice", [("T", "hf")]) is None
    assert missing_secret(s.secrets, "bob", [("T", "hf")]) == (
        "no secret hf of bob's (fgpu secret set hf)"
    )
    assert (
        references_problem([("T", "hf")], [("T", "x")])
        == "T is given both in clear and as a secret"
    )
    assert references_problem([("T", "bad name")], []) is not None
