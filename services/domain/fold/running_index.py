"""The RUNNING sessions, kept by the fold by when their time limits can fall due.

The scheduler ends a running session past its lifetime or idle past its group's idle
timeout (``SchedulerActor._over_time``, every 2 s). Asking each running session cost
that check about 100 ms at 40,000 of them, every time. The limits themselves depend on
the group's settings, which the fold may not know (the default group runs under the
scheduler's own flags), so the fold keeps the moments they count from, in order, and a
check takes from the front only those past the limit:

- per group, those without a lifetime of their own by when they started running (a
  group's lifetime counts from there);
- those with one, by when it runs out (it does not depend on the group);
- per group, the interactive ones by when they were last active (an idle timeout counts
  from there; only interactive sessions end by it).

Invariant: a session is in the index exactly while it is RUNNING, under the entries its
view says (``started_at``, ``lifetime_s``, ``session_type``, ``active_at``).
"""

from bisect import bisect_left, bisect_right, insort
from datetime import datetime

from events import SessionType
from services.domain.durations import after
from services.domain.records import SessionView

__all__ = ["RunningIndex"]

_Entries = list[tuple[datetime, str]]  # (moment, session id), in order


class RunningIndex:
    __slots__ = ("_active", "_own", "_started")

    def __init__(self) -> None:
        self._started: dict[str, _Entries] = {}  # group -> by start, no lifetime of their own
        self._own: _Entries = []  # by when their own lifetime runs out
        self._active: dict[str, _Entries] = {}  # group -> interactive ones, by last activity

    def add(self, v: "SessionView", started: datetime) -> None:
        """``v`` started running at ``started``."""
        if v.lifetime_s is None:
            insort(self._started.setdefault(v.group, []), (started, v.session_id))
        else:
            insort(self._own, (after(started, v.lifetime_s), v.session_id))
        if v.session_type is SessionType.INTERACTIVE:
            insort(self._active.setdefault(v.group, []), (_active(v, started), v.session_id))

    def remove(self, v: "SessionView", started: datetime) -> None:
        """``v``, which started running at ``started``, no longer runs."""
        sid = v.session_id
        if v.lifetime_s is None:
            _drop(self._started, v.group, (started, sid))
        else:
            own = self._own
            del own[bisect_left(own, (after(started, v.lifetime_s), sid))]
        if v.session_type is SessionType.INTERACTIVE:
            _drop(self._active, v.group, (_active(v, started), sid))

    def active(self, v: "SessionView", before: datetime | None, started: datetime) -> None:
        """``v`` was active again: its last activity moved on from ``before``."""
        if v.session_type is not SessionType.INTERACTIVE:
            return
        entries = self._active[v.group]
        del entries[bisect_left(entries, (before or started, v.session_id))]
        insort(entries, (_active(v, started), v.session_id))

    def groups(self) -> list[str]:
        """The groups with sessions running, by name."""
        return sorted(self._started.keys() | self._active.keys())

    def started_by(self, group: str, until: datetime) -> list[str]:
        """``group``'s sessions without a lifetime of their own that started at ``until``
        or before, the longest running first."""
        return _until(self._started.get(group, []), until)

    def own_lifetime_out(self, now: datetime) -> list[str]:
        """The sessions whose own lifetime ran out at ``now`` or before."""
        return _until(self._own, now)

    def idle_since(self, group: str, until: datetime) -> list[str]:
        """``group``'s interactive sessions last active at ``until`` or before."""
        return _until(self._active.get(group, []), until)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunningIndex):
            return NotImplemented
        return (
            self._started == other._started
            and self._own == other._own
            and self._active == other._active
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"RunningIndex({self._started}, {self._own}, {self._active})"


def _active(v: "SessionView", started: datetime) -> datetime:
    return v.active_at or started


def _drop(index: dict[str, _Entries], group: str, entry: tuple[datetime, str]) -> None:
    entries = index[group]
    del entries[bisect_left(entries, entry)]
    if not entries:
        del index[group]


def _until(entries: _Entries, until: datetime) -> list[str]:
    end = bisect_right(entries, until, key=lambda entry: entry[0])
    return [sid for _, sid in entries[:end]]
