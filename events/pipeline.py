"""Pipelines: a run of a DAG of tasks, each task a batch session.

A person asks (``PipelineRunRequested``, ``PipelineCancelRequested``,
``PipelineRerunRequested``) on their own request subject ``fgpu.req.<key>.<run_id>``,
handed in through the intake as a session request is. The pipeline actor answers on the
run's own subject ``fgpu.pipe.<run_id>``: each task's session asked for
(``PipelineTasksRequested``, written in one atomic batch with the ``SessionRequested``
events it names, in the owner's name: the quota actor judges each against the owner's
rights as they stand then), each task's end, retries with their due time, the run's cancellation and
end, and refusals. Who writes what is in ``docs/events.md``.
"""

from datetime import datetime
from typing import Literal

import msgspec

from events.base import Event
from events.slots import Slots
from events.vfolder import VfolderMount

__all__ = [
    "EnvVar",
    "PipelineCancelRequested",
    "PipelineRequestRefused",
    "PipelineRerunRequested",
    "PipelineRerunStarted",
    "PipelineRetryScheduled",
    "PipelineRunCancelled",
    "PipelineRunEnded",
    "PipelineRunRequested",
    "PipelineScheduleFired",
    "PipelineScheduleRefused",
    "PipelineScheduleRemoved",
    "PipelineScheduleSet",
    "PipelineSpec",
    "PipelineTask",
    "PipelineTaskEnded",
    "PipelineTaskRequested",
    "PipelineTasksEnded",
    "PipelineTasksRequested",
    "RunOutcome",
    "ServeTask",
    "TaskAttempt",
    "TaskEnd",
    "TaskOutcome",
]

TaskOutcome = Literal["succeeded", "failed", "skipped", "upstream-failed", "cancelled"]
RunOutcome = Literal["succeeded", "failed", "cancelled", "refused"]


