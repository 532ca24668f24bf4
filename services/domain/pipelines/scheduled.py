"""What a schedule writes when its time comes (``schedules``): the run's request in the
owner's name with ``pipeline.schedule-fired``, or ``pipeline.schedule-refused``; and
the refusal of a schedule that can never run. Pure: applied to the fold as made."""

from datetime import datetime

from events import (
    AnyEvent,
    PipelineRequestRefused,
    PipelineRunRequested,
    PipelineScheduleFired,
    PipelineScheduleRefused,
)
from events import subjects as subj
from services.domain.pipelines.decide import ACTOR
from services.domain.pipelines.requests import RunIds
from services.domain.pipelines.runs import PipelineState, apply
from services.domain.pipelines.schedules import Schedule, due_now

__all__ = ["decide_schedule"]


def decide_schedule(
    s: PipelineState, sched: Schedule, salt: str, now: datetime
) -> list[tuple[str, AnyEvent]]:
    """What schedule ``sched`` writes now, applied to ``s``: its refusal if it can never
    run; at a time due, the run's request in the owner's name with
    ``pipeline.schedule-fired`` (one batch, the schedule's event first), or
    ``pipeline.schedule-refused`` when the owner may not run any more."""
    subject = subj.pipeline_run(sched.schedule_id)
    ids = RunIds(salt, sched.schedule_id)
    if sched.refusal is not None and not sched.removed:
        e: AnyEvent = PipelineRequestRefused(
            id=ids.event("refused", sched.request_id),
            at=now,
            actor=ACTOR,
            causation_id=sched.request_id,
            run_id=sched.schedule_id,
            requester=sched.owner,
            request_id=sched.request_id,
            reason=sched.refusal,
        )
        apply(s, e)
        return [(subject, e)]
    due = due_now(sched, now)
    if due is None:
        return []
    at = due.isoformat()
    why = s.keys.refusal(sched.owner)
    if why is not None:
        refused = PipelineScheduleRefused(
            id=ids.event("schedule-refused", at),
            at=now,
            actor=ACTOR,
            correlation_id=sched.request_id,
            schedule_id=sched.schedule_id,
            owner=sched.owner,
            due=due,
            reason=why,
        )
        apply(s, refused)
        return [(subject, refused)]
    run_id = "p" + ids.event("run", at)[:15]
    fired = PipelineScheduleFired(
        id=ids.event("schedule-fired", at),
        at=now,
        actor=ACTOR,
        correlation_id=sched.request_id,
        schedule_id=sched.schedule_id,
        owner=sched.owner,
        due=due,
        run_id=run_id,
    )
    run = PipelineRunRequested(
        id=ids.event("run-requested", at),
        at=now,
        actor=ACTOR,
        correlation_id=sched.request_id,
        causation_id=fired.id,
        run_id=run_id,
        requester=sched.owner,
        spec=sched.spec,
        project=sched.project,
    )
    apply(s, fired)
    apply(s, run)
    return [(subject, fired), (subj.request(sched.owner, run_id), run)]
