"""One session in the web UI, on a cluster whose sessions run (dummy containers): its
output followed as its user, a terminal opened over a WebSocket with a one-time ticket,
and every way in for anyone else refused: no cookie, another origin, no ticket, another's
ticket, a ticket used twice, another user's session. The terminal's request reaches the
agent as the user's own, and its opening is on the log in the user's name."""

import json
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import websocket

from events import (
    SessionChannelClosed,
    SessionChannelOpened,
    SessionRunning,
    SessionTerminated,
)
from services.api import ui
from services.api.browser import COOKIE, ShellRefused
from services.domain.channels import OUTPUT_ENDED
from services.wiring.acting import acting_on
from tests.support.ui_world import RUNNING_SERVICES, SLIVER, UiWorld, ui_world

SAYS = ("sh", "-c", "echo hello-from-the-session; sleep infinity")
SECOND = timedelta(seconds=1)


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-session"), services=RUNNING_SERVICES) as world:
        yield world


@pytest.fixture(scope="module")
def running(w: UiWorld) -> str:
    """Alice's session, RUNNING, that printed a line."""
    sid = w.create("alice", name="talks", command=SAYS, slots=SLIVER)
    w.wait_until(sid, SessionRunning)
    return sid


def _events(http: httpx.Client, path: str, until: str) -> list[tuple[str, dict[str, object]]]:
    """The server-sent events of ``path`` up to the first of type ``until``."""
    found: list[tuple[str, dict[str, object]]] = []
    kind = ""
    with http.stream("GET", path) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: ") :]
            elif line.startswith("data: "):
                found.append((kind, json.loads(line[len("data: ") :])))
                if kind == until:
                    return found
    raise AssertionError(f"the stream ended before {until!r}: {found}")


def _text(found: list[tuple[str, dict[str, object]]]) -> str:
    """The output the page shows: the pieces since the last reset."""
    kinds = [k for k, _ in found]
    start = len(kinds) - kinds[::-1].index("reset") if "reset" in kinds else 0
    return "".join(str(d["text"]) for k, d in found[start:] if k == "output")


def test_the_logs_are_the_users_own_sessions_output(w: UiWorld, running: str) -> None:
    alice, _ = w.sign_in("alice")
    found = _events(alice, f"/ui/sessions/{running}/logs", until="output")
    assert [k for k, _ in found] == ["reset", "output"], found
    assert _text(found) == "hello-from-the-session\n", found
    bob, _ = w.sign_in("bob")
    assert bob.get(f"/ui/sessions/{running}/logs").status_code == 404
    assert httpx.get(f"{w.url}/ui/sessions/{running}/logs").status_code == 401


def test_the_logs_follow_the_output_as_it_comes_and_end_with_the_session(w: UiWorld) -> None:
    """One stream, opened before the second line is written: it brings that line when
    it comes (no reload, no polling), then ends once the container has ended."""
    says = ("sh", "-c", "echo first; sleep 1; echo second; sleep 1; exit 3")
    sid = w.create("alice", name="follows", command=says, slots=SLIVER)
    w.wait_until(sid, SessionRunning)
    alice, _ = w.sign_in("alice")
    found = _events(alice, f"/ui/sessions/{sid}/logs", until="end")
    assert _text(found) == "first\nsecond\n", found
    assert [k for k, _ in found].count("reset") == 1, found
    assert found[-1][1]["reason"] == OUTPUT_ENDED, found
    opened = [e for _, e in w.stored_since(0) if isinstance(e, SessionChannelOpened)]
    assert any(e.session_id == sid and e.kind == "logs" for e in opened), opened
    story = [line["text"] for line in alice.get(f"/v1/sessions/{sid}/history").json()["story"]]
    assert f"{w.keys['alice'][0]} followed its output" in story, story


def test_the_agent_refuses_a_follow_asked_in_another_users_name(w: UiWorld, running: str) -> None:
    """Bob asks alice's agent himself, on his own connection (as the UI would for him,
    had the server not already answered 404): the agent judges his key and refuses."""
    bob_key, bob_secret = w.keys["bob"]
    [agent] = {e.agent_id for _, e in w.stored_since(0) if isinstance(e, SessionRunning)}

    async def follow() -> str:
        acting = await acting_on(w.c.url)(bob_key, bob_secret)
        try:
            with pytest.raises(ShellRefused) as refused:
                await acting.follow(agent, running, 10, _nothing)
        finally:
            await acting.aclose()
        return str(refused.value)

    assert w.portal.call(follow) == f"{bob_key} may not see session {running}"


