"""The Clock port at a time set by its caller, never the machine's (as ``trio.testing.MockClock``).

Tests move it to cross a deadline without waiting; a simulation sets it to each event's
time in turn.
"""

from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "VirtualClock"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class VirtualClock:
    """Reads ``start`` plus ``elapsed`` seconds. It moves only when told: ``advance``, or
    setting ``elapsed`` or ``at``; or, with a ``step``, by that many seconds before each
    reading (a clock that never reads the same time twice)."""

    def __init__(self, start: datetime = EPOCH, *, step: float = 0.0) -> None:
        self.start = start
        self.elapsed = 0.0
        self.step = step

    def now(self) -> datetime:
        self.elapsed += self.step
        return self.at

    @property
    def at(self) -> datetime:
        """The time it reads now (without a step)."""
        return self.start + timedelta(seconds=self.elapsed)

    @at.setter
    def at(self, when: datetime) -> None:
        self.elapsed = (when - self.start).total_seconds()

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds
