"""The administrators' pages in a real headless browser: a domain admin signs in, opens
Administration from the header, sees agent a1's one GPU (2 fGPU) drawn as a bar split into
its sessions' shares, named by user, and its free part, and the pending queue with why a
session waits; creates a user, makes its keypair and sees the secret once (it signs in,
and is gone from the page once dismissed), sets the user's policy, and is refused, with
the registrar's reason, a user of another domain; sets its domain's image allow-list and
sees it in the table. A superadmin gives the default group an fGPU step of 0.1 and sees
it in the groups' table. A plain user has no admin link, and its
``#/admin`` says it is not theirs. Not one refusal of the Content-Security-Policy. A
screenshot is saved and its path printed (docs/ui-admin.png is one)."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from events import CreateDomain, Role, SessionRunning, Slots
from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import AdminPage
from tests.support.ui_world import RUNNING_SERVICES, UiWorld, ui_world

WIDTH, HEIGHT = 1200, 1500
HALF = Slots(cpu=100, mem=1 << 28, fgpu=50)
QUARTER = Slots(cpu=100, mem=1 << 28, fgpu=25)
TOO_BIG_NOW = Slots(cpu=100, mem=1 << 28, fgpu=150)  # a device is 2: waits for room


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-admin-browser"), RUNNING_SERVICES) as world:
        world.apply(CreateDomain(domain="other"))
        world.add_person("ada", "default", Role.DOMAIN_ADMIN, ("default",))
        world.add_person("root", "default", Role.SUPERADMIN, ("default",))
        half = world.create("alice", name="alice-half", slots=HALF)
        quarter = world.create("bob", name="bob-quarter", slots=QUARTER)
        for sid in (half, quarter):
            world.wait_until(sid, SessionRunning)
        world.sessions.update({"half": half, "quarter": quarter})
        world.sessions["waits"] = world.create("mallory", name="waits", slots=TOO_BIG_NOW)
        yield world


def test_an_admin_sees_the_shares_and_manages_users_keypairs_and_policies(
    w: UiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser_or_skip()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must never fetch a driver
    shot = tmp_path / "ui-admin.png"
    driver = chrome(tmp_path / "ada", WIDTH, HEIGHT)
    try:
        page = AdminPage(driver, f"{w.url}/")
        page.sign_in(*w.keys["ada"], "ada")
        page.watch_csp()
        page.open_admin()

        def shares(_: object) -> bool:
            return {"alice 0.5", "bob 0.25"} <= set(page.shares("a1"))

        page.until(shares, "a1's GPU split into alice's 0.5 and bob's 0.25")
        # The three first sessions' slivers (0.01 each) and these two: 0.78 held of 2.
        assert page.css('[data-agent="a1"] .free') == ["free 1.22"]
        page.until(lambda _: page.waiting(w.sessions["waits"]), "the waiting session listed")
        assert "fGPU" in page.waiting(w.sessions["waits"]), page.waiting(w.sessions["waits"])

        page.create_user("nia", "default", "default")
        assert page.result("user") == "done"
        key, secret = page.new_keypair("nia")
        signed = httpx.post(
            f"{w.url}/ui/session",
            json={"access_key": key, "secret_key": secret},
            headers={"Origin": w.url},
        )
        assert signed.status_code == 200 and signed.json()["identity"]["user"] == "nia"
        page.set_policy("user", "nia", fgpu="1")
        assert page.result("policy") == "done"
        page.until(lambda _: page.policy("user", "nia")[5:6] == ["1 fGPU"], "shown")
        driver.save_screenshot(str(shot))
        page.dismiss_secret()
        assert secret not in driver.page_source  # shown once: gone from the page

        page.create_user("spy", "other", "")
        refusal = page.result("user")
        assert refusal.startswith("refused (forbidden): domain-admin ada may not"), refusal

        page.set_allow_list("default", "busybox, fgpu/python:3.11")
        assert page.result("images") == "done"
        page.until(lambda _: page.allowed("default") == ["busybox", "fgpu/python:3.11"], "listed")
        assert page.csp_refusals() == []

        # A group is a superadmin's: root gives the default group its fGPU step.
        page.sign_out()
        page.sign_in(*w.keys["root"], "root")
        page.watch_csp()
        page.open_admin()
        page.change_group("default", policy="fragmentation-aware", quantum="0.1")
        assert page.result("group") == "done"
        page.until(lambda _: page.group("default")[3:4] == ["0.1"], "the new quantum shown")
        assert page.allowed("default") == ["busybox", "fgpu/python:3.11"]  # kept
        assert page.csp_refusals() == []

        page.sign_out()
        page.sign_in(*w.keys["alice"], "alice")
        assert not page.shown("#nav-admin")
        page.d.execute_script("location.hash = '#/admin'")
        page.until(lambda _: page.shown("#admin-refused"), "the refusal shown")
        assert "Administrators only" in page.css("#admin-refused")[0]
        assert not page.shown("#admin-body")
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000
    print(f"\nUI screenshot: {shot}")
