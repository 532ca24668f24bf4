"""The web UI in the adversarial matrix: the roles of the NATS matrix
(``tests/support/attack_roles.py``: anonymous, a user of the victim's project, a user of
another project, another domain's admin, a revoked keypair; and an agent's service
keypair) each try every UI route (HTTP and WebSocket) and every read of a session that a
browser's cookie reaches, on the victim's running session.

Each is refused (those at the door: 401, or a refused handshake; the others: 404, the
session not even said to exist, or a list without it), and nothing changed: the log holds
nothing after the attempts but the access audit's records, and the victim's session runs.

The victim has an endpoint too (0 replicas): the Serving page's reads of endpoints
(``/v1/endpoints``) neither list it nor name it to another, and its writes (scale, a
move to a revision, a traffic split, an autoscaling rule, a token made or revoked) reach
it for none of them.

``TABLE`` names every route the app serves under ``/ui``, at ``/`` and under
``/v1/endpoints``, and every route with a session in its path, with how it is tried: a
route served but missing from it fails ``test_every_route_is_in_the_table``. Adding a
route is one line there (and one in ``FILL`` for a new kind of path parameter).
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import websocket
from fastapi.routing import APIRoute, APIWebSocketRoute

from events import (
    CreateEndpoint,
    EndpointCreated,
    RevisionSpec,
    RevokeKeypair,
    SessionRunning,
)
from services.api import create_app
from services.api.browser import COOKIE
from services.domain.access.keys import new_access_key, new_secret
from tests.support.attack_roles import AT_THE_DOOR, PEOPLE, PERSON_ROLES, VICTIM, tenancy
from tests.support.no_source import NoSource
from tests.support.ui_world import IMAGE, RUNNING_SERVICES, SLIVER, UiWorld, ui_world

ROLES = {**PERSON_ROLES, "agent-key": "agent:a1"}
WS = "WEBSOCKET"

# How a route is tried on the victim's session:
VICTIMS = "the victim's"  # names it: refused (401 at the door, else 404 or a refused socket)
LIST = "a list"  # lists sessions: 401 at the door, else the victim's is not in it
NONE = "names no session"  # nothing of another's to ask for (sign-in, assets, a launch)

TABLE: dict[tuple[str, str], str] = {
    ("GET", "/"): NONE,
    ("GET", "/ui/assets/{name:path}"): NONE,
    ("POST", "/ui/session"): NONE,  # signing in: tried by each role below
    ("GET", "/ui/session"): NONE,  # the holder's own browser session
    ("DELETE", "/ui/session"): NONE,
    ("POST", "/ui/sessions"): NONE,  # a launch in another's project: test_ui_launch.py
    ("POST", "/ui/sessions/{session_id}/terminate"): VICTIMS,
    ("POST", "/ui/sessions/{session_id}/shell-ticket"): VICTIMS,
    ("GET", "/ui/sessions/{session_id}/logs"): VICTIMS,
    (WS, "/ui/sessions/{session_id}/shell"): VICTIMS,
    ("GET", "/ui/sessions/{session_id}/apps"): VICTIMS,
    ("POST", "/ui/sessions/{session_id}/apps/{service}/ticket"): VICTIMS,
    # Folders: the user's own requests, judged by the registrar (test_ui_folders.py tries
    # another's folder); the administrators' writes: refused to all but administrators
    # before anything is sent (test_ui.py, test_ui_admin.py). None names a session.
    ("POST", "/ui/vfolders"): NONE,
    ("POST", "/ui/vfolders/{vfolder_id}/share"): NONE,
    ("POST", "/ui/admin/users"): NONE,
    ("POST", "/ui/admin/keypairs"): NONE,
    ("POST", "/ui/admin/keypairs/{access_key}/revoke"): NONE,
    ("POST", "/ui/admin/policies"): NONE,
    ("POST", "/ui/admin/presets"): NONE,
    ("DELETE", "/ui/admin/presets/{name}"): NONE,
    ("POST", "/ui/admin/groups"): NONE,
    ("PATCH", "/ui/admin/groups/{group}"): NONE,
    ("DELETE", "/ui/admin/groups/{group}"): NONE,
    ("POST", "/ui/admin/images/{domain}"): NONE,
    ("POST", "/ui/admin/images/{domain}/aliases"): NONE,
    ("DELETE", "/ui/admin/images/{domain}/aliases/{alias:path}"): NONE,
    # The read API's reads of sessions, which the cookie reaches as the page does.
    ("GET", "/v1/sessions"): LIST,
    ("GET", "/v1/sessions/{session_id}"): VICTIMS,
    ("GET", "/v1/sessions/{session_id}/history"): VICTIMS,
    ("GET", "/v1/events?session={session_id}"): LIST,
    # The Serving page's reads (the victim's endpoint, by its name and by its id).
    ("GET", "/v1/endpoints"): LIST,
    ("GET", "/v1/endpoints/{ref}"): VICTIMS,
    ("GET", "/v1/endpoints/{ref}#by-id"): VICTIMS,
    # The Serving page's writes (ui_serving.py), each on the victim's endpoint: 404 before
    # anything is sent (test_ui_serving_writes.py has its domain's admin allowed).
    ("POST", "/ui/endpoints/{ref}/scale"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/point"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/point#by-id"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/traffic"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/autoscale"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/tokens"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/tokens#by-id"): VICTIMS,
    ("POST", "/ui/endpoints/{ref}/tokens/{token_id}/revoke"): VICTIMS,
}
FILL = {
    "{name:path}": "ui.js",
    "{session_id}": "",
    "{service}": "web",
    "{token_id}": "t0",
}  # the victim's session, once it runs
ENDPOINT_ID, ENDPOINT = "ep-the-victims", "the-victims-model"  # the victim's endpoint


@dataclass
class Arena:
    w: UiWorld
    victim: str  # the victim's session, running
    revoked: httpx.Client  # signed in as rv before its keypair was revoked
    revoked_csrf: str


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    services = (*RUNNING_SERVICES, "serving")
    with ui_world(tmp_path_factory.mktemp("ui-adversarial"), services) as w:
        keys = {name: (new_access_key(), new_secret()) for name in PEOPLE}
        for command in tenancy(keys):
            w.apply(command)
        w.keys.update(keys)
        victim = w.create(VICTIM, name="the-victims", slots=SLIVER, project="a")
        w.wait_until(victim, SessionRunning)
        # At 0 replicas: the serving actor appends nothing more while the roles try.
        spec = RevisionSpec(image=IMAGE, slots=SLIVER)
        ask = CreateEndpoint(endpoint_id=ENDPOINT_ID, name=ENDPOINT, revision=spec, replicas=0)
        assert isinstance(w.serve(VICTIM, ask), EndpointCreated)
        revoked, csrf = w.sign_in("rv")
        w.apply(RevokeKeypair(access_key=keys["rv"][0]))
        yield Arena(w, victim, revoked, csrf)


def _served() -> set[tuple[str, str]]:
    """The UI's routes and every route naming a session, as (method, path)."""
    found: set[tuple[str, str]] = set()
    for r in create_app(NoSource()).routes:
        if not isinstance(r, APIRoute | APIWebSocketRoute):
            continue
        if r.path == "/" or r.path.startswith(("/ui", "/v1/endpoints")) or "{session_id}" in r.path:
            methods = r.methods if isinstance(r, APIRoute) else {WS}
            found |= {(m, r.path) for m in methods}
    return found


