"""Pulling an image an agent lacks: the throttle on progress reports, the engine's
progress summed, image details from the engine's listing, and the whole path over a real
log with the dummy runtime (the Docker path against a real registry is in
``test_images_registry.py``)."""

from typing import Any

import anyio
import pytest

from events import ImageInfo, SessionPulling
from services.actors.agent import AgentConfig
from services.adapters.docker_runtime import PullTally, image_infos
from services.adapters.dummy_runtime import DummyRuntime
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.pull_progress import PullThrottle
from services.domain.status import SessionStatus
from tests.support.cluster import agent_config, running_cluster
from tests.support.fold_log import IMAGE, NEED
from tests.support.images import REGISTRY, TOOL_1, TOOL_2

S = SessionStatus


# ---- progress, throttled ----------------------------------------------------------------


def test_pull_progress_is_reported_per_tenth_or_after_a_while() -> None:
    throttle = PullThrottle(every_s=2.0, step_pct=10)
    assert throttle.due(0.0, 0, 100)  # the first
    assert not throttle.due(0.5, 5, 100)  # same tenth, soon after
    assert throttle.due(0.6, 10, 100)  # a new tenth
    assert not throttle.due(0.7, 19, 100)
    assert throttle.due(2.7, 19, 100)  # a while later
    assert not throttle.due(2.8, 0, 0)  # total unknown: only time counts
    assert throttle.due(4.8, 0, 0)


def test_the_engines_pull_messages_add_up_per_layer() -> None:
    tally = PullTally()
    messages: list[dict[str, Any]] = [
        {"status": "Pulling from fgpu/tool", "id": "2"},
        {"status": "Pulling fs layer", "id": "l1"},
        {"status": "Pulling fs layer", "id": "l2"},
        {"status": "Downloading", "id": "l1", "progressDetail": {"current": 10, "total": 40}},
        {"status": "Downloading", "id": "l2", "progressDetail": {"current": 5, "total": 60}},
        {"status": "Download complete", "id": "l1"},
        {"status": "Extracting", "id": "l1", "progressDetail": {"current": 40, "total": 40}},
        {"status": "Digest: sha256:" + "c" * 64},
    ]
    changed = [tally.add(m) for m in messages]
    assert changed == [False, True, True, True, True, True, False, False]
    assert (tally.current, tally.total) == (45, 100)


def test_image_details_come_one_per_tag_with_the_digest_of_its_own_name() -> None:
    listed = [
        {
            "Id": "sha256:one",
            "RepoTags": [TOOL_1, "fgpu/tool:copy"],
            "RepoDigests": [f"{REGISTRY}/fgpu/tool@sha256:d1"],
            "Size": 123,
        },
        {"Id": "sha256:none", "RepoTags": ["<none>:<none>"], "RepoDigests": [], "Size": 1},
    ]
    assert image_infos(listed) == [  # by tag
        ImageInfo(ref="fgpu/tool:copy", id="sha256:one", digest=None, size=123),
        ImageInfo(ref=TOOL_1, id="sha256:one", digest="sha256:d1", size=123),
    ]


# ---- over a real log, with the dummy runtime ----------------------------------------------


def _puller(agent_id: str = "a1") -> AgentConfig:
    from dataclasses import replace

    # Progress by tenths only: no report is due for time, whatever the machine's speed.
    return replace(agent_config(agent_id), registry=REGISTRY, pull_report_s=3600.0)


async def _ended(client: Client, sid: str) -> ClusterState:
    with anyio.fail_after(30):
        return await client.wait_until(
            lambda s: sid in s.sessions and s.sessions[sid].status in (S.TERMINATED, S.ERROR)
        )


@pytest.mark.anyio
async def test_an_agent_lacking_the_image_pulls_it_then_runs_it(log: JetStreamLog) -> None:
    client = Client(log, SystemClock(), "alice")
    runtime = DummyRuntime(images=(IMAGE,), registry=(TOOL_1, TOOL_2))
    async with running_cluster(log, [(_puller(), runtime)]):
        [sid] = await client.create(image=TOOL_2, slots=NEED, command=("sleep", "infinity"))
        with anyio.fail_after(30):
            s = await client.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status is S.RUNNING
            )
            s = await client.wait_until(lambda s: TOOL_2 in s.agents["a1"].images, s)
        await client.destroy(sid)
        s = await _ended(client, sid)
    v = s.sessions[sid]
    assert v.status is S.TERMINATED
    walked = [t.status for t in v.history]
    assert walked[walked.index(S.PREPARING) :][:3] == [S.PREPARING, S.PULLING, S.RUNNING]
    reports: list[SessionPulling] = []
    async for batch in log.read(0):
        reports += [r.event for r in batch if isinstance(r.event, SessionPulling)]
    # The first (nothing known yet), then one per tenth of the total: 0% to 100%.
    assert [(r.current * 10) // max(r.total, 1) for r in reports] == [0, *range(11)]
    assert reports[-1].current == reports[-1].total > 0
    held = {i.ref: i for i in s.agents["a1"].image_details}
    assert held[TOOL_2].digest is not None and held[IMAGE].digest is None
    assert TOOL_1 not in held  # only what was asked for is pulled


@pytest.mark.anyio
async def test_a_destroy_during_a_pull_cuts_it_short(log: JetStreamLog) -> None:
    """A pull that would take an hour: the destroy ends the session at once, never
    started, and the image is not left half-held."""
    client = Client(log, SystemClock(), "alice")
    runtime = DummyRuntime(images=(IMAGE,), registry=(TOOL_2,), pull_delay_s=3600.0)
    async with running_cluster(log, [(_puller(), runtime)]):
        [sid] = await client.create(image=TOOL_2, slots=NEED, command=("true",))
        with anyio.fail_after(30):
            await client.wait_until(
                lambda s: sid in s.sessions and s.sessions[sid].status is S.PULLING
            )
        await client.destroy(sid)
        s = await _ended(client, sid)
        assert await runtime.list({}) == []
    v = s.sessions[sid]
    assert (v.status, v.exit_code) == (S.TERMINATED, None)
    assert v.reason == "destroyed by alice; stopped while its image was being pulled"
    assert S.RUNNING not in [t.status for t in v.history]
    assert TOOL_2 not in await runtime.images()


@pytest.mark.anyio
async def test_an_image_the_registry_lacks_ends_the_session_in_error(log: JetStreamLog) -> None:
    client = Client(log, SystemClock(), "alice")
    runtime = DummyRuntime(images=(IMAGE,), registry=(TOOL_1,))
    async with running_cluster(log, [(_puller(), runtime)]):
        [sid] = await client.create(image=TOOL_2, slots=NEED, command=("true",))
        s = await _ended(client, sid)
    v = s.sessions[sid]
    assert v.status is S.ERROR
    assert v.reason is not None and f"image '{TOOL_2}' could not be pulled" in v.reason
