"""A record that reuses a session id it does not own never enters that session's story.

Bob (a user of alice's domain) publishes, on his own request subject, a request for
alice's running session's id that says it comes from alice, and asks to destroy her
session. The fold ignores the first (the id is taken) and the scheduler refuses the
second. Alice's session's story, through the read API and ``fgpu audit session``, agrees:
the first is no part of it, and the second is told as a refused request, by bob.
"""

import json
import time
from collections.abc import Iterator

import anyio
import pytest
from typer.testing import CliRunner

from events import SessionRequested, Slots
from events import subjects as subj
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.cli.main import app
from services.client import Client
from services.domain.provenance import Provenance, stamp
from tests.support.api_world import ROOT, World, world

pytestmark = pytest.mark.slow

Attack = tuple[World, str, str, str]  # the world, alice's session, the forged request, bob's


async def _attack(w: World, sid: str) -> tuple[str, str]:
    """The forged request and bob's destroy request (their ids), on the log."""
    alice, bob = w.keys["ualice5r"][0], w.keys["ubob8t"][0]
    events = await connect(w.nats, name="attacker")
    try:
        forged = stamp(
            SessionRequested,
            Provenance(alice, SystemClock().now()),  # "from alice": the sender's word
            session_id=sid,
            owner=bob,  # on bob's subject, where only bob may publish
            image="fgpu/busybox:latest",
            slots=Slots(cpu=100, mem=1 << 20, fgpu=0),
        )
        await events.append(subj.request(bob, sid), forged)
        destroy = await Client(events, SystemClock(), bob).destroy(sid)
    finally:
        await events.close()
    return forged.id, destroy


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attack]:
    with world(tmp_path_factory.mktemp("story")) as w:
        sid = w.sessions["ualice5r"][0]
        forged, destroy = anyio.run(_attack, w, sid, backend="asyncio")
        deadline = time.monotonic() + 30
        while w.get(ROOT, f"/v1/destroys/{destroy}").status_code != 200:
            assert time.monotonic() < deadline, "bob's destroy request has no answer"
            time.sleep(0.05)
        yield w, sid, forged, destroy


def test_the_story_through_the_api_is_the_folds(attacked: Attack) -> None:
    w, sid, forged, destroy = attacked
    alice, bob = w.keys["ualice5r"][0], w.keys["ubob8t"][0]
    for reader in ("ualice5r", "udan2y", ROOT):
        history = w.ok(reader, f"/v1/sessions/{sid}/history")
        assert history["session"]["owner"] == alice and history["session"]["status"] == "RUNNING"
        assert forged not in json.dumps(history), reader
        story = history["story"]
        asked = [line for line in story if "asked for" in line["text"]]
        assert [(line["actor"], line["effect"]) for line in asked] == [(alice, True)]
        [by_bob] = [line for line in story if "asked to destroy it" in line["text"]]
        assert by_bob == {**by_bob, "actor": bob, "effect": False}
        assert by_bob["text"] == f"{bob} asked to destroy it (refused)"
        [refusal] = [line for line in story if line["text"].startswith(f"destroy by {bob}")]
        assert not refusal["effect"]
        assert history["summary"].startswith("running on a1")
        assert [e["data"]["requester"] for e in history["events"] if e["id"] == destroy] == [bob]


def test_the_forged_request_is_the_superadmins_to_read_with_why_it_counts_for_nothing(
    attacked: Attack,
) -> None:
    w, sid, forged, _ = attacked
    [found] = [e for e in w.ok(ROOT, "/v1/events", session=sid)["events"] if e["id"] == forged]
    assert found["error"] == f"session {sid} is taken: a second request for it changes nothing"
    for reader in ("ualice5r", "ubob8t", "udan2y"):
        seen = w.ok(reader, "/v1/events", limit=1000)["events"]
        assert forged not in {e["id"] for e in seen}, reader


def test_fgpu_audit_session_tells_the_same_story(attacked: Attack) -> None:
    w, sid, forged, _ = attacked
    alice, secret = w.keys["ualice5r"]
    bob = w.keys["ubob8t"][0]
    env = {"FGPU_ACCESS_KEY": alice, "FGPU_SECRET_KEY": secret}
    result = CliRunner().invoke(app, ["--api", w.api, "audit", "session", sid], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.count("asked for") == 1
    assert f"{alice}: {alice} asked for 0.2 fGPU" in result.output
    assert f"{bob}: {bob} asked to destroy it (refused)" in result.output
    shown = CliRunner().invoke(app, ["--api", w.api, "audit", "session", sid, "--json"], env=env)
    assert forged not in shown.output and json.loads(shown.output)["session"]["id"] == sid
