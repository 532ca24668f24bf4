"""The Serving page in a real headless browser: a user lists its own endpoints only (not
another user's), opens one (its path through the proxy, its revision and traffic share,
its token by id), scales it, moves all traffic back to its first revision, splits it, sets and turns
off its autoscaling, makes a token (shown once) and revokes another with the page's
forms, and another user's endpoint asked for by its address is answered as one that does
not exist, nothing of it shown; nothing the page's Content-Security-Policy refuses. A
screenshot is saved and its path printed."""

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from events import (
    AddRevision,
    CreateEndpoint,
    CreateToken,
    EndpointCreated,
    RevisionSpec,
    ServeRefused,
    Slots,
    TokenCreated,
)
from tests.support.browser import browser_or_skip, chrome
from tests.support.ui_pages import ServingPage
from tests.support.ui_world import UiWorld, ui_world

SPEC = RevisionSpec(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=1 << 26, fgpu=25))


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-serving-browser"), ("intake", "serving")) as world:
        for who in ("alice", "bob"):  # at 0 replicas: nothing is scheduled
            ask = CreateEndpoint(
                endpoint_id=f"ep-{who}", name=f"{who}-model", revision=SPEC, replicas=0
            )
            assert isinstance(world.serve(who, ask), EndpointCreated)
        expires = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
        token = CreateToken(
            endpoint_id="ep-alice", token_id="tk-1", sha256="ab" * 32, expires_at=expires
        )
        assert isinstance(world.serve("alice", token), TokenCreated)
        yield world


def test_a_user_sees_its_own_endpoints_and_not_anothers(w: UiWorld, tmp_path: Path) -> None:
    browser_or_skip()
    driver = chrome(tmp_path, 1200, 800)
    try:
        page = ServingPage(driver, f"{w.url}/")
        page.sign_in(*w.keys["alice"], "alice")
        page.watch_csp()
        assert page.open_list() == ["alice-model"]  # not bob's
        shown = page.open_endpoint("alice-model")
        assert shown["summary"][0].startswith("/e/alice-model/ through the proxy, with a token")
        assert shown["revisions"] == ["r1 fgpu/busybox:latest 0.25 0.1 /health 100 % 0"]
        assert shown["tokens"] == ["tk-1 2031-01-02 03:04:05 valid revoke"]
        assert not page.shown("#launch")
        # The writes: each alice's own request, the serving actor's answer said.
        assert page.scale(2) == "done"
        page.until(lambda d: page.css("#endpoint-revisions tbody tr")[0].endswith(" 2"), "2 wanted")
        # A second revision takes all traffic (as fgpu serve update --at-once); the page,
        # told by the stream, offers to move it back to r1, and does.
        v2 = AddRevision(endpoint_id="ep-alice", revision=SPEC)
        assert not isinstance(w.serve("alice", v2), ServeRefused)
        page.until(lambda d: page.css('button[data-point="1"]'), "r1 offered")
        assert page.point(1, at_once=True) == "done"
        page.until(lambda d: page.css('button[data-point="2"]'), "r2 offered, r1 taking all")
        assert page.css('tr[data-revision="1"] td.traffic') == ["100 %"]
        assert page.split({1: 50, 2: 50}) == "done"  # blue/green, half each
        page.until(lambda d: page.css("#endpoint-revisions td.traffic") == ["50 %", "50 %"], "half")
        rule = {"up": 4, "down": 1, "min": 0, "max": 3, "cooldown": 5}
        assert page.autoscale("in_flight", rule) == "done"
        page.until(lambda d: "in_flight up > 4" in page.css("#endpoint-autoscale")[0], "the rule")
        assert page.autoscale_off() == "done"
        page.until(lambda d: page.css("#endpoint-autoscale") == ["autoscaling: off"], "off")
        said, token = page.make_token()
        assert said == "done" and token.startswith("fgt_")
        assert len(page.css("#endpoint-tokens tbody tr")) == 2
        assert page.revoke("tk-1") == "done"
        page.until(lambda d: "tk-1 2031-01-02 03:04:05 revoked" in page.css("tr"), "revoked")
        shot = tmp_path / "ui-serving.png"
        driver.save_screenshot(str(shot))
        said = page.go_to("bob-model")
        assert said == "no endpoint bob-model"
        assert page.css("#endpoint-title-name") == [""] and page.css("#endpoint-summary") == [""]
        assert page.csp_refusals() == []
        page.sign_out()
    finally:
        driver.quit()
    print(f"\nui screenshot: {shot}")
