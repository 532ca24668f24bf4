"""The Folders page in a real headless browser, as a researcher uses it: a folder name the
registrar refuses is refused inline with its reason, shown as text; a folder created;
a file uploaded in chunks with its progress shown, after an earlier upload of it was cut
(the page offers to resume it, and sends only the rest), and one whose network is cut
mid-upload goes on by itself from what the server holds; the file listed, downloaded by
its link (the same bytes), a hostile file name shown as text; the folder shared
read-only with bob, who then sees it and its files and no upload form. A screenshot is
saved and its path printed (docs/ui-folders.png is one)."""

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import FoldersPage
from tests.support.ui_world import FOLDERS, UiWorld, ui_world

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

WIDTH, HEIGHT = 1200, 900
CHUNK = 4 << 20  # upload.js's
HOSTILE = '<img src=x onerror="window.pwned=1">.html'


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-folders-browser"), FOLDERS, vfolders=True) as world:
        yield world


def _cut_upload(w: UiWorld, folder: str, name: str, body: bytes) -> None:
    """What a page closed after its first chunk leaves (the server holds that chunk), and
    a file whose name and body are markup."""
    http, csrf = w.sign_in("alice")
    headers = {"Origin": w.url, "X-CSRF-Token": csrf}
    params = {"offset": 0, "total": len(body)}
    url = f"/v1/vfolders/{folder}/files/{name}"
    r = http.put(url, content=body[:CHUNK], params=params, headers=headers)
    assert r.status_code == 200 and r.json()["partial"] == CHUNK, r.text
    page = b"<html><script>window.pwned=2</script></html>"
    r = http.put(
        f"/v1/vfolders/{folder}/files/{HOSTILE}",
        content=page,
        params={"total": len(page)},
        headers=headers,
    )
    assert r.status_code == 200, r.text


def _downloaded(where: Path, name: str, size: int) -> bytes | None:
    done = where / name
    return done.read_bytes() if done.exists() and done.stat().st_size == size else None


def _alice(w: UiWorld, driver: "WebDriver", tmp: Path, downloads: Path) -> None:
    from selenium.webdriver.common.by import By

    page = FoldersPage(driver, f"{w.url}/")
    page.sign_in(*w.keys["alice"], "alice")
    page.watch_csp()
    page.open_list()
    said = page.create(HOSTILE)
    assert said.startswith("refused (invalid): folder name '<img src=x"), said
    assert page.create("data") == "folder data created"
    page.until(lambda d: "data" in page.folders(), "folder data listed")
    page.open("data")

    body = hashlib.sha256(b"weights").digest() * ((9 << 20) // 32 + 100)
    local = tmp / "weights.bin"
    local.write_bytes(body)
    _cut_upload(w, page.folders()["data"], "weights.bin", body)
    driver.find_element(By.ID, "upload-file").send_keys(str(local))
    driver.find_element(By.ID, "upload-go").click()
    page.until(lambda d: d.find_element(By.ID, "upload-resume").is_displayed(), "asked to resume")
    assert "stopped after 4.0 MiB" in page.css("#upload-status")[0]
    driver.find_element(By.ID, "upload-resume").click()
    page.until(lambda d: "uploaded" in page.css("#upload-status")[0], "uploaded")
    status = page.css("#upload-status")[0]
    assert status == "weights.bin: 9.0 MiB uploaded, resumed after 4.0 MiB", status
    # Sent from where the server stood, in chunks: 4 MiB, then the rest.
    assert page.attr("#upload-status", "data-chunks") == [f"{CHUNK},{2 * CHUNK}"]
    bar = driver.find_element(By.ID, "upload-progress")
    assert bar.get_attribute("value") == bar.get_attribute("max") == str(len(body))
    page.until(lambda d: "weights.bin" in page.files(), "the file listed")
    assert HOSTILE in page.css("#file-table td.name")
    assert driver.execute_script("return window.pwned") is None
    assert not page.attr("#file-table img", "src")

    driver.find_element(By.CSS_SELECTOR, 'tr[data-name="weights.bin"] a.download').click()
    page.until(lambda d: _downloaded(downloads, "weights.bin", len(body)), "the download")
    assert _downloaded(downloads, "weights.bin", len(body)) == body
    assert page.share("bob", "ro") == "shared with user bob (ro)"
    assert page.csp_refusals() == []  # not one refusal of the Content-Security-Policy


# upload.js's own ``send``, in the page, with the network cut once: the second chunk's
# request fails before a byte of it goes (as a dropped connection). The page is to ask
# the server where the upload stands and go on from there.
_CUT_ONCE = """
const [folder, done] = arguments;
(async () => {
  const { send, CHUNK } = await import("/ui/assets/upload.js");
  const csrf = (await (await fetch("/ui/session")).json()).csrf;
  const file = new File([new Uint8Array(CHUNK + 1000).map((_, i) => i % 251)], "cut.bin");
  const open = XMLHttpRequest.prototype.open;
  const realSend = XMLHttpRequest.prototype.send;
  let cuts = 0;
  XMLHttpRequest.prototype.open = function (method, url) {
    this.target = url;
    return open.call(this, method, url);
  };
  XMLHttpRequest.prototype.send = function (body) {
    if (this.target.includes(`offset=${CHUNK}&`) && !cuts++) {
      setTimeout(() => this.onerror(), 0);
      return;
    }
    return realSend.call(this, body);
  };
  const starts = [];
  const answer = await send({ folder, path: "cut.bin", file, offset: 0, replace: false, csrf,
    progress: (sent, start) => { if (start !== null) starts.push(start); } });
  XMLHttpRequest.prototype.open = open;
  XMLHttpRequest.prototype.send = realSend;
  return { size: answer.size, starts, cuts };
})().then(done, (e) => done({ error: String(e) }));
"""


def _cut_mid_upload(w: UiWorld, driver: "WebDriver", folder: str) -> None:
    got = driver.execute_async_script(_CUT_ONCE, folder)
    # The second chunk tried again from where the server stood: nothing sent twice.
    assert got == {"size": CHUNK + 1000, "starts": [0, CHUNK, CHUNK], "cuts": 2}, got
    http, _ = w.sign_in("alice")
    r = http.get(f"/v1/vfolders/{folder}/files/cut.bin")
    assert r.content == bytes(i % 251 for i in range(CHUNK + 1000))


def _bob(w: UiWorld, driver: "WebDriver") -> None:
    from selenium.webdriver.common.by import By

    page = FoldersPage(driver, f"{w.url}/")
    page.sign_in(*w.keys["bob"], "bob")
    page.open_list()
    assert list(page.folders()) == ["data"]
    assert page.css("#folder-table td.access") == ["ro"]
    page.open("data")
    assert set(page.files()) == {"weights.bin", "cut.bin", HOSTILE}
    assert not driver.find_element(By.ID, "upload-form").is_displayed()  # read-only
    assert not driver.find_elements(By.CSS_SELECTOR, "#file-table button.remove")


def test_a_researcher_creates_uploads_downloads_and_shares_a_folder(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    shot = tmp_path / "ui-folders.png"
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = chrome(tmp_path / "alice", WIDTH, HEIGHT, downloads)
    try:
        _alice(w, driver, tmp_path, downloads)
        driver.save_screenshot(str(shot))
        driver.set_script_timeout(60)
        _cut_mid_upload(w, driver, FoldersPage(driver, w.url).folders()["data"])
    finally:
        driver.quit()
    driver = chrome(tmp_path / "bob", WIDTH, HEIGHT)
    try:
        _bob(w, driver)
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
