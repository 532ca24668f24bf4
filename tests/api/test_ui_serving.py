"""The Serving page's reads, as a browser's cookie reaches them: a signed-in user lists
its own endpoints only, and another user's endpoint is neither listed nor readable by its
name or id (404, as one that does not exist); without a browser session, 401. A token is
shown by its id and expiry, never by its hash. The page's module is served with the UI.

Endpoints at 0 replicas: the serving actor answers, nothing is scheduled."""

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import get_args

import pytest

from events import (
    AnyEvent,
    CreateEndpoint,
    CreateToken,
    EndpointCreated,
    RevisionSpec,
    Slots,
    TokenCreated,
)
from services.api import ui
from tests.support.ui_world import UiWorld, ui_world

SPEC = RevisionSpec(image="fgpu/busybox:latest", slots=Slots(cpu=100, mem=1 << 26, fgpu=25))
HASH = "ab" * 32  # the token's sha256 as the CLI would send it


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiWorld]:
    with ui_world(tmp_path_factory.mktemp("ui-serving"), ("intake", "serving")) as world:
        for who in ("alice", "bob"):
            made = world.serve(
                who,
                CreateEndpoint(
                    endpoint_id=f"ep-{who}", name=f"{who}-model", revision=SPEC, replicas=0
                ),
            )
            assert isinstance(made, EndpointCreated), made
        expires = datetime.now(UTC) + timedelta(days=1)
        token = CreateToken(
            endpoint_id="ep-alice", token_id="tk-1", sha256=HASH, expires_at=expires
        )
        assert isinstance(world.serve("alice", token), TokenCreated)
        yield world


def test_a_user_lists_and_reads_its_own_endpoints_only(w: UiWorld) -> None:
    alice, _ = w.sign_in("alice")
    listed = alice.get("/v1/endpoints")
    assert listed.status_code == 200
    assert [e["name"] for e in listed.json()["endpoints"]] == ["alice-model"]
    assert "bob" not in listed.text
    mine = alice.get("/v1/endpoints/alice-model").json()
    assert mine["path"] == "/e/alice-model/"
    assert [t["token_id"] for t in mine["tokens"]] == ["tk-1"]
    assert HASH not in alice.get("/v1/endpoints/alice-model").text
    for ref in ("bob-model", "ep-bob"):
        r = alice.get(f"/v1/endpoints/{ref}")
        assert r.status_code == 404 and "/e/bob-model" not in r.text, r.text
    bob, _ = w.sign_in("bob")
    assert [e["name"] for e in bob.get("/v1/endpoints").json()["endpoints"]] == ["bob-model"]


def test_without_a_browser_session_no_endpoint_is_read(w: UiWorld) -> None:
    anonymous = w.http()
    for path in ("/v1/endpoints", "/v1/endpoints/alice-model"):
        r = anonymous.get(path)
        assert r.status_code == 401 and "alice-model" not in r.text, r.text


def test_the_serving_page_is_served_with_the_ui(w: UiWorld) -> None:
    http = w.http()
    page = http.get("/")
    assert 'id="serving"' in page.text and 'href="#/serving"' in page.text
    module = http.get("/ui/assets/serving.js")
    assert module.status_code == 200 and "/v1/endpoints" in module.text


def test_the_page_follows_every_event_that_changes_an_endpoint() -> None:
    """Each event of an endpoint's or a replica's that the page shows is followed, and
    each followed is one the log has (a misspelt tag would never arrive)."""
    script = (Path(ui.__file__).with_name("ui") / "serving.js").read_text()
    listed = set(re.findall(r'"((?:endpoint|replica)\.[a-z-]+\.v\d+)"', script))
    tags = {t.__struct_config__.tag for t in get_args(AnyEvent)}
    shown = {t for t in tags if t.startswith(("endpoint.", "replica."))}
    assert listed == shown - {"replica.health-reported.v1"}  # a probe's report: no change
