"""The launch form in a real headless browser, as a researcher uses it, on a node whose
one GPU is split into 2 fGPU (a mock GPU; the default group's quantum 0.1): sign in, move
the fGPU slider to 0.5, launch, and see the session RUNNING with ``gpu0 0.5`` in the
list; what the policies leave is shown; its agent's usage samples show in its row and
on its page, live: the memory, and how busy it kept its device between two samples. A
screenshot is saved and its path printed (docs/ui-launch.png is one)."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from events import GroupSettings, SessionRequested, UpdateGroup
from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import SessionsPage
from tests.support.ui_world import CLUSTER, UiWorld, ui_world

WIDTH, HEIGHT = 1200, 900
SECOND = timedelta(seconds=1)
HALF_S = 500_000_000  # nanoseconds of GPU time


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-launch-browser"), CLUSTER) as world:
        world.apply(UpdateGroup(group="default", settings=GroupSettings(fgpu_quantum=10)))
        yield world


def test_a_researcher_launches_half_a_gpu_with_the_slider_and_sees_it_running(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    shot = tmp_path / "ui-launch.png"
    driver = chrome(tmp_path / "alice", WIDTH, HEIGHT)
    try:
        page = SessionsPage(driver, f"{w.url}/")
        page.sign_in(*w.keys["alice"], "alice")
        page.until(lambda d: d.execute_script("return document.body.dataset.launchReady"), "form")
        assert page.css("#launch-fgpu-step") == ["steps of 0.1"]
        free = page.css("#launch-free")[0]
        assert "largest share on a device 0.5 fGPU (a device is 2)" in free, free
        levels = page.attr("#launch-policies tbody tr", "data-level")
        assert levels == ["keypair", "user", "project", "domain"]

        slider = driver.find_element(By.ID, "launch-fgpu-range")
        slider.send_keys(Keys.HOME)
        for _ in range(5):  # five steps of the administrator's quantum
            slider.send_keys(Keys.ARROW_RIGHT)
        number = driver.find_element(By.ID, "launch-fgpu")
        assert number.get_attribute("value") == "0.5"
        before = w.last_seq()
        driver.find_element(By.ID, "launch-go").click()
        page.until(lambda d: page.css("#launch-result")[0].startswith("launched"), "launched")
        [sid] = page.attr("#launch-result", "data-sessions")
        _, asked = w.wait_for(before, lambda _, e: isinstance(e, SessionRequested))
        assert isinstance(asked, SessionRequested)
        assert (asked.session_id, asked.owner, asked.slots.fgpu) == (sid, w.keys["alice"][0], 50)

        def row(session_id: str) -> str | None:
            """What the list shows of ``session_id``'s devices."""
            devices = dict(zip(page.rows(), page.css("#session-table td.devices"), strict=True))
            return devices.get(session_id)

        def running(_: object) -> bool:
            status = dict(zip(page.rows(), page.css("#session-table td.status"), strict=True))
            return status.get(sid) == "RUNNING" and row(sid) == "gpu0 0.5"

        page.until(running, "her session RUNNING with gpu0 0.5")

        # Its agent's usage samples change the row as they come, the page not reloaded:
        # the memory at once, how busy from the second on (the charged time between two).
        driver.execute_script("window.notReloaded = true")
        t0 = datetime.now(UTC)
        w.sample(sid, used=3 << 29, limit=8 << 30, charged_ns=0, at=t0)
        page.until(lambda d: row(sid) == "gpu0 0.5 · 1.5 / 8.0 GiB", "the row's memory")
        w.sample(sid, used=3 << 29, limit=8 << 30, charged_ns=HALF_S, at=t0 + 2 * SECOND)
        shown = "gpu0 0.5 · 1.5 / 8.0 GiB · busy 25 %"  # 0.5 s of the 2 s between
        page.until(lambda d: row(sid) == shown, f"the row saying {shown}")
        assert driver.execute_script("return window.notReloaded") is True
        driver.save_screenshot(str(shot))

        # Its page shows the same (the read API's rate), and the next sample as it comes.
        driver.execute_script("location.hash = arguments[0]", f"#/sessions/{sid}")
        field = '#session-details dd[data-field="fGPU"]'
        page.until(lambda d: page.css(field) == [shown], f"its page saying {shown}")
        at = t0 + 4 * SECOND
        w.sample(sid, used=1 << 31, limit=8 << 30, charged_ns=HALF_S + 1_200_000_000, at=at)
        later = "gpu0 0.5 · 2.0 / 8.0 GiB · busy 60 %"  # 1.2 s of the next 2 s
        page.until(lambda d: page.css(field) == [later], f"its page saying {later}")
        assert driver.execute_script("return window.notReloaded") is True
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
