"""Headless Chromium from Debian, driven by chromedriver through selenium, for the tests
of the pages the read API serves (the console, the web UI).

Nothing is downloaded at test time: ``scripts/test-deps`` installs chromium and
chromium-driver. Without them a test is skipped, unless FGPU_REQUIRE_BROWSER=1.
"""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = ["CHROMEDRIVER", "CHROMIUM", "browser_or_skip", "browsing", "chrome"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def browser_or_skip() -> None:
    """Skip the test without a browser (fail it with FGPU_REQUIRE_BROWSER=1)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if not missing:
        return
    why = f"no {' or '.join(missing)}: scripts/test-deps installs chromium and chromium-driver"
    if os.environ.get("FGPU_REQUIRE_BROWSER") == "1":
        pytest.fail(why + " (FGPU_REQUIRE_BROWSER=1)")
    pytest.skip(why + " (set FGPU_REQUIRE_BROWSER=1 to make this a failure)")


def chrome(tmp: Path, width: int, height: int, downloads: Path | None = None) -> "WebDriver":
    """A headless Chromium of its own profile under ``tmp``, its window ``width`` x
    ``height``; what its pages' consoles say is kept for ``driver.get_log("browser")`` (a
    Content-Security-Policy's refusals among it); what it downloads goes to
    ``downloads``, unasked. Set SE_OFFLINE=true first: selenium must never fetch a
    driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp / 'chromium'}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    if downloads is not None:
        prefs = {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
        }
        options.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    if downloads is not None:  # headless, a download is refused unless allowed so
        allow = {"behavior": "allow", "downloadPath": str(downloads)}
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", allow)
    return driver


@contextmanager
def browsing(tmp: Path, width: int, height: int) -> Iterator["WebDriver"]:
    """``chrome(tmp, width, height)`` for the block, then closed."""
    driver = chrome(tmp, width, height)
    try:
        yield driver
    finally:
        driver.quit()
