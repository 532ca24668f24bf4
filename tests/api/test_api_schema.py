"""No request makes the read API fail: schemathesis over every route of its own OpenAPI
document, signed in as a user, and every malformed token refused with a 401.

Requests are generated from ``/openapi.json`` (valid and invalid parameters alike) and
sent over HTTP to the API of a world of tenants (``api_world``: a real log, projections
and the storage service of the folders), as the user ``ualice5r``; half of them name her
own session, folder, admin request and agent, so they reach past the 404 of an unknown
id (into her folder's files, among others). Every answer must be a documented status
with a body that matches its documented schema, and never a 5xx. The event stream is
left out of schemathesis (it never ends); its parameters are among the hand-written bad
inputs below, and its tokens among the generated ones.
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.api_world import World, world

pytestmark = pytest.mark.slow
USER = "ualice5r"
STREAM = "/v1/events/stream"


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world(tmp_path_factory.mktemp("schema")) as found:
        yield found


@pytest.fixture(scope="module")
def api_schema(w: World) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{w.api}/openapi.json")


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _own(w: World) -> dict[str, str]:
    """The user's own ids, by the name of the path parameter that takes each."""
    folder = w.folders[USER]
    return {
        "session_id": w.sessions[USER][0],
        "request_id": w.admin_requests[USER],
        "agent_id": "a1",
        "vfolder_id": folder,
    }


def _with_own_ids(own: dict[str, str], case: schemathesis.Case) -> schemathesis.Case:
    for name in case.path_parameters or {}:
        if name in own:
            case.path_parameters[name] = own[name]  # type: ignore[index]
    return case


# HTTP's own framing: the HTTP server (uvicorn's h11) answers a malformed one with 400
# before any route runs, so it is no input of the API's documented operations.
_FRAMING = frozenset({"content-length", "transfer-encoding", "host", "connection"})


def _without_framing(case: schemathesis.Case) -> None:
    """Drop generated headers that would frame the request rather than reach the API."""
    for name in [n for n in case.headers or {} if n.lower() in _FRAMING]:
        del case.headers[name]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda m: m.value)
def test_the_api_never_fails_a_request(
    w: World, api_schema: schemathesis.BaseSchema, mode: schemathesis.GenerationMode
) -> None:
    # schemathesis' own pytest plugin does not run on pytest 9 yet: drive hypothesis here.
    operations = [result.ok() for result in api_schema.get_all_operations()]
    headers = w.headers(USER)
    own = _own(w)
    tested = 0
    for op in operations:
        if op.path == STREAM:
            continue
        generated = op.as_strategy(mode)
        cases = st.one_of(generated, generated.map(lambda c: _with_own_ids(own, c)))

        @settings(
            max_examples=20,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases)
        def check(case: schemathesis.Case) -> None:
            _without_framing(case)
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            check()
        except Unsatisfiable:
            # Only strings in the path, or no parameter at all: nothing can be invalid.
            assert mode is schemathesis.GenerationMode.NEGATIVE, op.path
            continue
        tested += 1
    # Every operation but the stream, with valid data and with bad data: each takes a
    # bearer token (or a body), which can be wrong.
    assert tested == len(operations) - 1


# Tokens as a client might send them, or an attacker: bytes a header may hold (none of
# CR, LF, NUL and the other controls), of any length, ASCII or not, in the token's own
# shape or not.
_HEADER_BYTES = st.binary(max_size=200).map(
    lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F).strip()
)
_PART = st.text(st.characters(codec="utf-8", min_codepoint=0x21), max_size=30)
_SHAPED = st.builds(
    lambda key, exp, sig: f"fgpu1.{key}.{exp}.{sig}".encode(),
    _PART,
    st.one_of(_PART, st.integers(0).map(str), st.text("0123456789", min_size=4300), st.just("²")),
    _PART,
)
_LONG = st.integers(600, 20_000).map(lambda n: b"fgpu1." + b"A" * n + b".9999999999.x")
TOKENS = st.one_of(_HEADER_BYTES, _SHAPED, _LONG).filter(bool)


def _routes(w: World) -> list[tuple[str, str]]:
    spec = w.http.get(f"{w.api}/openapi.json").json()
    found = []
    for route, ops in spec["paths"].items():
        for method in ops:
            if route != "/v1/auth/token":
                found.append((method.upper(), route.replace("{", "").replace("}", "")))
    return found


