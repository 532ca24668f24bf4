"""The pipeline actor's snapshots: started from one, it folds only the log after it, and
stopped abruptly anywhere (between a task's end and its dependents' requests, again and
again) it asks for no task twice and loses none. The codec refuses what is not its own."""

from collections.abc import Callable

import anyio
import pytest

from services.actors.snapshots import (
    CLUSTER,
    PIPELINE,
    SnapshotHealth,
    StateSnapshots,
    check,
    covered_by,
)
from services.adapters.jetstream import JetStreamLog
from services.adapters.system_clock import SystemClock
from services.client import Client
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state_codec import SnapshotUndecodable, SnapshotUnusable
from services.domain.pipelines.runs import PipelineState
from services.domain.pipelines.snapshot import decode_pipeline_state, encode_pipeline_state
from services.testing import MemorySnapshots
from tests.actors.test_pipeline import (
    actor,
    asked,
    cluster,
    ended,
    spec,
    statuses,
    task,
    until,
)

pytestmark = pytest.mark.anyio


async def saved(
    store: MemorySnapshots, log: str, ok: Callable[[PipelineState], bool]
) -> PipelineState:
    """The state of the first snapshot in ``store`` (the latest one, then those to come)
    for which ``ok`` holds."""
    with anyio.fail_after(30):
        while store.data is None or not ok(decode_pipeline_state(store.data, log)):
            await store.saved()
        return decode_pipeline_state(store.data, log)


def kept(store: MemorySnapshots) -> StateSnapshots[PipelineState]:
    return StateSnapshots(store, PIPELINE, writes=True, every_events=1)


async def test_restarted_from_a_snapshot_between_a_tasks_end_and_its_dependents(
    log: JetStreamLog,
) -> None:
    """A snapshot holds a's request; the actor is stopped; a ends while none runs; the
    next one starts from the snapshot (not the log's start) and asks for b and c once."""
    alice = Client(log, SystemClock(), "alice")
    store = MemorySnapshots()
    identity = await log.identity()
    async with cluster(log):
        async with actor(log, snapshots=kept(store)):
            run_id = await alice.pipeline_run(
                spec(task("a"), task("b", "true", "a"), task("c", "true", "a"))
            )
            snap = await saved(
                store,
                identity,
                lambda s: run_id in s.runs and s.runs[run_id].tasks["a"].status == "requested",
            )
        assert statuses(snap.runs[run_id]) == {"a": "requested", "b": "waiting", "c": "waiting"}
        s = await until(
            log, lambda s: run_id in s.runs and s.runs[run_id].tasks["a"].session_end is not None
        )
        second = kept(store)
        async with actor(log, snapshots=second):
            s = await until(log, ended(run_id))
    assert second.started_from == snap.last_seq > 0
    assert s.runs[run_id].status == "succeeded"
    tasks, sessions = await asked(log, run_id)
    assert tasks == {("a", 0, 1): 1, ("b", 0, 1): 1, ("c", 0, 1): 1} and sessions == 3


async def test_stopped_again_and_again_with_snapshots_every_task_once(log: JetStreamLog) -> None:
    alice = Client(log, SystemClock(), "alice")
    store = MemorySnapshots()
    layers = [task("root")] + [task(f"m{i}", "true", "root") for i in range(6)]
    layers.append(task("sink", "true", *(f"m{i}" for i in range(6))))
    async with cluster(log):
        run_id = await alice.pipeline_run(spec(*layers))
        for stop_after in [0.0, 0.01, 0.05, 0.1, 0.02, 0.2] * 10:
            async with actor(log, snapshots=kept(store)):
                await anyio.sleep(stop_after)  # stopped wherever it is then
            s = await until(log, lambda s: run_id in s.runs)
            if s.runs[run_id].ended:
                break
        async with actor(log, snapshots=kept(store)):
            s = await until(log, ended(run_id))
    assert store.saves > 1
    assert s.runs[run_id].status == "succeeded"
    tasks, sessions = await asked(log, run_id)
    assert set(tasks.values()) == {1} and len(tasks) == 8 and sessions == 8


async def test_a_snapshot_of_another_log_or_kind_is_not_started_from(log: JetStreamLog) -> None:
    identity = await log.identity()
    data = encode_pipeline_state(PipelineState(last_seq=0), identity)
    assert covered_by(data, identity) == 0
    with pytest.raises(SnapshotUnusable, match="another log"):
        decode_pipeline_state(data, "fgpu@elsewhere")
    with pytest.raises(SnapshotUndecodable):
        decode_pipeline_state(data[:-3], identity)
    cluster_snap = CLUSTER.encode(ClusterState(), identity)
    with pytest.raises(SnapshotUndecodable):
        decode_pipeline_state(cluster_snap, identity)
    assert covered_by(cluster_snap, identity) == 0
    store = MemorySnapshots()
    store.data = cluster_snap
    assert (await check(store, log, PIPELINE)).verdict == "corrupt"
    store.data = data
    assert await check(store, log, PIPELINE) == SnapshotHealth(
        "ok", None, 0, len(data), await log.last_seq(), None
    )


def test_a_state_holding_decisions_not_back_from_the_log_is_not_encoded() -> None:
    with pytest.raises(ValueError, match="not given back"):
        encode_pipeline_state(PipelineState(last_seq=4, ahead=9), "x")