async def _nothing(data: bytes) -> None:
    raise AssertionError(f"output reached another user: {data!r}")


def test_gpu_usage_is_shown_to_the_sessions_viewers_alone(w: UiWorld, running: str) -> None:
    """A usage sample of alice's session: in her session's read shape and on her event
    stream (what the UI follows), in neither of bob's."""
    before = w.last_seq()
    t0 = datetime.now(UTC)
    w.sample(running, used=1 << 29, limit=4 << 30, charged_ns=0, at=t0)
    alice, _ = w.sign_in("alice")
    bob, _ = w.sign_in("bob")
    [memory] = alice.get(f"/v1/sessions/{running}").json()["gpu_memory"]
    assert (memory["charged_ns"], memory["busy"]) == (0, None)  # one sample: no rate yet
    # The next, 4 s of the device's time later: busy 30 % of the 4 s between them.
    w.sample(running, used=1 << 30, limit=4 << 30, charged_ns=1_200_000_000, at=t0 + 4 * SECOND)
    [memory] = alice.get(f"/v1/sessions/{running}").json()["gpu_memory"]
    assert (memory["gpu"], memory["used"], memory["limit"]) == (0, 1 << 30, 4 << 30)
    assert (memory["charged_ns"], memory["busy"]) == (1_200_000_000, 0.3)
    listed = {s["id"]: s for s in alice.get("/v1/sessions").json()["sessions"]}
    assert listed[running]["gpu_memory"] == [memory]
    assert bob.get(f"/v1/sessions/{running}").status_code == 404
    assert all(s["gpu_memory"] == [] for s in bob.get("/v1/sessions").json()["sessions"])

    def usage_seen(http: httpx.Client) -> list[str]:
        events = http.get("/v1/events", params={"after": before}).json()["events"]
        return [e["session_id"] for e in events if e["type"] == "gpu.usage-sampled.v1"]

    assert usage_seen(alice) == [running, running]
    assert usage_seen(bob) == []


def test_an_ended_sessions_logs_end(w: UiWorld) -> None:
    sid = w.create("alice", name="ends", command=("sh", "-c", "echo bye"), slots=SLIVER)
    w.wait_until(sid, SessionTerminated)
    alice, _ = w.sign_in("alice")
    found = _events(alice, f"/ui/sessions/{sid}/logs", until="end")
    assert [k for k, _ in found] == ["reset", "output", "end"], found
    assert _text(found) == "bye\n" and found[-1][1]["status"] == "TERMINATED", found


def _ticket(w: UiWorld, http: httpx.Client, csrf: str, sid: str) -> httpx.Response:
    return http.post(
        f"/ui/sessions/{sid}/shell-ticket", headers={"Origin": w.url, "X-CSRF-Token": csrf}
    )


def _socket(
    w: UiWorld, sid: str, ticket: str, cookie: str | None, origin: str | None
) -> websocket.WebSocket:
    """A WebSocket to the terminal of ``sid``; raises WebSocketBadStatusException if the
    handshake is refused."""
    url = w.url.replace("http://", "ws://") + f"/ui/sessions/{sid}/shell?ticket={ticket}"
    options: dict[str, object] = {"timeout": 30, "suppress_origin": origin is None}
    if origin is not None:
        options["origin"] = origin
    if cookie is not None:
        options["cookie"] = f"{COOKIE}={cookie}"
    ws = websocket.WebSocket()
    try:
        ws.connect(url, **options)
    except BaseException:
        ws.shutdown()  # a refused handshake leaves the socket open (close() skips it)
        raise
    return ws


def _refused(w: UiWorld, sid: str, ticket: str, cookie: str | None, origin: str | None) -> int:
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        _socket(w, sid, ticket, cookie, origin).close()
    return refused.value.status_code


def _closing(ws: websocket.WebSocket) -> tuple[int, str]:
    """The close frame's code and reason (what comes before it is skipped); the socket
    then closed."""
    try:
        while True:
            opcode, data = ws.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                (code,) = struct.unpack("!H", data[:2])
                return code, data[2:].decode()
    finally:
        ws.shutdown()