def test_a_malformed_token_is_refused_never_failed(w: World) -> None:
    """Any route, any token but a genuine one: 401, as a header or (the event stream)
    as ``?access_token=`` (which is bounded: longer is a 422)."""
    routes = _routes(w)
    with httpx.Client(base_url=w.api, timeout=30) as http:

        @settings(max_examples=100, deadline=None, database=None)
        @given(route=st.sampled_from(routes), token=TOKENS, as_query=st.booleans())
        def check(route: tuple[str, str], token: bytes, as_query: bool) -> None:
            method, path = route
            if as_query and path == STREAM:
                r = http.get(path, params={"access_token": token.decode("latin-1")})
                assert r.status_code in ((422,) if len(token) > 512 else (401,)), r.text
                return
            r = http.request(method, path, headers={"Authorization": b"Bearer " + token})
            assert r.status_code in (401, 431), (route, token, r.text)

        check()


# Bad values a schema's types let through, or nearly: each must get a 4xx with a reason.
# (A header's bytes are read as Latin-1: b"\xb2" is "²", a digit to str.isdigit.)
BAD: list[tuple[str, dict[str, Any], dict[str, bytes]]] = [
    ("/v1/state", {"at": "9999-12-31T23:59:59-23:59"}, {}),
    ("/v1/state", {"at": "0001-01-01T00:00:00+23:59"}, {}),
    ("/v1/state", {"seq": str(1 << 63)}, {}),
    ("/v1/state", {"seq": "1" * 5000}, {}),
    ("/v1/state", {"at": "2025-02-30T00:00:00Z"}, {}),
    ("/v1/events", {"since": "9999-12-31T23:59:59-23:59"}, {}),
    ("/v1/events", {"after": "-1"}, {}),
    ("/v1/events", {"limit": str(10**30)}, {}),
    ("/v1/events/export", {"until": "0001-01-01T00:00:00+01:00", "format": "xml"}, {}),
    ("/v1/sessions", {"offset": str(10**12)}, {}),
    (STREAM, {}, {"Last-Event-ID": "²".encode("latin-1")}),
    (STREAM, {}, {"Last-Event-ID": "1¹".encode("latin-1")}),
    (STREAM, {}, {"Last-Event-ID": b"9" * 5000}),
    (STREAM, {"after": "9" * 30}, {}),
]


@pytest.mark.parametrize(("path", "params", "headers"), BAD, ids=lambda v: str(v)[:40])
def test_a_bad_value_gets_a_4xx_with_its_reason(
    w: World, path: str, params: dict[str, Any], headers: dict[str, bytes]
) -> None:
    r = w.http.get(f"{w.api}{path}", params=params, headers={**w.headers(USER), **headers})
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["detail"]


_LONG_NAME = "n" * 300  # more than a file name may hold (255 bytes)
# (method, path under the user's folder, query): {file} is the path of a file in it.
FOLDER_BAD = [
    pytest.param("PUT", f"files/{_LONG_NAME}", {}, id="upload-long-name"),
    pytest.param("PUT", f"files/d/{_LONG_NAME}/f", {}, id="upload-long-dir"),
    pytest.param("GET", f"files/{_LONG_NAME}", {}, id="download-long-name"),
    pytest.param("GET", "stat", {"path": _LONG_NAME}, id="stat-long-name"),
    pytest.param("GET", "files", {"path": _LONG_NAME}, id="list-long-name"),
    pytest.param("GET", "files/{file}/below", {}, id="download-below-a-file"),
    pytest.param("PUT", "files/{file}/below", {}, id="upload-below-a-file"),
    pytest.param("GET", "files", {"path": "a\x00b"}, id="list-nul"),
    pytest.param("GET", "stat", {"path": "a\x00b"}, id="stat-nul"),
    pytest.param("PUT", "files/a%00b", {}, id="upload-nul"),
    pytest.param("PUT", "files/big", {"offset": str(1 << 63)}, id="offset-2**63"),
    pytest.param("PUT", "files/big", {"offset": str(10**30)}, id="offset-10**30"),
]


@pytest.mark.parametrize(("method", "path", "params"), FOLDER_BAD)
def test_a_bad_folder_request_gets_a_4xx(
    w: World, method: str, path: str, params: dict[str, str]
) -> None:
    folder = w.folders[USER]
    url = f"{w.api}/v1/vfolders/{folder}/{path.format(file=w.files[folder])}"
    r = w.http.request(method, url, params=params, headers=w.headers(USER), content=b"x")
    if not 400 <= r.status_code < 500 or not r.json()["detail"]:
        # No traceback: after hypothesis' runs, pytest's parse of this file to show one
        # has failed on CPython 3.11 (SystemError: AST constructor recursion depth).
        pytest.fail(f"{method} {path}: {r.status_code} {r.text}", pytrace=False)
