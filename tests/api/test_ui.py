"""The web UI's routes on a cluster with tenancy: signing in and out by a server-side
browser session (its cookie's flags), the security headers of every UI answer, CSRF and
origin checks on every write the cookie authenticates, each user's reads and writes kept
to its own, and a terminate published on the user's own connection, in the user's name.
Every UI route is listed with who may use it, and tried anonymously and as another."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute

from events import (
    AccessGranted,
    AdminRequested,
    AnyEvent,
    CreateKeypair,
    CreateUser,
    SessionDestroyRequested,
)
from events import subjects as subj
from services.api import create_app, ui
from services.api.browser import COOKIE
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from tests.support.no_source import NoSource
from tests.support.plain_http import cookieless
from tests.support.ui_world import UiWorld, ui_world


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui")) as world:
        yield world


def _csp_ok(r: httpx.Response) -> None:
    csp = r.headers.get("content-security-policy", "")
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, csp
    assert "form-action 'self'" in csp and "base-uri 'none'" in csp, csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


def test_every_ui_answer_carries_the_security_headers(w: UiWorld) -> None:
    page = httpx.get(f"{w.url}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "<script>" not in page.text and " style=" not in page.text  # no inline
    paths = ("/", "/ui/assets/ui.js", "/ui/assets/ui.css", "/ui/assets/nope", "/ui/session")
    for path in (*paths, "/ui/assets/vendor/xterm.mjs", "/ui/assets/vendor/MANIFEST.json"):
        _csp_ok(httpx.get(f"{w.url}{path}"))
    _csp_ok(httpx.post(f"{w.url}/ui/session", json={}))  # an error too


def test_sign_in_sets_a_strict_cookie_and_keeps_the_session_on_the_server(w: UiWorld) -> None:
    key, secret = w.keys["alice"]
    body = {"access_key": key, "secret_key": secret}
    r = httpx.post(f"{w.url}/ui/session", json=body, headers={"Origin": w.url})
    assert r.status_code == 200, r.text
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie, cookie
    assert "SameSite=strict" in cookie and "Path=/" in cookie, cookie
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    sid = r.cookies[COOKIE]
    assert key not in sid and secret not in sid and len(sid) >= 40  # opaque, random
    assert r.json()["identity"]["user"] == "alice" and len(r.json()["csrf"]) >= 40
    # Behind a proxy on this host that says the browser came over TLS: Secure.
    tls = {"Origin": w.url.replace("http://", "https://"), "X-Forwarded-Proto": "https"}
    r = httpx.post(f"{w.url}/ui/session", json=body, headers=tls)
    assert r.status_code == 200 and "Secure" in r.headers["set-cookie"], r.headers


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "http://evil.example"}, {"Origin": "SELF", "Sec-Fetch-Site": "cross-site"}],
)
def test_sign_in_from_another_site_is_refused(w: UiWorld, headers: dict[str, str]) -> None:
    key, secret = w.keys["alice"]
    headers = {k: (w.url if v == "SELF" else v) for k, v in headers.items()}
    r = httpx.post(
        f"{w.url}/ui/session", json={"access_key": key, "secret_key": secret}, headers=headers
    )
    assert r.status_code == 403 and COOKIE not in r.cookies, r.text


def test_a_wrong_secret_signs_nobody_in(w: UiWorld) -> None:
    key, secret = w.keys["alice"]
    r = httpx.post(
        f"{w.url}/ui/session",
        json={"access_key": key, "secret_key": secret + "x"},
        headers={"Origin": w.url},
    )
    assert r.status_code == 401 and COOKIE not in r.cookies


def test_the_cookie_reads_the_users_own_sessions_only(w: UiWorld) -> None:
    alice, _ = w.sign_in("alice")
    bob, _ = w.sign_in("bob")
    mine = {s["id"] for s in alice.get("/v1/sessions").json()["sessions"]}
    assert w.sessions["alice"] in mine and w.sessions["bob"] not in mine
    assert bob.get(f"/v1/sessions/{w.sessions['alice']}").status_code == 404
    assert alice.get(f"/v1/sessions/{w.sessions['alice']}").status_code == 200
    assert alice.get("/v1/auth/whoami").json()["user"] == "alice"
    assert httpx.get(f"{w.url}/v1/sessions").status_code == 401  # no cookie, no token
    forged = httpx.get(f"{w.url}/v1/sessions", cookies={COOKIE: "made-up"})
    assert forged.status_code == 401


def _terminate(http: httpx.Client, sid: str, **headers: str) -> httpx.Response:
    return http.post(f"/ui/sessions/{sid}/terminate", headers=headers)


def test_a_write_without_its_csrf_token_or_from_another_origin_is_refused(w: UiWorld) -> None:
    http, csrf = w.sign_in("alice")
    sid = w.sessions["alice"]
    before = w.last_seq()
    refused = [
        _terminate(http, sid, Origin=w.url),  # no token
        _terminate(http, sid, Origin=w.url, **{"X-CSRF-Token": csrf[:-1] + "x"}),
        _terminate(http, sid, **{"X-CSRF-Token": csrf}),  # no Origin
        _terminate(http, sid, Origin="http://evil.example", **{"X-CSRF-Token": csrf}),
        _terminate(
            http, sid, Origin=w.url, **{"X-CSRF-Token": csrf, "Sec-Fetch-Site": "same-site"}
        ),
    ]
    assert [r.status_code for r in refused] == [403] * 5, [r.text for r in refused]
    assert not _destroys(w.stored_since(before))


def _destroys(stored: list[tuple[str, AnyEvent]]) -> list[tuple[str, SessionDestroyRequested]]:
    return [(s, e) for s, e in stored if isinstance(e, SessionDestroyRequested)]


def test_terminate_is_the_users_own_request_and_refused_for_anothers_session(
    w: UiWorld,
) -> None:
    sid = w.create("alice", name="to-end")
    bob, bob_csrf = w.sign_in("bob")
    before = w.last_seq()
    r = _terminate(bob, sid, Origin=w.url, **{"X-CSRF-Token": bob_csrf})
    assert r.status_code == 404, r.text  # another's session is not even said to exist

    alice, csrf = w.sign_in("alice")
    r = _terminate(alice, sid, Origin=w.url, **{"X-CSRF-Token": csrf})
    assert r.status_code == 200, r.text
    request_id = r.json()["request_id"]
    key = w.keys["alice"][0]
    subject, e = w.wait_for(before, lambda _, e: isinstance(e, SessionDestroyRequested))
    assert isinstance(e, SessionDestroyRequested)
    assert len(_destroys(w.stored_since(before))) == 1
    # Published by alice's own connection: the server let it onto her subject only, the
    # intake wrote it there, in her name; and the gatekeeper let her key in over NATS.
    assert subject == subj.request(key, sid)
    assert (e.id, e.requester, e.actor, e.session_id) == (request_id, key, key, sid)
    granted = [g for _, g in w.stored_since(0) if isinstance(g, AccessGranted) and g.via == "nats"]
    assert any(g.owner == key for g in granted)


def test_sign_out_ends_the_session_on_the_server(w: UiWorld) -> None:
    http, csrf = w.sign_in("alice")
    sid = http.cookies[COOKIE]
    assert http.delete("/ui/session", headers={"Origin": w.url}).status_code == 403
    r = http.delete("/ui/session", headers={"Origin": w.url, "X-CSRF-Token": csrf})
    assert r.status_code == 204
    assert f"{COOKIE}=" in r.headers["set-cookie"] and "Max-Age=0" in r.headers["set-cookie"]
    # The same cookie, kept by a thief, is nothing now.
    replay = w.http(cookies={COOKIE: sid})
    assert replay.get("/ui/session").status_code == 401
    assert replay.get("/v1/sessions").status_code == 401


def test_a_revoked_keypair_ends_its_browser_sessions_at_the_next_request(w: UiWorld) -> None:
    http, _ = w.sign_in("mallory")
    assert http.get("/ui/session").status_code == 200
    w.revoke("mallory")
    r = http.get("/v1/sessions")
    assert r.status_code == 401, r.text
    assert http.get("/ui/session").status_code == 401


# Every route of the UI and who may use it: "anyone", "holder" (its browser session's; a
# foreign one gets ``foreign``'s status) or "admin" (an administrator's browser session; a
# user's gets 403). A route added without a line here fails below.
ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/"): "anyone",
    ("GET", "/ui/assets/{name:path}"): "anyone",
    ("POST", "/ui/session"): "anyone",  # with a keypair's secret (tests above)
    ("GET", "/ui/session"): "holder",
    ("DELETE", "/ui/session"): "holder",
    ("POST", "/ui/sessions/{session_id}/terminate"): "holder",
    ("POST", "/ui/sessions"): "holder",  # a launch: the user's own (test_ui_launch.py)
    ("POST", "/ui/sessions/{session_id}/shell-ticket"): "holder",
    ("GET", "/ui/sessions/{session_id}/logs"): "holder",
    # The administrators' writes: a domain admin's or a superadmin's browser session; a
    # user's gets ``admin``'s 403 (tests/api/test_ui_admin.py tries each as every one).
    ("POST", "/ui/admin/users"): "admin",
    ("POST", "/ui/admin/keypairs"): "admin",
    ("POST", "/ui/admin/keypairs/{access_key}/revoke"): "admin",
    ("POST", "/ui/admin/policies"): "admin",
    ("POST", "/ui/admin/presets"): "admin",
    ("DELETE", "/ui/admin/presets/{name}"): "admin",
    ("POST", "/ui/admin/groups"): "admin",
    ("PATCH", "/ui/admin/groups/{group}"): "admin",
    ("DELETE", "/ui/admin/groups/{group}"): "admin",
    ("POST", "/ui/admin/images/{domain}"): "admin",
    ("POST", "/ui/admin/images/{domain}/aliases"): "admin",
    ("DELETE", "/ui/admin/images/{domain}/aliases/{alias:path}"): "admin",
    # A session's apps: its owner's alone (an admin of its domain is refused too:
    # tests/e2e/test_ui_apps.py, which also tries every refusal of the apps origin).
    ("GET", "/ui/sessions/{session_id}/apps"): "holder",
    ("POST", "/ui/sessions/{session_id}/apps/{service}/ticket"): "holder",
    ("POST", "/ui/vfolders"): "holder",  # a folder: the user's own (test_ui_folders.py)
    ("POST", "/ui/vfolders/{vfolder_id}/share"): "holder",  # a folder the viewer sees
    # An endpoint the viewer sees (else 404), judged by the serving actor
    # (test_ui_serving_writes.py; another's: test_ui_adversarial.py).
    ("POST", "/ui/endpoints/{ref}/scale"): "holder",
    ("POST", "/ui/endpoints/{ref}/point"): "holder",
    ("POST", "/ui/endpoints/{ref}/traffic"): "holder",
    ("POST", "/ui/endpoints/{ref}/autoscale"): "holder",
    ("POST", "/ui/endpoints/{ref}/tokens"): "holder",
    ("POST", "/ui/endpoints/{ref}/tokens/{token_id}/revoke"): "holder",
}
# The UI's WebSockets: a browser session's, with a ticket of its own and from this origin
# (tests/api/test_ui_session.py tries each refusal).
SOCKETS = {"/ui/sessions/{session_id}/shell": "holder"}


def _ui_routes() -> set[tuple[str, str]]:
    app = create_app(NoSource())
    found = set()
    for route in app.routes:
        if isinstance(route, APIRoute) and (route.path == "/" or route.path.startswith("/ui")):
            assert not route.include_in_schema, route.path  # not the API's: not in its schema
            found |= {(m, route.path) for m in route.methods}
    return found


def test_every_websocket_says_who_may_use_it() -> None:
    app = create_app(NoSource())
    sockets = {r.path for r in app.routes if isinstance(r, APIWebSocketRoute)}
    assert sockets == set(SOCKETS)


def test_every_ui_route_says_who_may_use_it_and_refuses_the_others(w: UiWorld) -> None:
    assert _ui_routes() == set(ROUTES)
    bob, csrf = w.sign_in("bob")
    fill = {
        "{name:path}": "vendor/xterm.mjs",
        "{session_id}": w.sessions["alice"],
        "{access_key}": w.keys["alice"][0],
        "{name}": "small",
        "{service}": "web",
        "{vfolder_id}": "vf-of-nobody-bob-sees",
        "{group}": "default",
        "{domain}": "default",
        "{alias:path}": "team/python",
        "{ref}": "ep-of-nobody",
        "{token_id}": "t0",
    }
    before = w.last_seq()
    with cookieless() as anyone:  # a client kept for the loop: one per request is slow
        for (method, path), who in ROUTES.items():
            url = re.sub(r"\{[a-z_:]+\}", lambda m: fill[m.group(0)], path)
            anonymous = anyone.request(method, f"{w.url}{url}", headers={"Origin": w.url})
            if who == "anyone":
                assert anonymous.status_code in (200, 422), (method, path, anonymous.text)
                continue
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            if "{session_id}" in path or "{vfolder_id}" in path or "{ref}" in path:  # not bob's
                mine = {"Origin": w.url, "X-CSRF-Token": csrf}
                foreign = bob.request(
                    method, url, headers=mine, json={} if method == "POST" else None
                )
                assert foreign.status_code == 404, (method, path, foreign.text)
            if who == "admin":  # a user administers nothing: refused before anything is sent
                user = bob.request(method, url, headers={"Origin": w.url, "X-CSRF-Token": csrf})
                assert user.status_code == 403, (method, path, user.text)
    assert not [e for _, e in w.stored_since(before) if isinstance(e, AdminRequested)]


def test_the_page_follows_every_event_that_changes_a_session() -> None:
    script = (Path(ui.__file__).with_name("ui") / "ui.js").read_text()
    listed = set(re.findall(r'"(session\.[a-z-]+\.v\d+)"', script.split("SESSION_EVENTS")[1]))
    tags = {t.__struct_config__.tag for t in get_args(AnyEvent)}
    # What a session's row shows changes with these; the rest name a session without
    # changing its row (samples, execs, channels).
    quiet = {
        "session.cpu-sampled.v1",
        "session.exec-started.v1",
        "session.exec-finished.v1",
        "session.channel-opened.v1",
        "session.channel-closed.v1",
    }
    assert {t for t in tags if t.startswith("session.")} - quiet == listed


def test_the_apps_origin_refuses_anonymous_and_another_users_grant(w: UiWorld) -> None:
    apps = w.api.apps_url
    assert apps is not None and apps != w.url  # another origin: another port
    alice = w.sessions["alice"]
    for path in (f"/apps/{alice}/web/", f"/apps/{alice}/web/x?y=1", "/open?ticket=nope"):
        r = httpx.get(f"{apps}{path}")
        assert r.status_code == 403, (path, r.text)
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
    assert httpx.get(f"{apps}/elsewhere").status_code == 404
    # Bob's grant, for his own session's app, opens nothing of Alice's.
    bob, csrf = w.sign_in("bob")
    own = w.sessions["bob"]
    r = bob.post(
        f"/ui/sessions/{own}/apps/web/ticket", headers={"Origin": w.url, "X-CSRF-Token": csrf}
    )
    assert r.status_code == 200, r.text
    opened = bob.get(r.json()["url"])
    assert opened.status_code == 303 and opened.headers["location"] == f"/apps/{own}/web/"
    cookie = opened.headers["set-cookie"]
    assert f"Path=/apps/{own}/web/" in cookie and "HttpOnly" in cookie, cookie
    assert "SameSite=Strict" in cookie, cookie
    grant = cookie.split(";")[0]
    for path in (f"/apps/{alice}/web/", f"/apps/{own}/other/"):
        refused = bob.get(f"{apps}{path}", headers={"Cookie": grant})
        assert refused.status_code == 403, (path, refused.text)


def test_an_apps_grant_ends_with_its_keypair_and_is_secure_over_tls(w: UiWorld) -> None:
    key, secret = new_access_key(), new_secret()
    w.apply(CreateUser(user="erin", domain="default", projects=("default",)))
    w.apply(CreateKeypair(access_key=key, user="erin", secret_hash=hash_secret(secret)))
    w.keys["erin"] = (key, secret)
    own = w.create("erin")
    erin, csrf = w.sign_in("erin")
    asks = {"Origin": w.url, "X-CSRF-Token": csrf}
    url = erin.post(f"/ui/sessions/{own}/apps/web/ticket", headers=asks).json()["url"]
    over_tls = erin.get(url, headers={"X-Forwarded-Proto": "https"})  # a proxy's word
    assert over_tls.status_code == 303 and "Secure" in over_tls.headers["set-cookie"]
    url = erin.post(f"/ui/sessions/{own}/apps/web/ticket", headers=asks).json()["url"]
    grant = erin.get(url).headers["set-cookie"].split(";")[0]
    app = f"{w.api.apps_url}/apps/{own}/web/"
    waiting = httpx.get(app, headers={"Cookie": grant})
    assert waiting.status_code == 409, waiting.text  # admitted: her session is not running
    w.revoke("erin")
    assert httpx.get(app, headers={"Cookie": grant}).status_code == 401
