"""On which subject each event stands; only there does it count (docs/events.md).

A user's NATS permissions confine them to ``fgpu.req.<their key>.>``; checking each
event against its subject makes that confinement mean something for every reader of the
log: a user cannot write a decision, nor a request in another key's name.
"""

from collections.abc import Callable
from typing import Any, TypeVar

import events as ev
from events import subjects as subj

__all__ = ["ALSO_ON", "SUBJECT_OF", "mismatch"]


_E = TypeVar("_E", bound=ev.Event)


def _rule(
    t: type[_E], subject_of: Callable[[_E], str]
) -> tuple[type[ev.Event], Callable[[Any], str]]:
    """A row of ``SUBJECT_OF``, typed so that mypy checks ``subject_of`` against ``t``."""
    return t, subject_of


def _ledger(e: ev.Event) -> str:
    return subj.LEDGER


def _serving(e: ev.Event) -> str:
    return subj.SERVING


def _agent_session(
    e: ev.SessionPreparing
    | ev.SessionPulling
    | ev.SessionRunning
    | ev.SessionTerminated
    | ev.SessionErrored,
) -> str:
    return subj.agent_session(e.agent_id, e.session_id)


def _exec(
    e: ev.SessionExecStarted
    | ev.SessionExecFinished
    | ev.SessionChannelOpened
    | ev.SessionChannelClosed,
) -> str:
    return subj.agent_exec(e.agent_id, e.session_id)


def _usage(
    e: ev.GpuUsageSampled
    | ev.GpuOomRefused
    | ev.SessionCpuSampled
    | ev.GpuOverSlice
    | ev.GpuShareExceeded,
) -> str:
    return subj.usage(e.agent_id, e.session_id)


def _pipeline_request(
    e: ev.PipelineRunRequested | ev.PipelineCancelRequested | ev.PipelineRerunRequested,
) -> str:
    # A person's request about a run stands on its own request subject, as a session's.
    return subj.request(e.requester, e.run_id)


def _pipeline_run(
    e: ev.PipelineRequestRefused
    | ev.PipelineTaskRequested
    | ev.PipelineTaskEnded
    | ev.PipelineTasksRequested
    | ev.PipelineTasksEnded
    | ev.PipelineRetryScheduled
    | ev.PipelineRunCancelled
    | ev.PipelineRerunStarted
    | ev.PipelineRunEnded,
) -> str:
    return subj.pipeline_run(e.run_id)


