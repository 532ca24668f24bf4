"""Scheduled runs: a pipeline run at each time a cron expression names, as its owner's
own run, only while the owner may run.

The pipeline fold keeps each schedule and what it needs of the tenancy to tell whether a
key may still act (its keypairs, revoked ones, removed users: ``Keys``). When a
schedule's time comes the actor writes either ``pipeline.schedule-fired`` with the run's
request (in the owner's name, one atomic batch on the schedule's subject), or
``pipeline.schedule-refused`` with the reason. The ids are derived from the schedule and
the time, so each time fires once. Times missed while no actor ran are not made up: the
latest one due fires, once. Pure.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime

from croniter import croniter

from events import (
    AdminApplied,
    CreateKeypair,
    CreateUser,
    PipelineScheduleSet,
    PipelineSpec,
    RemoveUser,
    RevokeKeypair,
)

__all__ = ["Keys", "Schedule", "cron_problem", "due_now", "next_time", "schedule_of"]

_MOST_MISSED = 100_000  # times skipped over to find the latest one due (a minute's: ~70 days)


def cron_problem(cron: str) -> str | None:
    """Why ``cron`` is no schedule (five fields: minute hour day month weekday), or None."""
    if len(cron.split()) != 5 or not croniter.is_valid(cron):
        return f"cron {cron!r}: five fields, minute hour day-of-month month day-of-week"
    return None


def next_time(cron: str, after: datetime) -> datetime:
    """The first time ``cron`` names after ``after`` (UTC)."""
    found: datetime = croniter(cron, after.astimezone(UTC)).get_next(datetime)
    return found.astimezone(UTC)


@dataclass(slots=True)
class Schedule:
    schedule_id: str
    owner: str
    cron: str
    spec: PipelineSpec
    project: str | None
    request_id: str
    last: datetime  # the latest time it fired or was refused (at first: when it was set)
    removed: bool = False
    refusal: str | None = None  # why it can never run (answered once, then it stays idle)


def schedule_of(e: PipelineScheduleSet) -> Schedule:
    return Schedule(e.schedule_id, e.requester, e.cron, e.spec, e.project, e.id, e.at)


def due_now(s: Schedule, now: datetime) -> datetime | None:
    """The latest time of ``s`` due at ``now`` and not yet acted on; None if none."""
    if s.removed:
        return None
    due = next_time(s.cron, s.last)
    if due > now:
        return None
    for _ in range(_MOST_MISSED):
        after = next_time(s.cron, due)
        if after > now:
            break
        due = after
    return due


@dataclass
class Keys:
    """What the tenancy says of access keys, as far as a schedule's owner goes: a key
    acts while it is a user's, not revoked, and its user not removed. On a cluster with
    no tenancy (no keypair ever made) every key acts."""

    users: dict[str, str] = field(default_factory=dict)  # key -> its user
    revoked: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)  # users

    def apply(self, e: AdminApplied) -> None:
        match e.command:
            case CreateKeypair(access_key=key, user=user):
                self.users[key] = user
            case RevokeKeypair(access_key=key):
                self.revoked.add(key)
            case RemoveUser(user=user):
                self.removed.add(user)
            case CreateUser(user=user):
                self.removed.discard(user)  # a name made again is a new user
            case _:
                pass

    def refusal(self, key: str) -> str | None:
        """Why ``key`` may not run now, or None."""
        if not self.users and not self.revoked:
            return None
        if key in self.revoked:
            return f"access key {key} is revoked"
        user = self.users.get(key)
        if user is None:
            return f"access key {key} is not a user's"
        if user in self.removed:
            return f"user {user} was removed"
        return None
