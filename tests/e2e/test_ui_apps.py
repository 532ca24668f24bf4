"""A session's app through the web UI's proxy, on a real Docker engine: Alice's session
serves an app (``tests/support/app_server.py``: a page, a relative stylesheet, a POST
echo, a WebSocket echo, every request's headers kept). Its page lists the app; a ticket
opens it on the apps origin, in headless Chromium and over HTTP: the page loads, its
stylesheet and script load, the POST round-trips, the WebSocket echoes. Each connection
is an app channel opened as Alice, on the log in her name. The container never gets a
cookie or header of fgpu's, and a cookie it sets in fgpu's name never reaches the
browser. An app's script cannot read the UI's CSRF token nor make a UI write. Refused:
anonymous, another's ticket, a ticket used twice, a grant for another app, a WebSocket
from another origin, Bob's tickets for Alice's session, an admin of her domain (apps are
the owner's alone), Bob's own channel to her app at the agent. A screenshot of her
session's page, its apps listed, is saved (docs/ui-apps.png is one)."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websocket

from events import (
    CreateKeypair,
    CreateUser,
    Role,
    SessionChannelClosed,
    SessionChannelOpened,
    SessionRunning,
)
from services.adapters.docker_runtime import DockerRuntime
from services.api.app_grants import APP_COOKIE
from services.api.app_relay import Pipe
from services.api.browser import COOKIE, ShellRefused
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.wiring.acting import acting_on
from tests.support.app_server import SERVER, app_image
from tests.support.browser import browser_or_skip, browsing
from tests.support.cli_stack import remove_agent_containers
from tests.support.docker_env import require_docker
from tests.support.ui_pages import SessionPage
from tests.support.ui_world import SLIVER, UiWorld, ui_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    """Everyone's first session RUNNING on Docker, and Alice's app session."""
    require_docker()
    image = app_image()
    agent = f"apps-{uuid.uuid4().hex[:8]}"
    services = ("intake", "registrar", "quota", "scheduler", f"agent:{agent}")
    try:
        with ui_world(tmp_path_factory.mktemp("ui-apps"), services, DockerRuntime) as world:
            sid = world.create(
                "alice", name="app", image=image, command=("python3", "-c", SERVER), slots=SLIVER
            )
            world.wait_until(sid, SessionRunning)
            world.sessions["app"] = sid
            yield world
    finally:
        remove_agent_containers(agent)


def _ticket(w: UiWorld, who: str, service: str = "web") -> tuple[httpx.Client, httpx.Response]:
    http, csrf = w.sign_in(who)
    r = http.post(
        f"/ui/sessions/{w.sessions['app']}/apps/{service}/ticket",
        headers={"Origin": w.url, "X-CSRF-Token": csrf},
    )
    return http, r


def _opened(w: UiWorld, service: str = "web") -> tuple[httpx.Client, str]:
    """Alice's client, its grant taken at the apps origin; the app's address there."""
    http, r = _ticket(w, "alice", service)
    assert r.status_code == 200, r.text
    landed = http.get(r.json()["url"], follow_redirects=True)
    assert landed.status_code == 200, landed.text
    return http, str(landed.url)


def test_the_page_lists_the_apps_the_image_declares_for_its_owner_alone(w: UiWorld) -> None:
    alice, _ = w.sign_in("alice")
    r = alice.get(f"/ui/sessions/{w.sessions['app']}/apps")
    assert r.json() == {"apps": [{"name": "web", "protocol": "http", "port": 8080}], "error": None}
    bob, _ = w.sign_in("bob")
    assert bob.get(f"/ui/sessions/{w.sessions['app']}/apps").status_code == 404


def test_an_app_answers_through_the_proxy_and_gets_no_credential_of_fgpus(w: UiWorld) -> None:
    before = w.last_seq()
    http, app = _opened(w)
    assert w.api.apps_url is not None and app.startswith(w.api.apps_url)
    assert app.endswith(f"/apps/{w.sessions['app']}/web/")
    page = http.get(app)
    assert "hello from the app" in page.text
    # A cookie of fgpu's name never reaches the browser; the app's own do.
    assert "fgpu_ui=planted" not in page.headers.get_list("set-cookie")
    assert "own=1; Path=/" in page.headers.get_list("set-cookie")
    assert http.get(f"{app}style.css").text == "h1 { color: teal }"
    big = b"x" * 200_000  # more than a frame of the channel: streamed, in order
    assert http.post(f"{app}echo", content=big).content == b"got:" + big
    cookies = "; ".join(f"{c.name}={c.value}" for c in http.cookies.jar)
    assert COOKIE in cookies and APP_COOKIE in cookies  # the browser sent both to the proxy
    sock = websocket.create_connection(
        app.replace("http", "ws") + "ws",
        header=[f"Cookie: {cookies}", "X-CSRF-Token: nope"],
        origin=w.api.apps_url,
        timeout=10,
    )
    sock.send("hi-42")
    assert sock.recv() == "echo:hi-42"
    sock.close()
    seen = http.get(f"{app}headers").json()
    assert {s["path"] for s in seen} >= {"/", "/style.css", "/echo", "/headers"}
    for s in seen:
        text = json.dumps(s["headers"]).lower()
        assert "fgpu" not in text and "x-csrf-token" not in text, s
    # Each connection an app channel opened in Alice's name, and closed.
    key = w.keys["alice"][0]
    opened = [e for _, e in w.stored_since(before) if isinstance(e, SessionChannelOpened)]
    assert len(opened) >= 5 and {(e.requester, e.kind, e.service) for e in opened} == {
        (key, "app", "web")
    }
    _, closed = w.wait_for(before, lambda _, e: isinstance(e, SessionChannelClosed))
    assert isinstance(closed, SessionChannelClosed) and closed.requester == key


def test_an_apps_grant_opens_that_app_alone_and_a_ticket_opens_once(w: UiWorld) -> None:
    http, app = _opened(w)
    apps = w.api.apps_url
    other = app.replace("/web/", "/other/")
    assert http.get(other).status_code == 403  # a grant for web opens no other app
    assert httpx.get(app).status_code == 403  # anonymous
    # Alice's ticket, in Bob's browser: refused there (it is her browser's); then used up.
    alice, r = _ticket(w, "alice")
    bob, _ = w.sign_in("bob")
    url = r.json()["url"]
    assert bob.get(url).status_code == 403
    assert alice.get(url).status_code == 403  # tried once: gone
    # A WebSocket from another origin's page, with Alice's cookies.
    cookies = "; ".join(f"{c.name}={c.value}" for c in http.cookies.jar)
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(
            app.replace("http", "ws") + "ws",
            header=[f"Cookie: {cookies}"],
            origin="http://evil.example",
            timeout=10,
        )
    assert apps is not None and httpx.get(f"{apps}/open?ticket=nope").status_code == 403
    # A service the image does not declare: the agent refuses the channel, the proxy says so.
    http, r = _ticket(w, "alice", "nope")
    landed = http.get(r.json()["url"], follow_redirects=True)
    assert landed.status_code == 502 and "no service 'nope'" in landed.text, landed.text


def test_an_apps_page_cannot_act_in_the_ui(w: UiWorld) -> None:
    http, _ = _opened(w)
    apps = w.api.apps_url
    assert apps is not None
    read = http.get("/ui/session", headers={"Origin": apps, "Sec-Fetch-Site": "same-site"})
    assert "access-control-allow-origin" not in read.headers  # the browser hides it
    csrf = read.json()["csrf"]  # even were it read: a write from the app's origin
    for site in ("same-site", None):
        headers = {"Origin": apps, "X-CSRF-Token": csrf}
        if site is not None:
            headers["Sec-Fetch-Site"] = site
        r = http.post(f"/ui/sessions/{w.sessions['app']}/terminate", headers=headers)
        assert r.status_code == 403, r.text


def test_others_get_no_ticket_and_the_agent_refuses_another(w: UiWorld) -> None:
    _, r = _ticket(w, "bob")
    assert r.status_code == 404  # not even said to exist
    # An administrator of her domain sees the session, and gets no ticket for its app.
    key, secret = new_access_key(), new_secret()
    w.apply(CreateUser(user="dora", domain="default", role=Role.DOMAIN_ADMIN))
    w.apply(CreateKeypair(access_key=key, user="dora", secret_hash=hash_secret(secret)))
    w.keys["dora"] = (key, secret)
    dora, r = _ticket(w, "dora")
    assert r.status_code == 403 and "owner only" in r.text, r.text
    listed = dora.get(f"/ui/sessions/{w.sessions['app']}/apps").json()
    assert listed["apps"] == [] and "owner only" in listed["error"]
    # Bob, asking Alice's session's agent for her app on his own connection: refused.
    alice, _ = w.sign_in("alice")
    agent = alice.get(f"/v1/sessions/{w.sessions['app']}").json()["agent"]

    async def as_bob(listing: bool) -> object:
        acting = await acting_on(w.c.url)(*w.keys["bob"])
        try:
            if listing:
                return await acting.services(agent, w.sessions["app"])
            with Pipe() as pipe:
                return await acting.app(agent, w.sessions["app"], "web", pipe)
        finally:
            await acting.aclose()

    for listing in (True, False):
        with pytest.raises(ShellRefused, match="may not run commands"):
            w.portal.call(as_bob, listing)


def test_alice_opens_her_app_from_her_sessions_page(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    shot = tmp_path / "ui-apps.png"
    with browsing(tmp_path / "alice", 1100, 800) as driver:
        page = SessionPage(driver, f"{w.url}/")
        page.sign_in(*w.keys["alice"], "alice")
        page.open(w.sessions["app"])
        page.until(lambda d: page.css("#apps li .app-name") == ["web"], "the app listed")
        driver.execute_script("document.querySelector('#session').scrollIntoView()")
        driver.save_screenshot(str(shot))
        page.d.find_element("css selector", "#apps li button").click()
        page.until(lambda d: len(d.window_handles) == 2, "the app's window")
        driver.switch_to.window(driver.window_handles[1])
        for id_, text in (("css", "h1 { color: teal }"), ("post", "got:ping-42")):
            page.until(lambda d, i=id_, t=text: page.css(f"#{i}") == [t], f"{id_} in the app")
        page.until(lambda d: page.css("#ws") == ["echo:hi-42"], "the WebSocket's echo")
        # The app's own script, hostile: the UI's session (its CSRF token) and a write.
        ui = w.url
        tried = driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            const [ui, sid] = [arguments[0], arguments[1]];
            const out = {};
            try { out.read = await (await fetch(`${ui}/ui/session`,
                                                { credentials: "include" })).text(); }
            catch (e) { out.read = "refused"; }
            try { const r = await fetch(`${ui}/ui/sessions/${sid}/terminate`,
                    { method: "POST", credentials: "include", headers: { "X-CSRF-Token": "x" } });
                  out.write = r.status; }
            catch (e) { out.write = "refused"; }
            try { await fetch(`${ui}/ui/sessions/${sid}/terminate`,
                    { method: "POST", credentials: "include", mode: "no-cors" });
                  out.blind = "sent"; }
            catch (e) { out.blind = "refused"; }
            out.cookies = document.cookie;
            done(out);
            """,
            ui,
            w.sessions["app"],
        )
        assert tried["read"] == "refused" and tried["write"] == "refused", tried
        assert "fgpu" not in tried["cookies"], tried
    alice, _ = w.sign_in("alice")
    row = alice.get(f"/v1/sessions/{w.sessions['app']}").json()
    assert row["status"] == "RUNNING"  # the blind write was refused too
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
