"""The web UI's terminal in a real headless browser (Debian's chromium) on a real Docker
engine, as a researcher uses it: sign in, open her running session's page, open the
terminal, type a command and read its answer in the terminal; the window resized, the
shell told the new size; a reconnect, a new shell; not one refusal of the page's
Content-Security-Policy all along (xterm.js's styles go through constructed style sheets,
``services/api/ui/terminal.js``). Another user cannot open it: the ticket is refused and
the page shows no terminal. The opening and closing of each terminal, and of the page's
follow of the output, are on the log in the researcher's name. A screenshot is saved and
its path printed (docs/ui-terminal.png is one)."""

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events import SessionChannelClosed, SessionChannelOpened, SessionRunning
from services.adapters.docker_runtime import DockerRuntime
from services.api.ui import CSP
from tests.support.browser import browser_or_skip, browsing
from tests.support.cli_stack import remove_agent_containers
from tests.support.docker_env import require_docker
from tests.support.ui_pages import SessionPage
from tests.support.ui_world import UiWorld, ui_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]

WIDTH, HEIGHT = 1100, 800
NARROW = 700


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    """Alice's, Bob's and Mallory's sessions RUNNING (busybox, a terminal each) on an agent
    of its own name, on Docker."""
    require_docker()
    browser_or_skip()
    agent = f"web-{uuid.uuid4().hex[:8]}"
    services = ("intake", "registrar", "quota", "scheduler", f"agent:{agent}")
    try:
        with ui_world(tmp_path_factory.mktemp("ui-terminal"), services, DockerRuntime) as world:
            for sid in world.sessions.values():
                world.wait_until(sid, SessionRunning)
            yield world
    finally:
        remove_agent_containers(agent)


def _size(page: SessionPage, n: int) -> tuple[int, int]:
    """The shell's idea of its terminal's size (rows, columns), asked with ``stty``."""
    page.type(f"echo size-{n}-$(stty size | tr ' ' x)\n")
    found: list[tuple[int, int]] = []

    def answered(_: object) -> bool:
        found[:] = [(int(r), int(c)) for r, c in re.findall(rf"size-{n}-(\d+)x(\d+)", page.text())]
        return bool(found)

    page.until(answered, f"stty's answer {n}")
    return found[-1]


def _closing(opened: SessionChannelOpened) -> Callable[[str, object], bool]:
    """Whether a record is the closing of the channel ``opened``."""
    return lambda _, e: isinstance(e, SessionChannelClosed) and e.causation_id == opened.id


def _alice(w: UiWorld, page: SessionPage, shot: Path) -> None:
    sid = w.sessions["alice"]
    page.sign_in(*w.keys["alice"], "alice")
    page.watch_csp()
    page.open(sid)
    page.until(lambda d: page.css("#logs-status") == ["live"], "its output followed")
    page.open_terminal()
    page.until(lambda d: page.at_prompt(), "the shell's prompt")
    page.type("echo hello-$((6*7))\n")
    page.until(lambda d: "hello-42" in page.text(), "hello-42 in the terminal")
    rows, cols = _size(page, 1)
    assert rows == len(page.screen()), (rows, page.screen())  # xterm's rows, the shell's
    page.d.save_screenshot(str(shot))

    # A narrower window: the terminal fits it again and tells the shell. The size and the
    # keys travel apart: the shell is asked again until it answers with the new size.
    page.d.set_window_size(NARROW, HEIGHT)
    asked = iter(range(2, 100))
    page.until(lambda d: _size(page, next(asked))[1] < cols, "fewer columns once narrower")
    assert _size(page, 100)[0] == len(page.screen())
    page.type("echo still-$((6*7))\n")
    page.until(lambda d: "still-42" in page.text(), "still-42 in the terminal")

    # Reconnect: a new shell in the same terminal (the screen cleared first, so that its
    # prompt is the second one shown).
    page.type("clear\n")
    page.until(lambda d: page.text().count("#") == 1, "a cleared screen")
    page.open_terminal()
    page.until(lambda d: page.text().count("#") == 2, "the new shell's prompt")
    page.type("echo again-$((6*7))\n")
    page.until(lambda d: "again-42" in page.text(), "again-42 in the terminal")
    assert page.csp_refusals() == []


def _bob(w: UiWorld, page: SessionPage) -> None:
    sid = w.sessions["alice"]
    page.sign_in(*w.keys["bob"], "bob")
    page.watch_csp()
    page.d.execute_script("location.hash = arguments[0]", f"#/sessions/{sid}")
    page.until(lambda d: page.css("#session-problem") != [""], "a problem shown")
    assert page.css("#session-details dd") == []
    assert not page.d.find_element("id", "terminal-open").is_enabled()
    assert page.d.find_elements("css selector", "#terminal .xterm") == []
    # Asked anyway, from his page with his own CSRF token: not even said to exist.
    status = page.d.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const { csrf } = await (await fetch("/ui/session")).json();
        const r = await fetch(`/ui/sessions/${arguments[0]}/shell-ticket`,
                              { method: "POST", headers: { "X-CSRF-Token": csrf } });
        done(r.status);
        """,
        sid,
    )
    assert status == 404
    assert page.csp_refusals() == []


def test_a_researcher_types_in_her_sessions_terminal_and_another_cannot_open_it(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    assert "'unsafe-inline'" not in CSP  # the policy the terminal runs under
    shot = tmp_path / "ui-terminal.png"
    before = w.last_seq()
    with browsing(tmp_path / "alice", WIDTH, HEIGHT) as driver:
        _alice(w, SessionPage(driver, f"{w.url}/"), shot)
    with browsing(tmp_path / "bob", WIDTH, HEIGHT) as driver:
        _bob(w, SessionPage(driver, f"{w.url}/"))

    # Two terminals of Alice's, and her page's follow of the output, each opened and
    # closed on the log in her name (the follow once her page went); none of Bob's.
    opened = [e for _, e in w.stored_since(before) if isinstance(e, SessionChannelOpened)]
    assert sorted(e.kind for e in opened) == ["logs", "shell", "shell"], opened
    alice = (w.keys["alice"][0], w.sessions["alice"])
    assert {(e.requester, e.session_id) for e in opened} == {alice}
    for o in opened:
        _, closed = w.wait_for(before, _closing(o))
        assert isinstance(closed, SessionChannelClosed)
        assert (closed.requester, closed.session_id) == alice
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
