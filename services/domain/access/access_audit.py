"""How many access events a door writes: all of them, until a flood.

Within each window (a minute by default) a door writes at most ``per_key`` accesses of
one access key of each kind (granted, refused: a flood of refusals naming a key must not
hide that key's real sign-ins) and ``total`` in all; the others are counted, and when
the window ends one summary per key that lost some (and one for ``*``, the keys beyond
``total``) says how many were not written. So a flood of refused logins writes a
bounded number of events, and every access is either written or counted: nothing is
lost without a trace.

Bound: per window, at most ``total`` accesses and ``total // per_key + 1`` summaries
(a key is summarised only if it had ``per_key`` of a kind written, and those count in
``total``).
Pure: the caller gives the time.
"""

from dataclasses import dataclass, field

__all__ = ["ALL_KEYS", "AccessLimiter", "Suppressed"]

ALL_KEYS = "*"


@dataclass(frozen=True, slots=True)
class Suppressed:
    """``granted`` and ``refused`` accesses of ``owner`` counted, not written, from
    ``since`` (seconds) until the window ended."""

    owner: str
    since: float
    granted: int
    refused: int


@dataclass
class AccessLimiter:
    per_key: int = 10
    total: int = 200
    window_s: float = 60.0
    _start: float | None = None
    _written: dict[tuple[str, bool], int] = field(default_factory=dict)  # (owner, refused)
    _all: int = 0
    _counted: dict[str, list[int]] = field(default_factory=dict)  # owner -> [granted, refused]

    def admit(self, now: float, owner: str, *, refused: bool) -> tuple[bool, list[Suppressed]]:
        """Whether to write this access of ``owner`` now, and the summaries due first (of
        a window that ended)."""
        due = self.due(now)
        if self._start is None:
            self._start = now
        kind = (owner, refused)
        if self._all < self.total and self._written.get(kind, 0) < self.per_key:
            self._written[kind] = self._written.get(kind, 0) + 1
            self._all += 1
            return True, due
        full = self._written.get(kind, 0) >= self.per_key
        self.count(owner if full else ALL_KEYS, refused=refused)
        return False, due

    def count(self, owner: str, *, refused: bool) -> None:
        """Count an access not written (refused here, or one a full queue could not take)."""
        counts = self._counted.setdefault(owner, [0, 0])
        counts[1 if refused else 0] += 1

    def due(self, now: float) -> list[Suppressed]:
        """The summaries of the window, if it has ended by ``now`` (a new one starts)."""
        if self._start is None or now < self._start + self.window_s:
            return []
        found = [Suppressed(o, self._start, g, r) for o, (g, r) in self._counted.items()]
        self._start = None
        self._written.clear()
        self._all = 0
        self._counted.clear()
        return found
