"""HAProxy's configuration as pure functions: which changes need a reload, where each
replica sits, what is refused before HAProxy sees it."""

import msgspec
import pytest

from services.adapters.haproxy_config import (
    MIN_SLOTS,
    Layout,
    Paths,
    assign_slots,
    render,
    shape,
    token_map,
)
from services.domain.serving.route_table import Backend, Balance, Route

PATHS = Paths(admin_socket="/d/admin.sock", token_map="/d/tokens.map", lua="/d/wait.lua")


def _b(sid: str, weight: int = 100) -> Backend:
    return Backend(session_id=sid, host="127.0.0.1", port=1000 + len(sid), weight=weight)


def _route(*backends: Backend, **kw: object) -> Route:
    return Route(endpoint_id="ep1", name="m", path_prefix="/e/m/", backends=backends, **kw)  # type: ignore[arg-type]


def _layout(*routes: Route) -> Layout:
    return Layout(
        routes=routes, slots={r.endpoint_id: assign_slots(None, r.backends) for r in routes}
    )


def test_a_replica_keeps_its_slot_and_a_new_one_takes_the_first_free() -> None:
    first = assign_slots(None, (_b("a"), _b("b"), _b("c")))
    assert [s.session_id if s else None for s in first] == ["a", "b", "c", None]
    later = assign_slots(first, (_b("c", 0), _b("d")))  # a and b gone, c drained, d new
    assert [s.session_id if s else None for s in later] == ["d", None, "c", None]
    assert later[2] == _b("c", 0)


def test_slots_double_when_full_and_never_shrink() -> None:
    five = assign_slots(None, tuple(_b(f"r{i}") for i in range(MIN_SLOTS + 1)))
    assert len(five) == 2 * MIN_SLOTS
    assert len(assign_slots(five, ())) == 2 * MIN_SLOTS


def test_only_a_change_of_routes_or_slots_changes_the_shape() -> None:
    base = _layout(_route(_b("a"), token_sha256=frozenset({"h1"})))
    same = [
        _route(_b("a", 0)),
        _route(_b("b")),
        _route(_b("a"), token_sha256=frozenset({"h2"})),
    ]
    for r in same:
        assert shape(Layout(routes=(r,), slots=base.slots)) == shape(base)
    other = [
        _route(_b("a"), balance=Balance.LEAST_CONNECTIONS),
        _route(_b("a"), cold_start_s=5.0),
        msgspec.structs.replace(_route(_b("a")), path_prefix="/e/n/"),
    ]
    for r in other:
        assert shape(Layout(routes=(r,), slots=base.slots)) != shape(base)
    assert shape(_layout(*(_route(*(_b(f"r{i}") for i in range(9))),))) != shape(base)


def test_tokens_of_public_routes_are_not_kept() -> None:
    private = _route(token_sha256=frozenset({"h1"}))
    public = msgspec.structs.replace(private, endpoint_id="ep2", public=True)
    assert token_map((private, public)) == ["h1@ep_ep1"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"path_prefix": "/e/a b/"}, "prefix"),
        ({"path_prefix": "/e/a"}, "prefix"),
        ({"host": "a;b"}, "host"),
        ({"endpoint_id": "x y"}, "endpoint id"),
    ],
)
def test_what_haproxy_could_not_be_told_is_refused(change: dict[str, str], said: str) -> None:
    bad = msgspec.structs.replace(_route(_b("a")), **change)
    with pytest.raises(ValueError, match=said):
        render(_layout(bad), PATHS, 8080)


def test_a_private_route_checks_its_token_and_strips_its_prefix() -> None:
    text = render(_layout(_route(_b("a"))), PATHS, 8080)
    assert "return status 401" in text and "del-header authorization" in text
    assert "set-path %[path,bytes(4)]" in text  # "/e/m/x" -> "/x"
    public = render(_layout(_route(_b("a"), public=True)), PATHS, 8080)
    assert "401" not in public