def test_a_ticket_is_a_csrf_checked_write_for_a_session_the_user_sees(
    w: UiWorld, running: str
) -> None:
    alice, csrf = w.sign_in("alice")
    assert (
        alice.post(f"/ui/sessions/{running}/shell-ticket", headers={"Origin": w.url}).status_code
        == 403
    )
    evil = {"Origin": "http://evil.example", "X-CSRF-Token": csrf}
    assert alice.post(f"/ui/sessions/{running}/shell-ticket", headers=evil).status_code == 403
    bob, bob_csrf = w.sign_in("bob")
    assert _ticket(w, bob, bob_csrf, running).status_code == 404  # not even said to exist
    r = _ticket(w, alice, csrf, running)
    assert r.status_code == 200 and len(r.json()["ticket"]) >= 40, r.text


def test_a_terminal_opens_only_from_this_origin_with_its_own_one_time_ticket(
    w: UiWorld, running: str
) -> None:
    alice, csrf = w.sign_in("alice")
    cookie = alice.cookies[COOKIE]
    bob, bob_csrf = w.sign_in("bob")
    bobs_own = _ticket(w, bob, bob_csrf, w.sessions["bob"]).json()["ticket"]

    def ticket() -> str:
        answer: str = _ticket(w, alice, csrf, running).json()["ticket"]
        return answer

    refusals = {
        "no cookie": _refused(w, running, ticket(), None, w.url),
        "a forged cookie": _refused(w, running, ticket(), "made-up", w.url),
        "another origin": _refused(w, running, ticket(), cookie, "http://evil.example"),
        "no origin": _refused(w, running, ticket(), cookie, None),
        "no ticket": _refused(w, running, "", cookie, w.url),
        "a made-up ticket": _refused(w, running, "x" * 43, cookie, w.url),
        "another's ticket": _refused(w, running, bobs_own, cookie, w.url),
        "its ticket with another's cookie": _refused(
            w, running, ticket(), bob.cookies[COOKIE], w.url
        ),
    }
    assert refusals == dict.fromkeys(refusals, 403), refusals
    bobs_for_alice = _ticket(w, bob, bob_csrf, w.sessions["bob"]).json()["ticket"]
    assert _refused(w, running, bobs_for_alice, bob.cookies[COOKIE], w.url) == 403

    # Alice's own: it opens, and is the user's request to the agent, on the log in her
    # name (the dummy containers run no terminal: the agent says so and closes it).
    before = w.last_seq()
    once = ticket()
    ws = _socket(w, running, once, cookie, w.url)
    code, reason = _closing(ws)
    assert code == 4000 and "opens no terminal" in reason, (code, reason)
    _, opened = w.wait_for(before, lambda _, e: isinstance(e, SessionChannelOpened))
    assert isinstance(opened, SessionChannelOpened)
    assert (opened.requester, opened.session_id) == (w.keys["alice"][0], running)
    assert opened.kind == "shell"
    _, closed = w.wait_for(before, lambda _, e: isinstance(e, SessionChannelClosed))
    assert isinstance(closed, SessionChannelClosed) and closed.requester == w.keys["alice"][0]
    # Used once: the same ticket again is refused.
    assert _refused(w, running, once, cookie, w.url) == 403


def test_a_terminal_of_a_session_not_running_says_so(w: UiWorld) -> None:
    sid = w.create("alice", name="ended", command=("sh", "-c", "echo bye"), slots=SLIVER)
    w.wait_until(sid, SessionTerminated)
    alice, csrf = w.sign_in("alice")
    ws = _socket(
        w, sid, _ticket(w, alice, csrf, sid).json()["ticket"], alice.cookies[COOKIE], w.url
    )
    code, reason = _closing(ws)
    assert code == 4000 and "not running" in reason, (code, reason)


def test_only_the_listed_files_are_served(w: UiWorld) -> None:
    for name in ui.ASSETS:
        assert httpx.get(f"{w.url}/ui/assets/{name}").status_code == 200, name
    for name in ("vendor/LICENSE.xterm", "vendor/MANIFEST.json", "ui.py", "vendor/xterm.mjs.map"):
        assert httpx.get(f"{w.url}/ui/assets/{name}").status_code == 404, name
