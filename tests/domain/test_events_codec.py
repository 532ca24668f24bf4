"""The codec: every event round-trips, bad payloads are refused, the schema names every event,
and encoded samples of every event version stay decodable (``tests/fixtures/events_v*.jsonl``).

The fixture files are history: a line, once committed, is never edited or regenerated. When
an event gets a new tag (``.v2``), its v1 line stays and must still decode, through an
upcaster in ``events.codec.UPCASTERS``, to what ``DECODED_V1`` says; samples of the new
version go in a new ``events_v2.jsonl``. See msgspec's docs, "Schema Evolution".
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import (
    AccessGranted,
    AccessRefused,
    AccessSuppressed,
    AdminApplied,
    AdminRefused,
    AdminRequested,
    AgentFenced,
    AgentHeard,
    AgentImagesReported,
    AgentLost,
    AgentRegistered,
    AnyEvent,
    AutoscaleRule,
    AutoscaleSet,
    CreateEndpoint,
    CreateToken,
    CreateUser,
    DestroyRejected,
    DevicePlacement,
    EndpointCreated,
    EndpointRemoved,
    EnvVar,
    GpuInfo,
    GpuOomRefused,
    GpuOverSlice,
    GpuShareExceeded,
    GpuUsageSampled,
    HealthSpec,
    ImageInfo,
    LogArchived,
    LogHealth,
    PayloadRejected,
    PipelineCancelRequested,
    PipelineRequestRefused,
    PipelineRerunRequested,
    PipelineRerunStarted,
    PipelineRetryScheduled,
    PipelineRunCancelled,
    PipelineRunEnded,
    PipelineRunRequested,
    PipelineScheduleFired,
    PipelineScheduleRefused,
    PipelineScheduleRemoved,
    PipelineScheduleSet,
    PipelineSpec,
    PipelineTask,
    PipelineTaskEnded,
    PipelineTaskRequested,
    PipelineTasksEnded,
    PipelineTasksRequested,
    PolicyLevel,
    PolicySet,
    ReplicaChanged,
    ReplicaHealthReported,
    ReplicaPhase,
    ReplicaRotation,
    ReplicasSet,
    RequestsDropped,
    ResourcePolicy,
    RevisionAdded,
    RevisionSpec,
    RevisionTarget,
    Role,
    RolloutEnded,
    RolloutPolicy,
    RolloutStarted,
    RouteStatsReported,
    SecretRemoved,
    SecretSet,
    SecretsKeySet,
    ServeRefused,
    ServeRequested,
    ServingTicked,
    SessionAdmitted,
    SessionCancelled,
    SessionChannelClosed,
    SessionChannelOpened,
    SessionCpuSampled,
    SessionDestroyRequested,
    SessionErrored,
    SessionExecFinished,
    SessionExecStarted,
    SessionLost,
    SessionPreparing,
    SessionPulling,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
    SessionUnplaced,
    SetPolicy,
    Slots,
    SpaceState,
    TaskAttempt,
    TaskEnd,
    TokenCreated,
    TokenRevoked,
    VfolderMount,
    VfolderScanned,
    decode,
    encode,
    json_schema,
)
from events import subjects as subj
from events.slots import AMOUNT_LIMIT
from events.union import EVENT_TYPES

FIXTURES = Path(__file__).parents[1] / "fixtures"
V1 = FIXTURES / "events_v1.jsonl"
AT = datetime(2024, 5, 17, 12, 30, 15, 250000, tzinfo=UTC)
ENVELOPE: dict[str, Any] = {
    "at": AT,
    "causation_id": "c0ffee",
    "correlation_id": "corr-1",
}
SLOTS = Slots(cpu=1500, mem=3 << 30, fgpu=250)
REVISION = RevisionSpec(
    image="fgpu/python:bookworm",
    command=("python", "-m", "serve"),
    port=8000,
    model="models",
    slots=SLOTS,
    env=(("MODEL", "/home/work/models/m.onnx"),),
    health=HealthSpec(path="/ready", interval_s=1.0, timeout_s=0.5, initial_delay_s=2.0),
)


def tag(cls: type[msgspec.Struct]) -> str:
    return str(cls.__struct_config__.tag)


# What each line of events_v1.jsonl decodes to. Fully populated: every optional field set.
DECODED_V1: dict[str, AnyEvent] = {
    tag(e.__class__): e
    for e in [
        SessionRequested(
            id="e-requested",
            actor="alice",
            session_id="s1",
            owner="alice",
            image="fgpu/busybox:latest",
            command=("sh", "-c", "echo hi"),
            slots=SLOTS,
            priority=7,
            name="train",
            **ENVELOPE,
        ),
        SessionDestroyRequested(
            id="e-destroy", actor="alice", session_id="s1", requester="alice", **ENVELOPE
        ),
        SessionAdmitted(id="e-admitted", actor="quota", session_id="s1", owner="alice", **ENVELOPE),
        SessionRejected(
            id="e-rejected",
            actor="quota",
            session_id="s1",
            owner="alice",
            code="quota",
            reason="policy allows 1 concurrent sessions",
            **ENVELOPE,
        ),
        SessionScheduled(
            id="e-scheduled",
            actor="scheduler",
            session_id="s1",
            owner="alice",
            agent_id="a1",
            slots=SLOTS,
            devices=(
                DevicePlacement(gpu_index=0, fgpu=100),
                DevicePlacement(gpu_index=1, fgpu=100),
                DevicePlacement(gpu_index=3, fgpu=50),
            ),
            **ENVELOPE,
        ),
        SessionQueued(
            id="e-queued", actor="scheduler", session_id="s1", reason="waiting", **ENVELOPE
        ),
        SessionCancelled(
            id="e-cancelled",
            actor="scheduler",
            session_id="s1",
            owner="alice",
            reason="destroyed by alice before it started",
            **ENVELOPE,
        ),
        SessionTerminating(
            id="e-terminating",
            actor="scheduler",
            session_id="s1",
            agent_id="a1",
            reason="destroyed by alice",
            **ENVELOPE,
        ),
        SessionPreparing(
            id="e-preparing", actor="agent:a1", session_id="s1", agent_id="a1", **ENVELOPE
        ),
        SessionRunning(
            id="e-running",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            container_id="0123abcd",
            **ENVELOPE,
        ),
        SessionTerminated(
            id="e-terminated",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            exit_code=137,
            reason="killed",
            **ENVELOPE,
        ),
        SessionErrored(
            id="e-errored",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            reason="image not found",
            **ENVELOPE,
        ),
        DestroyRejected(
            id="e-destroy-rejected",
            actor="scheduler",
            session_id="s1",
            requester="bob",
            reason="the session belongs to another access key",
            **ENVELOPE,
        ),
        PolicySet(
            id="e-policy",
            actor="admin",
            owner="alice",
            max_concurrent_sessions=4,
            max_slots=Slots(cpu=8000, mem=64 << 30, fgpu=400),
            **ENVELOPE,
        ),
        PayloadRejected(
            id="e-payload-rejected",
            actor="quota",
            stream_seq=42,
            subject="fgpu.req.alice.s1",
            error="Object missing required field `slots`",
            **ENVELOPE,
        ),
        AgentRegistered(
            id="e-registered",
            actor="agent:a1",
            agent_id="a1",
            capacity=Slots(cpu=64000, mem=256 << 30, fgpu=400),
            gpus=(
                GpuInfo(index=0, uuid="GPU-0", model="H200", mem=141 << 30, sm_count=132),
                GpuInfo(index=1, uuid="GPU-1", model="H200", mem=141 << 30, sm_count=132),
            ),
            fgpu_per_gpu=200,
            images=("fgpu/busybox:latest", "pytorch/pytorch:2.3"),
            runtime="dummy",
            **ENVELOPE,
        ),
        AgentLost(
            id="e-lost",
            actor="scheduler",
            agent_id="a1",
            reason="no heartbeat for 16 s",
            **ENVELOPE,
        ),
        GpuUsageSampled(
            id="e-usage",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            gpu_index=0,
            mem_used=3 << 30,
            mem_peak=4 << 30,
            mem_limit=8 << 30,
            launches=123456,
            throttled_ns=987654321,
            oom_refusals=2,
            **ENVELOPE,
        ),
        SessionCpuSampled(
            id="e-cpu",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            cpu_ns=1_500_000_000,
            **ENVELOPE,
        ),
        AdminRequested(
            id="e-admin-requested",
            actor="boss",
            requester="boss",
            command=CreateUser(
                user="carol@example.org",
                domain="research",
                role=Role.DOMAIN_ADMIN,
                projects=("vision", "nlp"),
                default_project="vision",
            ),
            **ENVELOPE,
        ),
        AdminApplied(
            id="e-admin-applied",
            actor="registrar",
            requester="boss",
            command=SetPolicy(
                level=PolicyLevel.KEYPAIR,
                target="AKcarol01",
                policy=ResourcePolicy(
                    max_sessions=4,
                    max_pending_sessions=2,
                    max_pending_slots=Slots(cpu=4000, mem=16 << 30, fgpu=200),
                    total_slots=Slots(cpu=8000, mem=64 << 30, fgpu=400),
                    max_priority=50,
                ),
            ),
            **ENVELOPE,
        ),
        AdminRefused(
            id="e-admin-refused",
            actor="registrar",
            requester="mallory",
            code="forbidden",
            reason="a user may not create domains",
            **ENVELOPE,
        ),
        SessionUnplaced(
            id="e-unplaced",
            actor="scheduler",
            session_id="s1",
            owner="alice",
            agent_id="a1",
            reason="agent a1 was lost before it started the session",
            **ENVELOPE,
        ),
        SessionLost(
            id="e-session-lost",
            actor="scheduler",
            session_id="s1",
            owner="alice",
            agent_id="a1",
            reason="agent lost: a1 not heard from for 600 s",
            **ENVELOPE,
        ),
        AgentHeard(
            id="e-heard",
            actor="scheduler",
            agent_id="a1",
            **ENVELOPE,
        ),
        AgentFenced(
            id="e-fenced",
            actor="agent:a1",
            agent_id="a1",
            session_ids=("s1", "s2"),
            **ENVELOPE,
        ),
        AccessGranted(
            id="e-access-granted",
            actor="gatekeeper",
            via="nats",
            owner="AKana01",
            identity="user:ana",
            client="127.0.0.1",
            **ENVELOPE,
        ),
        AccessRefused(
            id="e-access-refused",
            actor="api",
            via="api",
            owner="AKmallory01",
            what="GET /v1/sessions",
            reason="access key 'AKmallory01' is unknown or revoked",
            client="10.0.0.7",
            **ENVELOPE,
        ),
        AccessSuppressed(
            id="e-access-suppressed",
            actor="gatekeeper",
            via="nats",
            owner="AKmallory01",
            since=datetime(2024, 5, 17, 12, 29, 15, tzinfo=UTC),
            granted=3,
            refused=4096,
            **ENVELOPE,
        ),
        RequestsDropped(
            id="e-requests-dropped",
            actor="intake",
            owner="AKmallory01",
            since=datetime(2024, 5, 17, 12, 29, 15, tzinfo=UTC),
            rate_limited=120000,
            refused=2,
            reason="a request of AKmallory01 in the name of AKvictim0001",
            **ENVELOPE,
        ),
        LogArchived(
            id="e-archived",
            actor="archiver",
            first_seq=1,
            last_seq=100_000,
            records=100_000,
            segment="seg-000000000001-000000100000.parquet",
            sha256="ab" * 32,
            **ENVELOPE,
        ),
        GpuOomRefused(
            id="e-oom",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            gpu_index=0,
            pid=4242,
            requested=256 << 20,
            mem_used=8 << 30,
            mem_limit=8 << 30,
            **ENVELOPE,
        ),
        SessionExecStarted(
            id="e-exec-started",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            requester="alice",
            argv=("nvidia-smi", "-L"),
            **ENVELOPE,
        ),
        SessionExecFinished(
            id="e-exec-finished",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            requester="alice",
            exit_code=3,
            error="timed out after 60 s: it may still run in the container",
            stdout_bytes=1 << 20,
            stderr_bytes=12,
            **ENVELOPE,
        ),
        SessionChannelOpened(
            id="e-channel-opened",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            requester="alice",
            kind="app",
            target="8888",
            service="jupyter",
            channel="c0a1b2",
            **ENVELOPE,
        ),
        SessionChannelClosed(
            id="e-channel-closed",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            requester="alice",
            channel="c0a1b2",
            bytes_in=120,
            bytes_out=1 << 16,
            exit_code=0,
            reason="the program exited",
            **ENVELOPE,
        ),
        SessionPulling(
            id="e-pulling",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            image="127.0.0.1:5000/fgpu/tool:2",
            current=3 << 20,
            total=10 << 20,
            **ENVELOPE,
        ),
        AgentImagesReported(
            id="e-images-reported",
            actor="agent:a1",
            agent_id="a1",
            images=(
                ImageInfo(
                    ref="127.0.0.1:5000/fgpu/tool:2",
                    id="sha256:" + "cd" * 32,
                    digest="sha256:" + "ef" * 32,
                    size=4 << 20,
                ),
            ),
            **ENVELOPE,
        ),
        VfolderScanned(
            id="e-vfolder-scanned",
            actor="storage:local",
            host="local",
            vfolder_id="vf-0123456789abcdef",
            bytes=5 << 30,
            files=42,
            **ENVELOPE,
        ),
        GpuOverSlice(
            id="e-over-slice",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            gpu_index=1,
            held=9 << 30,
            mem_limit=8 << 30,
            tolerance=768 << 20,
            pids=(4242, 4243),
            **ENVELOPE,
        ),
        GpuShareExceeded(
            id="e-share-exceeded",
            actor="agent:a1",
            session_id="s1",
            agent_id="a1",
            gpu_index=1,
            sm_share_ppm=250_000,
            used_ppm=610_000,
            window_s=30,
            pids=(4242,),
            **ENVELOPE,
        ),
        LogHealth(
            id="e-log-health",
            actor="archiver",
            server="fgpu",
            path="/var/lib/fgpu/store",
            state=SpaceState.OK,
            free_bytes=40 << 30,
            total_bytes=100 << 30,
            watermark_bytes=1 << 30,
            unwritable_since=datetime(2024, 5, 17, 12, 29, 15, tzinfo=UTC),
            **ENVELOPE,
        ),
        PipelineRunRequested(
            id="e-pipeline-run",
            actor="alice",
            run_id="p1",
            requester="alice",
            project="team",
            folder="p1",
            folder_request="e-folder",
            spec=PipelineSpec(
                name="demo",
                environment=(EnvVar(name="LR", value="0.1"),),
                tasks=(
                    PipelineTask(
                        name="train",
                        image="fgpu/busybox:latest",
                        command=("echo", "hi"),
                        slots=SLOTS,
                        group="default",
                        mounts=(VfolderMount(name="data", read_only=True, at="/pipeline"),),
                        dependencies=("prepare",),
                        retry_max_attempts=3,
                        retry_delay_s=10,
                        continue_on_failure=True,
                        skip=True,
                        timeout_s=3600,
                    ),
                ),
            ),
            **ENVELOPE,
        ),
        PipelineCancelRequested(
            id="e-pipeline-cancel", actor="alice", run_id="p1", requester="alice", **ENVELOPE
        ),
        PipelineRerunRequested(
            id="e-pipeline-rerun",
            actor="alice",
            run_id="p1",
            requester="alice",
            from_task="train",
            **ENVELOPE,
        ),
        PipelineRequestRefused(
            id="e-pipeline-refused",
            actor="pipeline",
            run_id="p1",
            requester="bob",
            request_id="e-pipeline-cancel",
            reason="run p1 is not yours",
            **ENVELOPE,
        ),
        PipelineTaskRequested(
            id="e-pipeline-task",
            actor="pipeline",
            run_id="p1",
            task="train",
            round=1,
            attempt=2,
            session_id="t1",
            **ENVELOPE,
        ),
        PipelineTaskEnded(
            id="e-pipeline-task-ended",
            actor="pipeline",
            run_id="p1",
            task="train",
            round=1,
            attempt=2,
            outcome="failed",
            session_id="t1",
            exit_code=3,
            reason="exit code 3",
            **ENVELOPE,
        ),
        PipelineTasksRequested(
            id="e-pipeline-tasks",
            actor="pipeline",
            run_id="p1",
            round=0,
            tasks=(
                TaskAttempt(task="a", attempt=1, session_id="t1"),
                TaskAttempt(task="b", attempt=2, session_id="t2"),
            ),
            **ENVELOPE,
        ),
        PipelineTasksEnded(
            id="e-pipeline-tasks-ended",
            actor="pipeline",
            run_id="p1",
            round=0,
            ends=(
                TaskEnd(task="a", attempt=1, outcome="succeeded", session_id="t1", exit_code=0),
                TaskEnd(task="c", attempt=0, outcome="upstream-failed", reason="x"),
            ),
            **ENVELOPE,
        ),
        PipelineRetryScheduled(
            id="e-pipeline-retry",
            actor="pipeline",
            run_id="p1",
            task="train",
            round=1,
            attempt=2,
            due=datetime(2024, 5, 17, 12, 30, 25, tzinfo=UTC),
            reason="exit code 3",
            **ENVELOPE,
        ),
        PipelineRunCancelled(
            id="e-pipeline-cancelled", actor="pipeline", run_id="p1", requester="alice", **ENVELOPE
        ),
        PipelineRerunStarted(
            id="e-pipeline-rerun-started",
            actor="pipeline",
            run_id="p1",
            round=1,
            from_task="train",
            tasks=("train", "eval"),
            **ENVELOPE,
        ),
        PipelineRunEnded(
            id="e-pipeline-ended",
            actor="pipeline",
            run_id="p1",
            round=1,
            outcome="failed",
            reason="task train failed",
            **ENVELOPE,
        ),
        PipelineScheduleSet(
            id="e-pipeline-schedule",
            actor="alice",
            schedule_id="c1",
            requester="alice",
            cron="*/5 * * * *",
            spec=PipelineSpec(name="demo", tasks=()),
            project="team",
            **ENVELOPE,
        ),
        PipelineScheduleRemoved(
            id="e-pipeline-unschedule",
            actor="alice",
            schedule_id="c1",
            requester="alice",
            **ENVELOPE,
        ),
        PipelineScheduleFired(
            id="e-pipeline-fired",
            actor="pipeline",
            schedule_id="c1",
            owner="alice",
            due=datetime(2024, 5, 17, 12, 30, tzinfo=UTC),
            run_id="p2",
            **ENVELOPE,
        ),
        PipelineScheduleRefused(
            id="e-pipeline-schedule-refused",
            actor="pipeline",
            schedule_id="c1",
            owner="alice",
            due=datetime(2024, 5, 17, 12, 35, tzinfo=UTC),
            reason="access key alice is revoked",
            **ENVELOPE,
        ),
        ServeRequested(
            id="e-serve-requested",
            actor="alice",
            requester="alice",
            command=CreateEndpoint(
                endpoint_id="ep-1",
                name="sentiment",
                project="nlp",
                group="gpus",
                public=False,
                revision=REVISION,
                replicas=2,
            ),
            **ENVELOPE,
        ),
        ServeRefused(
            id="e-serve-refused",
            actor="serving",
            requester="alice",
            code="conflict",
            reason="an endpoint named sentiment exists",
            **ENVELOPE,
        ),
        EndpointCreated(
            id="e-endpoint-created",
            actor="serving",
            endpoint_id="ep-1",
            name="sentiment",
            owner="alice",
            domain="acme",
            project="nlp",
            group="gpus",
            public=False,
            **ENVELOPE,
        ),
        RevisionAdded(
            id="e-revision-added",
            actor="serving",
            endpoint_id="ep-1",
            revision=1,
            spec=REVISION,
            requester="alice",
            **ENVELOPE,
        ),
        ReplicasSet(
            id="e-replicas-set",
            actor="serving",
            endpoint_id="ep-1",
            targets=(RevisionTarget(revision=1, replicas=2, traffic=100),),
            requester="alice",
            **ENVELOPE,
        ),
        EndpointRemoved(
            id="e-endpoint-removed",
            actor="serving",
            endpoint_id="ep-1",
            requester="alice",
            **ENVELOPE,
        ),
        TokenCreated(
            id="e-token-created",
            actor="serving",
            endpoint_id="ep-1",
            token_id="t1",
            sha256="0" * 64,
            expires_at=datetime(2025, 5, 17, tzinfo=UTC),
            requester="alice",
            **ENVELOPE,
        ),
        TokenRevoked(
            id="e-token-revoked",
            actor="serving",
            endpoint_id="ep-1",
            token_id="t1",
            requester="alice",
            **ENVELOPE,
        ),
        ReplicaChanged(
            id="e-replica-changed",
            actor="serving",
            endpoint_id="ep-1",
            session_id="s0123456789ab",
            revision=1,
            ordinal=0,
            generation=1,
            phase=ReplicaPhase.WARMING,
            host="172.30.0.5",
            port=8000,
            reason="running",
            **ENVELOPE,
        ),
        ReplicaRotation(
            id="e-replica-rotation",
            actor="serving",
            endpoint_id="ep-1",
            session_id="s0123456789ab",
            in_rotation=True,
            **ENVELOPE,
        ),
        ReplicaHealthReported(
            id="e-replica-health",
            actor="router:r1",
            router="r1",
            endpoint_id="ep-1",
            session_id="s0123456789ab",
            healthy=False,
            detail="GET /health: 503",
            **ENVELOPE,
        ),
        RolloutStarted(
            id="e-rollout-started",
            actor="serving",
            endpoint_id="ep-1",
            revision=2,
            replicas=3,
            policy=RolloutPolicy(max_surge=2, max_unavailable=1),
            requester="alice",
            **ENVELOPE,
        ),
        RolloutEnded(
            id="e-rollout-ended",
            actor="serving",
            endpoint_id="ep-1",
            revision=2,
            outcome="done",
            **ENVELOPE,
        ),
        ServingTicked(id="e-serving-ticked", actor="serving", **ENVELOPE),
        AutoscaleSet(
            id="e-autoscale-set",
            actor="serving",
            endpoint_id="ep-1",
            rule=AutoscaleRule(
                metric="rps_per_replica",
                up=20.0,
                down=5.0,
                step=1,
                cooldown_s=30.0,
                min_replicas=0,
                max_replicas=4,
                cold_start_s=30.0,
            ),
            requester="AKuma",
            **ENVELOPE,
        ),
        RouteStatsReported(
            id="e-route-stats",
            actor="router:r1",
            router="r1",
            endpoint_id="ep-1",
            window_ms=1000,
            requests=42,
            in_flight=3,
            queued=0,
            p95_ms=None,
            **ENVELOPE,
        ),
        SecretSet(
            id="e-secret-set",
            actor="alice",
            owner="alice",
            name="hf",
            sealed=bytes(range(64)),
            **ENVELOPE,
        ),
        SecretRemoved(id="e-secret-removed", actor="alice", owner="alice", name="hf", **ENVELOPE),
        SecretsKeySet(id="e-secrets-key", actor="system", public_key=bytes(32), **ENVELOPE),
    ]
}

SAMPLES = list(DECODED_V1.values())


def fixture_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


# ---- round trips ----------------------------------------------------------------------------


def test_there_is_a_sample_of_every_event_type() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: tag(type(e)))
def test_every_event_round_trips(event: AnyEvent) -> None:
    payload = encode(event)
    assert json.loads(payload)["type"] == tag(type(event))
    decoded = decode(payload)
    assert type(decoded) is type(event)
    assert decoded == event
    assert encode(decoded) == payload


# An amount on the log is bounded (events.slots.AMOUNT_LIMIT): the events hypothesis builds
# hold amounts within the bound, as every decodable event does.
_AMOUNT = st.integers(-AMOUNT_LIMIT, AMOUNT_LIMIT)
st.register_type_strategy(Slots, st.builds(Slots, cpu=_AMOUNT, mem=_AMOUNT, fgpu=_AMOUNT))
# A token's hash on the log is 64 lower-case hex digits (events.serving), as every decodable
# event that holds one holds.
_SHA256 = st.text("0123456789abcdef", min_size=64, max_size=64)
st.register_type_strategy(TokenCreated, st.builds(TokenCreated, sha256=_SHA256))
st.register_type_strategy(CreateToken, st.builds(CreateToken, sha256=_SHA256))
# Seconds are finite: JSON has no NaN or infinity (msgspec writes null), so no event that
# holds either could be read back.
_SECONDS = st.floats(min_value=0, max_value=86_400)
st.register_type_strategy(
    AutoscaleRule,
    st.builds(
        AutoscaleRule, up=_SECONDS, down=_SECONDS, cooldown_s=_SECONDS, cold_start_s=_SECONDS
    ),
)
st.register_type_strategy(
    HealthSpec,
    st.builds(HealthSpec, interval_s=_SECONDS, timeout_s=_SECONDS, initial_delay_s=_SECONDS),
)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(EVENT_TYPES).flatmap(st.from_type))
def test_any_event_round_trips(event: AnyEvent) -> None:
    assert decode(encode(event)) == event


def test_amounts_are_integers_on_the_wire() -> None:
    raw = json.loads(encode(DECODED_V1["session.requested.v1"]))
    assert raw["slots"] == {"cpu": 1500, "mem": 3 << 30, "fgpu": 250}
    assert raw["at"] == "2024-05-17T12:30:15.250000Z"


# ---- refusals -------------------------------------------------------------------------------


def raw_of(event: AnyEvent) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(encode(event))
    return raw


def requested_raw() -> dict[str, Any]:
    return raw_of(DECODED_V1["session.requested.v1"])


def refused(raw: Any) -> msgspec.ValidationError:
    with pytest.raises(msgspec.ValidationError) as caught:
        decode(json.dumps(raw).encode())
    return caught.value


def test_an_unknown_field_is_refused() -> None:
    raw = requested_raw()
    raw["gpu_count"] = 2
    assert "gpu_count" in str(refused(raw))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("slots", "extra"), 1),
        (("devices", 0, "extra"), 1),
    ],
)
def test_an_unknown_field_in_a_nested_struct_is_refused(
    path: tuple[Any, ...], value: object
) -> None:
    raw = raw_of(DECODED_V1["session.scheduled.v1"])
    target: Any = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    refused(raw)


def test_an_unknown_gpu_field_is_refused() -> None:
    raw = raw_of(DECODED_V1["agent.registered.v1"])
    raw["gpus"][0]["temperature"] = 40
    refused(raw)


@pytest.mark.parametrize("type_", ["session.exploded.v1", "session.requested.v9", "", 3, None])
def test_an_unknown_type_is_refused(type_: object) -> None:
    raw = requested_raw()
    raw["type"] = type_
    refused(raw)


def test_a_missing_type_is_refused() -> None:
    raw = requested_raw()
    del raw["type"]
    refused(raw)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("slots", {"cpu": 1000, "mem": 1 << 30, "fgpu": 0.5}),  # a float fGPU
        ("slots", {"cpu": 1000, "mem": 1 << 30, "fgpu": "50"}),
        ("slots", {"cpu": 1.5, "mem": 1, "fgpu": 1}),
        ("slots", [1, 2, 3]),
        ("priority", "high"),
        ("priority", 1.0),
        ("command", "echo hi"),
        ("at", "yesterday"),
        ("at", 1700000000),
        ("session_id", 7),
        ("name", ["a"]),
    ],
)
def test_a_field_of_the_wrong_type_is_refused(field: str, value: object) -> None:
    raw = requested_raw()
    raw[field] = value
    assert f"$.{field}" in str(refused(raw))


def test_a_missing_field_is_refused() -> None:
    raw = requested_raw()
    del raw["slots"]
    assert "slots" in str(refused(raw))


@pytest.mark.parametrize("payload", [b"", b"{", b"not json", b"\xff\xfe", b'{"type": }'])
def test_non_json_is_refused(payload: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode(payload)


@pytest.mark.parametrize("payload", [b"[]", b"42", b'"session.requested.v1"', b"null"])
def test_json_that_is_not_an_object_is_refused(payload: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(payload)


# ---- the schema -----------------------------------------------------------------------------


def test_the_schema_names_every_event_tag() -> None:
    schema = json_schema()
    tags = sorted(tag(t) for t in EVENT_TYPES)
    assert schema["x-event-types"] == tags
    assert sorted(schema["discriminator"]["mapping"]) == tags
    assert schema["discriminator"]["propertyName"] == "type"
    for t in EVENT_TYPES:
        definition = schema["$defs"][t.__name__]
        assert definition["properties"]["type"] == {"enum": [tag(t)]}
    json.dumps(schema)  # plain JSON, for integrations in any language


def test_the_schema_says_amounts_are_integers() -> None:
    slots = json_schema()["$defs"]["Slots"]["properties"]
    assert {slots[k]["type"] for k in ("cpu", "mem", "fgpu")} == {"integer"}


def test_a_running_report_carries_the_replicas_address_and_an_older_one_decodes_without() -> None:
    """``host`` was added to session.running.v1 with a default: the v1 line decodes to
    None; a report with an address round-trips it."""
    [line] = [x for x in fixture_lines(V1) if b'"session.running.v1"' in x]
    older = decode(line)
    assert isinstance(older, SessionRunning) and older.host is None
    newer = msgspec.structs.replace(older, host="172.30.0.5")
    assert decode(encode(newer)) == newer


def test_a_usage_sample_carries_the_gpu_time_charged_and_an_older_one_decodes_without() -> None:
    """``charged_ns`` was added to gpu.usage-sampled.v1 with a default: the v1 line (as
    older logs hold it) decodes to None, not counted; a new sample round-trips it."""
    [line] = [x for x in fixture_lines(V1) if b'"gpu.usage-sampled.v1"' in x]
    older = decode(line)
    assert isinstance(older, GpuUsageSampled) and older.charged_ns is None
    newer = msgspec.structs.replace(older, charged_ns=1_234_567_890)
    assert decode(encode(newer)) == newer


# ---- encoded samples of every version (schema evolution guard) -------------------------------


def test_v1_fixture_has_one_line_per_v1_event_type() -> None:
    tags = [json.loads(line)["type"] for line in fixture_lines(V1)]
    assert len(tags) == len(set(tags))
    assert set(tags) == set(DECODED_V1)


@pytest.mark.parametrize("line", fixture_lines(V1), ids=lambda line: json.loads(line)["type"])
def test_v1_samples_still_decode(line: bytes) -> None:
    expected = DECODED_V1[json.loads(line)["type"]]
    decoded = decode(line)
    assert type(decoded) is type(expected)
    assert decoded == expected


def test_every_current_event_type_has_an_encoded_sample() -> None:
    """A new event (or a new version of one) needs its sample in a fixture file."""
    stored = {
        json.loads(line)["type"]
        for path in sorted(FIXTURES.glob("events_v*.jsonl"))
        for line in fixture_lines(path)
    }
    missing = sorted({tag(t) for t in EVENT_TYPES} - stored)
    assert not missing, f"append encode(<a sample>) of {missing} to tests/fixtures/events_vN.jsonl"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("alice", True),
        ("s-0_A", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("alice\n", False),  # a regex's ``$`` matches before a final newline
        ("al.ice", False),  # a dot would split the subject
        ("al*", False),
        ("alice bob", False),
    ],
)
def test_a_subject_token_is_letters_digits_dash_and_underscore_only(value: str, ok: bool) -> None:
    assert subj.is_token(value) is ok


@pytest.mark.parametrize("amount", [-AMOUNT_LIMIT, -1, 0, AMOUNT_LIMIT])
def test_an_amount_within_the_limit_decodes_whatever_its_sign(amount: int) -> None:
    """Decoding bounds an amount's magnitude only: a negative one in a request is the
    fold's to refuse (a session rejected with its reason), and a snapshot's state may
    hold a difference below zero."""
    assert msgspec.json.decode(f'{{"cpu": {amount}}}'.encode(), type=Slots).cpu == amount


@pytest.mark.parametrize("amount", [-AMOUNT_LIMIT - 1, AMOUNT_LIMIT + 1])
def test_an_amount_beyond_the_limit_is_refused(amount: int) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(f'{{"fgpu": {amount}}}'.encode(), type=Slots)