def test_every_route_is_in_the_table() -> None:
    listed = {(m, re.split(r"[?#]", p)[0]) for m, p in TABLE}
    assert _served() <= listed, sorted(_served() - listed)


def _as(a: Arena, role: str) -> tuple[httpx.Client, str]:
    """The client ``role`` acts through (its cookie, if it has one) and its CSRF token."""
    who = ROLES[role]
    if role == "revoked-key":
        return a.revoked, a.revoked_csrf
    if who == "" or who.startswith("agent:"):
        if who:  # a service's keypair signs no one in
            key, secret = a.w.c.services[who]
            r = a.w.http().post(
                "/ui/session",
                json={"access_key": key, "secret_key": secret},
                headers={"Origin": a.w.url},
            )
            assert r.status_code in (401, 403) and COOKIE not in r.cookies, r.text
        return a.w.http(), "x" * 43
    return a.w.sign_in(who)


def _url(path: str, victim: str) -> str:
    """``path`` naming the victim's session, or its endpoint (by name; ``#by-id``: by id)."""
    path, _, how = path.partition("#")
    endpoint = ENDPOINT_ID if how == "by-id" else ENDPOINT
    return re.sub(
        r"\{[a-z_:]+\}",
        lambda m: endpoint if m.group(0) == "{ref}" else FILL[m.group(0)] or victim,
        path,
    )