class EnvVar(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One environment variable of a run's tasks: ``value`` in clear, or, with ``secret``,
    the name of the run owner's secret whose value the agent puts there at the start
    (``value`` then empty: a value never stands on the log)."""

    name: str
    value: str
    secret: str | None = None


class ServeTask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """What a task of kind ``serve`` deploys: endpoint ``endpoint`` (the owner's: a new
    revision of it if the owner has one of that name, else a new endpoint) with
    ``replicas`` replicas answering HTTP on ``port``, checked at ``health_path``;
    ``public``: callable without a token (a new endpoint only); ``model``: a folder of the
    owner's mounted read-only."""

    endpoint: str
    port: int = 8000
    replicas: int = 1
    public: bool = False
    health_path: str = "/health"
    model: str | None = None


class PipelineTask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One task as the run asked for it, amounts exact. ``slots.fgpu`` 0: a CPU-only
    session. ``retry_max_attempts``: attempts in all (1: no retry), each
    ``retry_delay_s`` after the last one's failure. ``timeout_s``: the session's
    lifetime (None: its group's default), and for a serve task how long it waits for its
    replicas to be healthy. ``kind`` ``serve``: the task deploys ``serve``
    (its image, command and slots each replica's), and succeeds once its replicas are
    healthy."""

    name: str
    kind: Literal["session", "serve"] = "session"
    image: str
    command: tuple[str, ...]
    slots: Slots
    group: str | None = None
    mounts: tuple[VfolderMount, ...] = ()
    dependencies: tuple[str, ...] = ()
    retry_max_attempts: int = 1
    retry_delay_s: int = 0
    continue_on_failure: bool = False
    skip: bool = False
    timeout_s: int | None = None
    serve: ServeTask | None = None
    environment: tuple[EnvVar, ...] = ()  # its own, over the run's (same name: this one)


class PipelineSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A pipeline as run: its name, the environment every task gets, its tasks."""

    version: int = 1
    name: str
    environment: tuple[EnvVar, ...] = ()
    tasks: tuple[PipelineTask, ...]


class PipelineRunRequested(Event, frozen=True, kw_only=True, tag="pipeline.run-requested.v1"):
    """``requester`` asks to run ``spec`` as run ``run_id`` (its sessions in ``project``;
    None: the user's default project). ``folder``: the id of the run's folder, mounted at
    ``/pipeline`` in every task, asked for by the requester's ``folder_request`` (an
    ``admin.requested`` creating it, handed in with this): no task runs before the
    registrar has made it (None: a run without a folder)."""

    run_id: str
    requester: str
    spec: PipelineSpec
    project: str | None = None
    folder: str | None = None
    folder_request: str | None = None


class PipelineCancelRequested(Event, frozen=True, kw_only=True, tag="pipeline.cancel-requested.v1"):
    """``requester`` asks to cancel run ``run_id`` (only its owner may)."""

    run_id: str
    requester: str


class PipelineRerunRequested(Event, frozen=True, kw_only=True, tag="pipeline.rerun-requested.v1"):
    """``requester`` asks to run ended run ``run_id`` again from task ``from_task``: that
    task and every task after it, in the same run and its folder."""

    run_id: str
    requester: str
    from_task: str


class PipelineRequestRefused(Event, frozen=True, kw_only=True, tag="pipeline.request-refused.v1"):
    """The pipeline actor refused request ``request_id`` of ``requester`` about
    ``run_id``; ``reason`` is shown as is."""

    run_id: str
    requester: str
    request_id: str
    reason: str


class PipelineTaskRequested(Event, frozen=True, kw_only=True, tag="pipeline.task-requested.v1"):
    """One attempt asked for, as ``PipelineTasksRequested`` asks for several (which took
    its place; older logs hold this, and the fold still reads it)."""

    run_id: str
    task: str
    round: int
    attempt: int
    session_id: str


class PipelineTaskEnded(Event, frozen=True, kw_only=True, tag="pipeline.task-ended.v1"):
    """One task's end, as ``PipelineTasksEnded`` says several (which took its place;
    older logs hold this, and the fold still reads it)."""

    run_id: str
    task: str
    round: int
    attempt: int
    outcome: TaskOutcome
    session_id: str | None = None
    exit_code: int | None = None
    reason: str = ""


class TaskAttempt(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Attempt ``attempt`` (from 1) of ``task`` asked for as session ``session_id`` (a
    ``serve`` task's: as the ``serve.requested`` of that id, in the owner's name)."""

    task: str
    attempt: int
    session_id: str
    kind: Literal["session", "serve"] = "session"


class PipelineTasksRequested(Event, frozen=True, kw_only=True, tag="pipeline.tasks-requested.v1"):
    """The attempts ``tasks`` of round ``round`` asked for at once (those one decision
    freed: a fan-out is one event, not one per task), each written with its session's
    request in the same atomic batch: each attempt asked for once or not at all."""

    run_id: str
    round: int
    tasks: tuple[TaskAttempt, ...]


class TaskEnd(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """``task``'s attempt ``attempt`` ended with ``outcome`` (as ``PipelineTaskEnded``)."""

    task: str
    attempt: int
    outcome: TaskOutcome
    session_id: str | None = None
    exit_code: int | None = None
    reason: str = ""


class PipelineTasksEnded(Event, frozen=True, kw_only=True, tag="pipeline.tasks-ended.v1"):
    """The ends ``ends`` of tasks of round ``round``, in the order they were decided (the
    ends one decision made: the sessions that ended in one batch of the log, and the
    skips and upstream failures they set off)."""

    run_id: str
    round: int
    ends: tuple[TaskEnd, ...]


class PipelineRetryScheduled(Event, frozen=True, kw_only=True, tag="pipeline.retry-scheduled.v1"):
    """Attempt ``attempt`` of ``task`` failed; attempt ``attempt + 1`` is asked for at
    ``due`` (a time on the log: a restarted actor keeps it)."""

    run_id: str
    task: str
    round: int
    attempt: int
    due: datetime
    reason: str = ""


class PipelineRunCancelled(Event, frozen=True, kw_only=True, tag="pipeline.run-cancelled.v1"):
    """Run ``run_id`` is cancelled at ``requester``'s request: no task is asked for any
    more, and the sessions of those running are asked to end."""

    run_id: str
    requester: str


class PipelineRerunStarted(Event, frozen=True, kw_only=True, tag="pipeline.rerun-started.v1"):
    """Round ``round`` of run ``run_id`` begins: ``tasks`` (``from_task`` and every task
    after it) wait to run again."""

    run_id: str
    round: int
    from_task: str
    tasks: tuple[str, ...]


class PipelineRunEnded(Event, frozen=True, kw_only=True, tag="pipeline.run-ended.v1"):
    """Run ``run_id`` ended (its round ``round``) with ``outcome``; ``reason`` says why
    when it was refused or failed."""

    run_id: str
    round: int
    outcome: RunOutcome
    reason: str = ""


class PipelineScheduleSet(Event, frozen=True, kw_only=True, tag="pipeline.schedule-set.v1"):
    """``requester`` asks that ``spec`` be run at each time ``cron`` names (five fields,
    UTC), as its own runs: each checked against its rights when it comes. Set again with
    the same ``schedule_id``: the first stands."""

    schedule_id: str
    requester: str
    cron: str
    spec: PipelineSpec
    project: str | None = None


class PipelineScheduleRemoved(Event, frozen=True, kw_only=True, tag="pipeline.schedule-removed.v1"):
    """``requester`` asks that schedule ``schedule_id`` run no more (only its owner may)."""

    schedule_id: str
    requester: str


class PipelineScheduleFired(Event, frozen=True, kw_only=True, tag="pipeline.schedule-fired.v1"):
    """The schedule's time ``due`` came and its owner may run: run ``run_id`` is asked for
    in the owner's name, in one atomic batch with this."""

    schedule_id: str
    owner: str
    due: datetime
    run_id: str


class PipelineScheduleRefused(Event, frozen=True, kw_only=True, tag="pipeline.schedule-refused.v1"):
    """The schedule's time ``due`` came, and its owner may not run (``reason``: its key
    revoked, its user removed): no run."""

    schedule_id: str
    owner: str
    due: datetime
    reason: str
