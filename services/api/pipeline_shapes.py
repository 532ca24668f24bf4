"""The one shape of a pipeline run, as the read API answers it and the CLI prints it."""

from datetime import datetime

from pydantic import BaseModel

from services.domain.pipelines.runs import Run
from services.domain.pipelines.schedules import Schedule, next_time

__all__ = [
    "PipelineRun",
    "PipelineSchedule",
    "RunPage",
    "SchedulePage",
    "TaskView",
    "run_shape",
    "schedule_shape",
]


class TaskView(BaseModel):
    name: str
    dependencies: list[str]
    status: str  # waiting, requested, attempt-failed, retry, or how it ended
    attempt: int  # of this round (0: never asked for)
    max_attempts: int
    session_id: str | None
    session_status: str | None  # its current session's (PENDING, RUNNING, ...)
    exit_code: int | None
    reason: str
    due: datetime | None  # when the next attempt is asked for (status retry)


class PipelineRun(BaseModel):
    run_id: str
    name: str
    owner: str
    project: str | None
    status: str  # running, cancelling, succeeded, failed, cancelled, refused
    reason: str
    round: int
    requested_at: datetime
    ended_at: datetime | None
    tasks: list[TaskView]  # each after those it depends on


class RunPage(BaseModel):
    total: int
    runs: list[PipelineRun]


def run_shape(run: Run, session_status: dict[str, str]) -> PipelineRun:
    """``run`` as answered; ``session_status`` the status of each session by id."""
    specs = {t.name: t for t in run.spec.tasks}
    order = run.order or tuple(specs)
    tasks = []
    for name in order:
        t, spec = run.tasks[name], specs[name]
        sid = t.session_id
        tasks.append(
            TaskView(
                name=name,
                dependencies=list(spec.dependencies),
                status=t.status,
                attempt=t.attempt,
                max_attempts=spec.retry_max_attempts,
                session_id=sid,
                session_status=None if sid is None else session_status.get(sid),
                exit_code=t.exit_code,
                reason=t.reason,
                due=t.due,
            )
        )
    return PipelineRun(
        run_id=run.run_id,
        name=run.spec.name,
        owner=run.owner,
        project=run.project,
        status=run.status,
        reason=run.reason or (run.refusal or ""),
        round=run.round,
        requested_at=run.requested_at,
        ended_at=run.ended_at,
        tasks=tasks,
    )


class PipelineSchedule(BaseModel):
    schedule_id: str
    name: str  # its pipeline's
    owner: str
    project: str | None
    cron: str  # five fields, UTC
    last: datetime  # the latest time it fired or was refused (at first: when it was set)
    next: datetime | None  # the next time it fires (None: removed or refused for good)
    removed: bool
    refusal: str | None  # why it can never run


class SchedulePage(BaseModel):
    total: int
    schedules: list[PipelineSchedule]


def schedule_shape(s: Schedule) -> PipelineSchedule:
    idle = s.removed or s.refusal is not None
    return PipelineSchedule(
        schedule_id=s.schedule_id,
        name=s.spec.name,
        owner=s.owner,
        project=s.project,
        cron=s.cron,
        last=s.last,
        next=None if idle else next_time(s.cron, s.last),
        removed=s.removed,
        refusal=s.refusal,
    )