def _http(http: httpx.Client, method: str, url: str, headers: dict[str, str]) -> int:
    """The answer's status (a stream's, without reading it)."""
    with http.stream(method, url, headers=headers) as r:
        return r.status_code


def _socket(a: Arena, http: httpx.Client, url: str) -> int:
    """The status of a WebSocket handshake with ``http``'s cookie and a made-up ticket
    (101: opened)."""
    ws = websocket.WebSocket()
    cookie = http.cookies.get(COOKIE)
    options: dict[str, Any] = {"timeout": 30, "origin": a.w.url}
    if cookie is not None:
        options["cookie"] = f"{COOKIE}={cookie}"
    target = a.w.url.replace("http://", "ws://") + url + "?ticket=" + "x" * 43
    try:
        ws.connect(target, **options)
    except websocket.WebSocketBadStatusException as e:
        return int(e.status_code)
    finally:
        ws.shutdown()
    return 101


def _listed(http: httpx.Client, url: str, victim: str) -> tuple[int, bool]:
    """The list's status, and whether the victim's session or endpoint is in it."""
    r = http.get(url)
    return r.status_code, any(v in r.text for v in (victim, ENDPOINT_ID, ENDPOINT))


def _refusal(method: str, how: str, at_door: bool) -> object:
    """What a route tried as ``how`` answers a role (``at_door``: one never let in)."""
    if how == NONE:
        return None
    if method == WS:
        return 403  # the handshake refused
    if how == LIST:
        return (401, False) if at_door else (200, False)
    return 401 if at_door else 404


@pytest.mark.parametrize("role", list(ROLES))
def test_every_ui_route_refuses_each_role_on_the_victims_session(arena: Arena, role: str) -> None:
    a = arena
    http, csrf = _as(a, role)
    at_door = role in AT_THE_DOOR or ROLES[role].startswith("agent:")
    before = a.w.last_seq()
    headers = {"Origin": a.w.url, "X-CSRF-Token": csrf}
    answers: dict[tuple[str, str], object] = {}
    for (method, path), how in TABLE.items():
        if how == NONE:
            continue
        url = _url(path, a.victim)
        if how == VICTIMS and method == WS:
            answers[method, path] = _socket(a, http, url)
        elif how == VICTIMS:
            answers[method, path] = _http(http, method, url, headers)
        elif how == LIST:
            answers[method, path] = _listed(http, url, a.victim)
    expected = {route: _refusal(route[0], how, at_door) for route, how in TABLE.items()}
    expected = {route: want for route, want in expected.items() if want is not None}
    assert answers == expected
    # Nothing changed: the log holds no more than who came in or was refused at the door,
    # and the victim's session runs on.
    stored = [s for s, _ in a.w.stored_since(before) if not s.startswith("fgpu.access.")]
    assert stored == [], stored
    mine, _ = a.w.sign_in(VICTIM)
    assert mine.get(f"/v1/sessions/{a.victim}").json()["status"] == "RUNNING"
