"""The web UI in a real headless browser (Debian's chromium, driven by chromedriver), as a
researcher uses it: sign in, see one's own sessions, see a new one appear live (the event
stream, no reload), session names that are markup shown as text and never run, terminate
one after confirming, sign out; another user signs in and sees none of the first's.
A screenshot is saved and its path printed (docs/ui-sessions.png is one)."""

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from events import SessionDestroyRequested
from events import subjects as subj
from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import SessionsPage
from tests.support.ui_world import UiWorld, ui_world

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

WIDTH, HEIGHT = 1200, 700
IMG = '<img src=x onerror="window.pwned=1">'
SCRIPT = "<script>window.pwned=2</script>"


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-browser")) as world:
        yield world


def _alice(w: UiWorld, driver: "WebDriver", shot: Path) -> None:
    page = SessionsPage(driver, f"{w.url}/")
    page.sign_in(*w.keys["alice"], "alice")
    page.until(lambda d: w.sessions["alice"] in page.rows(), "her session")
    assert w.sessions["bob"] not in page.rows()

    # New sessions show up live, their names as the text they are.
    hostile = [w.create("alice", name=IMG), w.create("alice", name=SCRIPT)]
    page.until(lambda d: set(hostile) <= set(page.rows()), "the new sessions, live")
    names = dict(zip(page.rows(), page.css("#session-table tbody td.name"), strict=True))
    assert [names[s] for s in hostile] == [IMG, SCRIPT]
    assert driver.execute_script("return window.pwned") is None
    assert not page.attr("#session-table img", "src")
    assert not page.attr("#session-table script", "src")
    devices = dict(zip(page.rows(), page.css("td.devices"), strict=True))
    assert devices[hostile[0]] == "0.5 asked"  # no agent runs here: nothing placed
    driver.save_screenshot(str(shot))

    # Terminate, after confirming: her own request on the log.
    before = w.last_seq()
    page.terminate(hostile[0])
    subject, _ = w.wait_for(before, lambda _, e: isinstance(e, SessionDestroyRequested))
    assert subject == subj.request(w.keys["alice"][0], hostile[0])
    page.sign_out()
    assert not driver.find_element("id", "sessions").is_displayed()
    assert driver.get_cookies() == []  # the cookie cleared with the session


def _bob(w: UiWorld, driver: "WebDriver") -> None:
    page = SessionsPage(driver, f"{w.url}/")
    page.sign_in(*w.keys["bob"], "bob")
    page.until(lambda d: page.rows() == [w.sessions["bob"]], "his session alone")
    for filtered in ("all", "ended"):
        driver.find_element("css selector", f'input[name="show"][value="{filtered}"]').click()
        page.until(
            lambda d: set(page.rows()) <= {w.sessions["bob"]}, f"{filtered}: none of alice's"
        )


def test_a_researcher_signs_in_sees_her_sessions_live_and_another_sees_none(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    shot = tmp_path / "ui-sessions.png"
    for who in ("alice", "bob"):
        driver = chrome(tmp_path / who, WIDTH, HEIGHT)
        try:
            if who == "alice":
                _alice(w, driver, shot)
            else:
                _bob(w, driver)
        finally:
            driver.quit()
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
