"""The audit console in a real headless browser (Debian's chromium, driven by chromedriver).

The README scenario runs on real actors over a real log; the console, served by the read
API, must show the cluster as it was when two sessions ran and one waited (the GPU's bar
split between the two), then as it is now, tell the waiting session's story, and filter
the timeline. A screenshot is saved and its path printed.

Nothing is downloaded at test time: ``scripts/test-deps`` installs chromium and
chromium-driver. Without them the test is skipped, unless FGPU_REQUIRE_BROWSER=1.
"""

import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import anyio
import pytest

from events import (
    AdminCommand,
    AnyEvent,
    CreateEndpoint,
    CreateKeypair,
    CreateUser,
    PipelineSpec,
    PipelineTask,
    RevisionSpec,
    Slots,
)
from services.actors.bootstrap import bootstrap
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.api import ReadApi, console, serve_read_api
from services.client import Client
from services.domain.access.keys import hash_secret, new_access_key, new_secret
from services.wiring.parts import run_serving
from tests.support.browser import browser_or_skip, chrome
from tests.support.scenario import Scenario, run_scenario

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.anyio

WIDTH, HEIGHT = 1400, 1100
_SMALL = Slots(cpu=100, mem=1 << 26)
_PIPELINE = PipelineSpec(
    name="demo",
    tasks=(
        PipelineTask(name="prepare", image="x:1", command=("true",), slots=_SMALL),
        PipelineTask(
            name="train", image="x:1", command=("true",), slots=_SMALL, dependencies=("prepare",)
        ),
    ),
)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _chrome(tmp: Path) -> "WebDriver":
    return chrome(tmp, WIDTH, HEIGHT)


def _drive(console: str, sc: Scenario, tmp: Path) -> Path:
    """What a person does in the console, checked on the DOM; the screenshot's path."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _chrome(tmp)
    # The page re-renders as the log moves on: an element read mid-render is read again.
    wait = WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,))

    def until(check: "Callable[[WebDriver], object]", what: str) -> None:
        wait.until(check, message=what)

    def texts(selector: str, attribute: str | None = None) -> list[str]:
        for _ in range(10):  # a re-render between finding and reading: find them again
            try:
                found = driver.find_elements(By.CSS_SELECTOR, selector)
                return [(e.get_attribute(attribute) or "") if attribute else e.text for e in found]
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"{selector} kept changing under the test")

    busy = {i: v for i, v in sc.final.sessions.items() if i in sc.ids}
    then_running = sorted(i for i in sc.ids if i != sc.waited)
    try:
        driver.get(f"{console}?seq={sc.busy_seq}&session={sc.waited}")
        until(lambda d: d.execute_script("return document.body.dataset.ready"), "page ready")

        # The cluster then: two sessions share the GPU, half of it each; one waits.
        summary = driver.find_element(By.ID, "state-summary")
        assert summary.get_attribute("data-seq") == str(sc.busy_seq)
        running = '.status-group[data-status="RUNNING"] .session-chip'
        assert sorted(texts(running, "data-session")) == then_running
        pending = '.status-group[data-status="PENDING"] .session-chip'
        assert texts(pending, "data-session") == [sc.waited]
        bar = '.gpu-bar[data-agent="a1"][data-gpu="0"] .share'
        assert sorted(texts(bar, "data-session")) == then_running
        assert texts(bar, "data-fgpu") == ["1", "1"]
        widths = [e.size["width"] for e in driver.find_elements(By.CSS_SELECTOR, bar)]
        whole = driver.find_element(By.CSS_SELECTOR, '.gpu-bar[data-agent="a1"]').size["width"]
        assert all(abs(w - whole / 2) <= 3 for w in widths), (widths, whole)

        # Its story: who asked, that it waited and why, where it ran.
        until(lambda d: texts("#story li"), "the story")
        story = "\n".join(texts("#story li"))
        assert "alice asked for 1 fGPU" in story
        assert f"it waits: {busy[sc.waited].waiting}" in story
        assert "placed on a1 (gpu0 1 fGPU) after waiting" in story
        assert sc.waited in texts("#story .summary")[0]
        shot = tmp / "console.png"
        driver.save_screenshot(str(shot))

        # Now: the waiting one runs in the victim's place; one ended, one was rejected.
        driver.find_element(By.ID, "now").click()
        until(
            lambda d: summary.get_attribute("data-seq") != str(sc.busy_seq),
            "the cluster now",
        )
        now_running = sorted(i for i in sc.ids if i != sc.victim)
        assert sorted(texts(running, "data-session")) == now_running
        assert sorted(texts(bar, "data-session")) == now_running
        ended = texts(
            '.status-group[data-status="TERMINATED"] h4, .status-group[data-status="REJECTED"] h4'
        )
        assert ended == ["TERMINATED (1)", "REJECTED (1)"]

        # The timeline, filtered to one session.
        driver.find_element(By.ID, "f-session").send_keys(sc.victim)
        driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
        until(
            lambda d: set(texts("#timeline tbody td.sid")) == {sc.victim},
            "the timeline of one session",
        )
        kinds = texts("#timeline tbody tr", "data-type")
        assert kinds[0] == "session.requested.v1" and "session.terminated.v1" in kinds
        driver.save_screenshot(str(tmp / "console-now.png"))
        return shot
    finally:
        driver.quit()


async def test_the_console_shows_the_past_the_present_and_a_story(
    log: JetStreamLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    sc = await run_scenario(log)
    async with anyio.create_task_group() as tg:
        api: ReadApi = await tg.start(serve_read_api, log, tmp_path / "p.duckdb")
        with anyio.fail_after(90):
            shot = await anyio.to_thread.run_sync(_drive, api.console, sc, tmp_path)
        tg.cancel_scope.cancel()
    width, height = _png_size(shot)
    assert width == WIDTH and height > 600 and shot.stat().st_size > 20_000
    print(f"\nconsole screenshot: {shot} ({width}x{height}); now: {tmp_path / 'console-now.png'}")


def _sign_in(console: str, alice: tuple[str, str], mine: str, run: str, tmp: Path) -> None:
    """A person signs in (once with a wrong secret) and sees its own session only, its
    own pipeline run only, whose DAG it draws: tasks as boxes, states as colours, and its
    own endpoint only."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _chrome(tmp)
    wait = WebDriverWait(driver, 20)
    try:
        driver.get(console)
        wait.until(lambda d: d.find_element(By.ID, "sign-in").get_attribute("open") is not None)
        assert not driver.execute_script("return document.body.dataset.ready")
        key, secret = alice
        driver.find_element(By.ID, "sign-in-key").send_keys(key)
        driver.find_element(By.ID, "sign-in-secret").send_keys(secret + "x")
        driver.find_element(By.ID, "sign-in-go").click()
        error = driver.find_element(By.ID, "sign-in-error")
        wait.until(lambda d: "wrong secret" in error.text, message="the refusal said")
        driver.find_element(By.ID, "sign-in-secret").clear()
        driver.find_element(By.ID, "sign-in-secret").send_keys(secret)
        driver.find_element(By.ID, "sign-in-go").click()
        wait.until(lambda d: d.execute_script("return document.body.dataset.ready"))
        assert driver.find_element(By.ID, "who").text == "alice (user, default): sees own"
        chips = driver.find_elements(By.CSS_SELECTOR, ".session-chip")
        assert [c.get_attribute("data-session") for c in chips] == [mine]
        rows = driver.find_elements(By.CSS_SELECTOR, "#timeline tbody td.sid")
        assert {r.text for r in rows if r.text} == {mine}  # (its pipeline run: no session)

        options = "#pipeline-run option[value]:not([value=''])"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, options), message="the runs")
        listed = driver.find_elements(By.CSS_SELECTOR, options)
        assert [o.get_attribute("value") for o in listed] == [run]  # not bob's
        listed[0].click()
        driver.find_element(By.CSS_SELECTOR, "#pipeline-form button").click()
        box = driver.find_element(By.ID, "pipeline-dag")
        wait.until(lambda d: box.get_attribute("data-run"), message="the run's DAG")
        tasks = driver.find_elements(By.CSS_SELECTOR, "#pipeline-dag svg g.dag-task")
        drawn = [(t.get_attribute("data-task"), t.get_attribute("data-status")) for t in tasks]
        assert drawn == [("prepare", "waiting"), ("train", "waiting")]
        [first, second] = [t.find_element(By.TAG_NAME, "rect") for t in tasks]
        assert first.location["x"] < second.location["x"]  # train after prepare
        driver.save_screenshot(str(tmp / "console-pipeline.png"))

        endpoints = "#endpoint-table tbody tr"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, endpoints), message="endpoints")
        [row] = driver.find_elements(By.CSS_SELECTOR, endpoints)  # not bob's
        assert row.get_attribute("data-endpoint") == "alice-model"
        path = row.find_element(By.CSS_SELECTOR, "td.path").text
        assert path == "/e/alice-model/ (token)"
    finally:
        driver.quit()


