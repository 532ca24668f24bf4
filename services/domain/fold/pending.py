"""The PENDING sessions, kept by the fold, indexed as the scheduler walks them.

Within one scheduling round nothing frees, so once a session of some shape (priority,
slots, image, GPU models) does not fit, no later one of that shape can: a round need
only look at the head of each shape's queue, and drop the shape at its first failure.
So the fold files each pending session by its group and shape, in arrival order, and
keeps apart those the scheduler has not yet told why they wait (``untold``): a FIFO or
LIFO round costs the shapes and the placements it makes, not the length of the queue. A
DRF round takes its users' heads: each (priority, user)'s sessions are filed by shape
too (``of_users``). The sessions of each group are also kept by when they were admitted,
so those past a pending timeout are found without a walk.
"""

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from datetime import datetime
from typing import TypeVar

from events import Slots
from services.domain.records import SessionView
from services.domain.status import SessionStatus

__all__ = ["PendingQueue", "QueueShape", "UserKey", "admitted_at", "queue_shape", "user_of"]

_K = TypeVar("_K")

# What makes two pending sessions of one group interchangeable for placement: priority,
# slots, image, GPU models, storage hosts.
QueueShape = tuple[int, Slots, str, tuple[str, ...], tuple[str, ...]]


# A DRF round's unit: the sessions of one priority and one user.
UserKey = tuple[int, str]


def queue_shape(v: "SessionView") -> QueueShape:
    return (v.priority, v.slots, v.image, v.gpu_models, v.storage_hosts)


def user_of(v: "SessionView") -> str:
    """Whose share a session counts in (DRF): its user, else its access key."""
    return v.user if v.user is not None else v.owner


def admitted_at(v: "SessionView") -> datetime:
    """When the quota actor admitted it (its first PENDING): our own clock's time, not the
    client's. A placement taken back keeps it."""
    for t in v.history:
        if t.status is SessionStatus.PENDING:
            return t.at
    return v.requested_at


class PendingQueue:
    """Every PENDING session (iterated in the order they joined), and per group: each
    shape's sessions in arrival order, and those not told why they wait yet.

    Invariant: a session is in ``shapes(g)`` under its shape, and in ``of_users(g)``
    under its priority and user and its shape, exactly when it is in the queue; and in
    ``untold(g)`` exactly when it is queued and its ``waiting`` is None."""

    __slots__ = ("_all", "_shapes", "_since", "_untold", "_users")

    def __init__(self) -> None:
        self._all: dict[str, str] = {}  # session id -> group
        # group -> shape -> session id -> its arrival on the log, in that order
        self._shapes: dict[str, dict[QueueShape, dict[str, int]]] = {}
        # group -> (priority, user) -> shape -> session id -> arrival, in that order
        self._users: dict[str, dict[UserKey, dict[QueueShape, dict[str, int]]]] = {}
        self._untold: dict[str, dict[str, None]] = {}
        # group -> (admitted at, session id), oldest first: pending timeouts fall due here
        self._since: dict[str, list[tuple[datetime, str]]] = {}

    def add(self, v: "SessionView") -> None:
        """``v`` joins (or joins again: a placement taken back), in its arrival's place."""
        if v.session_id in self._all:
            return
        self._all[v.session_id] = v.group
        key = queue_shape(v)
        _file(self._shapes.setdefault(v.group, {}), key, v)
        users = self._users.setdefault(v.group, {})
        _file(users.setdefault((v.priority, user_of(v)), {}), key, v)
        if v.waiting is None:
            self._untold.setdefault(v.group, {})[v.session_id] = None
        insort(self._since.setdefault(v.group, []), (admitted_at(v), v.session_id))

    def remove(self, v: "SessionView") -> None:
        group = self._all.pop(v.session_id, None)
        if group is None:
            return
        key = queue_shape(v)
        _unfile(self._shapes, group, key, v.session_id)
        users = self._users[group]
        _unfile(users, (v.priority, user_of(v)), key, v.session_id)
        if not users:
            del self._users[group]
        since = self._since[group]
        del since[bisect_left(since, (admitted_at(v), v.session_id))]
        if not since:
            del self._since[group]
        self.told(v)

    def told(self, v: "SessionView") -> None:
        """``v`` was told why it waits (or left)."""
        untold = self._untold.get(v.group)
        if untold is None:
            return
        untold.pop(v.session_id, None)
        if not untold:
            del self._untold[v.group]

    def groups(self) -> list[str]:
        """The groups with sessions waiting, by name."""
        return sorted(self._shapes.keys() | self._untold.keys())

    def shapes(self, group: str) -> dict[QueueShape, dict[str, int]]:
        """``group``'s sessions by shape, each in arrival order, with their arrival on the
        log (read only)."""
        return self._shapes.get(group, {})

    def of_users(self, group: str) -> dict[UserKey, dict[QueueShape, dict[str, int]]]:
        """``group``'s sessions by priority and user, then by shape, each in arrival
        order (read only): the heads a DRF round takes."""
        return self._users.get(group, {})

    def untold(self, group: str) -> dict[str, None]:
        """``group``'s sessions not told why they wait, in the order they joined."""
        return self._untold.get(group, {})

    def admitted_by(self, group: str, until: datetime) -> list[str]:
        """``group``'s sessions admitted at ``until`` or before, the longest waiting first:
        those a pending timeout has fallen due for, without a walk of the queue."""
        since = self._since.get(group, [])
        end = bisect_right(since, until, key=lambda item: item[0])
        return [session_id for _, session_id in since[:end]]

    def of_group(self, group: str) -> list[str]:
        return [sid for queue in self.shapes(group).values() for sid in queue]

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingQueue):
            return NotImplemented
        return (
            self._all == other._all
            and self._shapes == other._shapes
            and self._users == other._users
            and self._untold == other._untold
            and self._since == other._since
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"PendingQueue({list(self._all)})"


def _file(shapes: dict[QueueShape, dict[str, int]], key: QueueShape, v: "SessionView") -> None:
    """``v`` into its shape's queue, in arrival order."""
    queue = shapes.get(key)
    if queue is None:
        shapes[key] = {v.session_id: v.arrival_seq}
        return
    before = queue[next(reversed(queue))]
    queue[v.session_id] = v.arrival_seq
    if before > v.arrival_seq:  # rare: it goes back to its place
        shapes[key] = dict(sorted(queue.items(), key=lambda item: item[1]))


def _unfile(
    index: dict[_K, dict[QueueShape, dict[str, int]]], outer: _K, key: QueueShape, session_id: str
) -> None:
    """``session_id`` out of ``index[outer][key]``, emptied levels dropped."""
    shapes = index[outer]
    queue = shapes[key]
    del queue[session_id]
    if not queue:
        del shapes[key]
        if not shapes:
            del index[outer]