# Each event type's own subject, looked up by exact type (a dict lookup, where a chain of
# class patterns costs an isinstance each): ``SUBJECT_OF[type(e)](e)``.
SUBJECT_OF: dict[type[ev.Event], Callable[[Any], str]] = dict(
    [
        _rule(ev.SessionRequested, lambda e: subj.request(e.owner, e.session_id)),
        _rule(ev.SessionDestroyRequested, lambda e: subj.request(e.requester, e.session_id)),
        _rule(ev.SessionAdmitted, lambda e: subj.ADMISSION),
        _rule(ev.PolicySet, lambda e: subj.quota(e.owner)),
        _rule(ev.SessionRejected, lambda e: subj.ADMISSION),
        _rule(ev.SessionScheduled, _ledger),
        _rule(ev.SessionQueued, _ledger),
        _rule(ev.SessionCancelled, _ledger),
        _rule(ev.SessionTerminating, _ledger),
        _rule(ev.DestroyRejected, _ledger),
        _rule(ev.AgentLost, _ledger),
        _rule(ev.SessionPreparing, _agent_session),
        _rule(ev.SessionPulling, _agent_session),
        _rule(ev.SessionRunning, _agent_session),
        _rule(ev.SessionTerminated, _agent_session),
        _rule(ev.SessionErrored, _agent_session),
        _rule(ev.AgentRegistered, lambda e: subj.agent(e.agent_id)),
        _rule(ev.PayloadRejected, lambda e: subj.SYS),
        _rule(ev.GpuUsageSampled, _usage),
        _rule(ev.GpuOomRefused, _usage),
        _rule(ev.SessionCpuSampled, _usage),
        _rule(ev.GpuOverSlice, _usage),
        _rule(ev.GpuShareExceeded, _usage),
        _rule(ev.AdminRequested, lambda e: subj.admin(e.requester, e.id)),
        _rule(ev.AdminApplied, lambda e: subj.TENANCY),
        _rule(ev.AdminRefused, lambda e: subj.TENANCY),
        _rule(ev.SessionUnplaced, _ledger),
        _rule(ev.SessionLost, _ledger),
        _rule(ev.AgentFenced, lambda e: subj.agent(e.agent_id)),
        _rule(ev.AgentImagesReported, lambda e: subj.agent(e.agent_id)),
        _rule(ev.AgentHeard, _ledger),
        _rule(ev.AccessGranted, lambda e: subj.access(e.via)),
        _rule(ev.AccessRefused, lambda e: subj.access(e.via)),
        _rule(ev.AccessSuppressed, lambda e: subj.access(e.via)),
        _rule(ev.RequestsDropped, lambda e: subj.access("intake")),
        _rule(ev.LogArchived, lambda e: subj.ARCHIVE),
        _rule(ev.SessionExecStarted, _exec),
        _rule(ev.SessionExecFinished, _exec),
        _rule(ev.SessionChannelOpened, _exec),
        _rule(ev.SessionChannelClosed, _exec),
        _rule(ev.VfolderScanned, lambda e: subj.storage(e.host)),
        _rule(ev.LogHealth, lambda e: subj.health(e.server)),
        _rule(ev.PipelineRunRequested, _pipeline_request),
        _rule(ev.PipelineCancelRequested, _pipeline_request),
        _rule(ev.PipelineRerunRequested, _pipeline_request),
        _rule(ev.PipelineRequestRefused, _pipeline_run),
        _rule(ev.PipelineTaskRequested, _pipeline_run),
        _rule(ev.PipelineTaskEnded, _pipeline_run),
        _rule(ev.PipelineTasksRequested, _pipeline_run),
        _rule(ev.PipelineTasksEnded, _pipeline_run),
        _rule(ev.PipelineRetryScheduled, _pipeline_run),
        _rule(ev.PipelineRunCancelled, _pipeline_run),
        _rule(ev.PipelineRerunStarted, _pipeline_run),
        _rule(ev.PipelineRunEnded, _pipeline_run),
        _rule(ev.PipelineScheduleSet, lambda e: subj.request(e.requester, e.schedule_id)),
        _rule(ev.PipelineScheduleRemoved, lambda e: subj.request(e.requester, e.schedule_id)),
        _rule(ev.PipelineScheduleFired, lambda e: subj.pipeline_run(e.schedule_id)),
        _rule(ev.PipelineScheduleRefused, lambda e: subj.pipeline_run(e.schedule_id)),
        _rule(ev.ServeRequested, lambda e: subj.request(e.requester, e.id)),
        _rule(ev.ServeRefused, _serving),
        _rule(ev.EndpointCreated, _serving),
        _rule(ev.RevisionAdded, _serving),
        _rule(ev.ReplicasSet, _serving),
        _rule(ev.EndpointRemoved, _serving),
        _rule(ev.TokenCreated, _serving),
        _rule(ev.TokenRevoked, _serving),
        _rule(ev.ReplicaChanged, _serving),
        _rule(ev.ReplicaRotation, _serving),
        _rule(ev.ReplicaHealthReported, lambda e: subj.route(e.router)),
        _rule(ev.RolloutStarted, _serving),
        _rule(ev.RolloutEnded, _serving),
        _rule(ev.ServingTicked, _serving),
        _rule(ev.AutoscaleSet, _serving),
        _rule(ev.RouteStatsReported, lambda e: subj.route(e.router)),
        # A secret's request stands on its owner's own subject: nobody sets another's.
        _rule(ev.SecretSet, lambda e: subj.request(e.owner, e.id)),
        _rule(ev.SecretRemoved, lambda e: subj.request(e.owner, e.id)),
        _rule(ev.SecretsKeySet, lambda e: subj.TENANCY),
    ]
)


def _owners_account(e: ev.SessionAdmitted | ev.SessionRejected) -> tuple[str, ...]:
    # Where quota decisions stood before fgpu.admission: a log keeps them there.
    return (subj.quota(e.owner),)


# Other subjects an event may stand on: quota decisions on their owner's account (as logs
# from before fgpu.admission hold them), and the scheduler's rejection of a session that
# never fits on the ledger.
def _rejected_also(e: ev.SessionRejected) -> tuple[str, ...]:
    return (*_owners_account(e), subj.LEDGER)


ALSO_ON: dict[type[ev.Event], Callable[[Any], tuple[str, ...]]] = {
    ev.SessionAdmitted: _owners_account,
    ev.SessionRejected: _rejected_also,
}


def mismatch(subject: str, e: ev.AnyEvent) -> str | None:
    """Why ``e`` may not stand on ``subject``, or None.

    ``SUBJECT_OF[type(e)](e) == subject`` is the quick check that it may.
    """
    own = SUBJECT_OF[type(e)](e)
    also = ALSO_ON.get(type(e))
    if subject == own or (also is not None and subject in also(e)):
        return None
    tag = e.__struct_config__.tag
    return f"{tag} may not stand on subject {subject} (its subject is {own})"
