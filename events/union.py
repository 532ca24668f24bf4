"""The union of every event type: the one type the log carries."""

import typing

import msgspec

from events.access import AccessGranted, AccessRefused, AccessSuppressed, RequestsDropped
from events.agent import (
    AgentFenced,
    AgentHeard,
    AgentImagesReported,
    AgentLost,
    AgentRegistered,
)
from events.archive import LogArchived
from events.health import LogHealth
from events.pipeline import (
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
    PipelineTaskEnded,
    PipelineTaskRequested,
    PipelineTasksEnded,
    PipelineTasksRequested,
)
from events.secret import SecretRemoved, SecretSet, SecretsKeySet
from events.serving import (
    AutoscaleSet,
    EndpointCreated,
    EndpointRemoved,
    ReplicaChanged,
    ReplicaHealthReported,
    ReplicaRotation,
    ReplicasSet,
    RevisionAdded,
    RolloutEnded,
    RolloutStarted,
    RouteStatsReported,
    ServeRefused,
    ServeRequested,
    ServingTicked,
    TokenCreated,
    TokenRevoked,
)
from events.session import (
    DestroyRejected,
    PayloadRejected,
    PolicySet,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionErrored,
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
)
from events.session_exec import (
    SessionChannelClosed,
    SessionChannelOpened,
    SessionExecFinished,
    SessionExecStarted,
)
from events.tenancy import AdminApplied, AdminRefused, AdminRequested
from events.usage import (
    GpuOomRefused,
    GpuOverSlice,
    GpuShareExceeded,
    GpuUsageSampled,
    SessionCpuSampled,
)
from events.vfolder import VfolderScanned

__all__ = ["EVENT_TYPES", "AnyEvent"]

AnyEvent = (
    SessionRequested
    | SessionDestroyRequested
    | SessionAdmitted
    | SessionRejected
    | SessionScheduled
    | SessionQueued
    | SessionCancelled
    | SessionTerminating
    | SessionPreparing
    | SessionRunning
    | SessionTerminated
    | SessionErrored
    | DestroyRejected
    | PolicySet
    | PayloadRejected
    | AgentRegistered
    | AgentLost
    | GpuUsageSampled
    | GpuOomRefused
    | SessionCpuSampled
    | AdminRequested
    | AdminApplied
    | AdminRefused
    | AccessGranted
    | AccessRefused
    | AccessSuppressed
    | RequestsDropped
    | SessionUnplaced
    | SessionLost
    | AgentFenced
    | AgentHeard
    | LogArchived
    | SessionExecStarted
    | SessionExecFinished
    | SessionChannelOpened
    | SessionChannelClosed
    | SessionPulling
    | AgentImagesReported
    | VfolderScanned
    | GpuOverSlice
    | GpuShareExceeded
    | LogHealth
    | PipelineRunRequested
    | PipelineCancelRequested
    | PipelineRerunRequested
    | PipelineRequestRefused
    | PipelineTaskRequested
    | PipelineTaskEnded
    | PipelineTasksRequested
    | PipelineTasksEnded
    | PipelineRetryScheduled
    | PipelineRunCancelled
    | PipelineRerunStarted
    | PipelineRunEnded
    | PipelineScheduleSet
    | PipelineScheduleRemoved
    | PipelineScheduleFired
    | PipelineScheduleRefused
    | EndpointCreated
    | EndpointRemoved
    | ReplicaChanged
    | ReplicaHealthReported
    | ReplicaRotation
    | ReplicasSet
    | RouteStatsReported
    | AutoscaleSet
    | RevisionAdded
    | ServeRefused
    | ServeRequested
    | TokenCreated
    | TokenRevoked
    | RolloutStarted
    | RolloutEnded
    | ServingTicked
    | SecretSet
    | SecretRemoved
    | SecretsKeySet
)

EVENT_TYPES: tuple[type[msgspec.Struct], ...] = typing.get_args(AnyEvent)
