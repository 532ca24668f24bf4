"""Durations given in seconds (lifetimes, timeouts), bounded, and moments reckoned from
them without overflow.

A duration comes from a user or an administrator; a moment is a ``datetime``, which ends
in the year 9999. The bound refuses the absurd where it is given (a request, a group's
settings), and the arithmetic saturates for whatever the log already holds: a fold or a
scheduler that raised OverflowError on a record would fail on it again at every start.
"""

from datetime import UTC, datetime, timedelta

__all__ = ["LONGEST_S", "after", "before"]

LONGEST_S = 100 * 366 * 24 * 3600  # a century: longer is "for ever", said by leaving it out

_END = datetime.max.replace(tzinfo=UTC)
_START = datetime.min.replace(tzinfo=UTC)


def after(at: datetime, seconds: int) -> datetime:
    """``seconds`` after ``at``; the end of time if that is past it."""
    try:
        return at + timedelta(seconds=seconds)
    except OverflowError:
        return _END


def before(at: datetime, seconds: int) -> datetime:
    """``seconds`` before ``at``; the start of time if that is before it."""
    try:
        return at - timedelta(seconds=seconds)
    except OverflowError:
        return _START