async def test_the_console_asks_who_reads_on_a_cluster_with_tenancy(
    log: JetStreamLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")
    keys = {u: (new_access_key(), new_secret()) for u in ("alice", "bob")}
    people: list[AdminCommand] = []
    for user, (key, secret) in keys.items():
        people.append(
            CreateUser(user=user, domain="default", projects=("default",), default_project=None)
        )
        people.append(CreateKeypair(access_key=key, user=user, secret_hash=hash_secret(secret)))
    assert await bootstrap(log, SystemClock(), extra=tuple(people)) is not None
    sessions, runs = {}, {}
    spec = RevisionSpec(image="x:1", slots=Slots(cpu=100, mem=1 << 26, fgpu=25))
    async with anyio.create_task_group() as tg:
        await tg.start(run_serving, log)  # endpoints at 0 replicas: nothing is scheduled
        for user, (key, secret) in keys.items():
            client = Client(log, SystemClock(), key, secret=secret)
            [sessions[user]] = await client.create(image="x:1", slots=Slots(cpu=1000, fgpu=10))
            runs[user] = await client.pipeline_run(_PIPELINE)  # no actor: its tasks wait
            ask = CreateEndpoint(
                endpoint_id=f"ep-{user}", name=f"{user}-model", revision=spec, replicas=0
            )
            await client.serve(ask)
        with anyio.fail_after(30):
            await client.wait_until(lambda s: len(s.serving.endpoints) == 2)
        api: ReadApi = await tg.start(serve_read_api, log, tmp_path / "p.duckdb")
        await api.projector.wait_beyond(await log.last_seq() - 1)
        with anyio.fail_after(90):
            await anyio.to_thread.run_sync(
                _sign_in, api.console, keys["alice"], sessions["alice"], runs["alice"], tmp_path
            )
        tg.cancel_scope.cancel()


def test_the_console_listens_to_every_kind_of_event() -> None:
    script = (Path(console.__file__).with_name("console") / "console.js").read_text()
    listed = set(re.findall(r'"([a-z.-]+\.v\d+)"', script.split("const CATALOGUE")[1]))
    tags = {t.__struct_config__.tag for t in get_args(AnyEvent)}
    assert tags <= listed, tags - listed
