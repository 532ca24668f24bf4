"""When an agent says how far a pull got: not at every message the engine sends.

A pull's progress goes on the log (``session.pulling``), so it is throttled: a report is
due at the first message, then when ``every_s`` seconds have passed since the last one,
or when the pull crossed into a new ``step_pct`` share of its total. Pure: the caller
gives the time.
"""

from dataclasses import dataclass

__all__ = ["PullThrottle"]


@dataclass
class PullThrottle:
    every_s: float = 2.0
    step_pct: int = 10
    _last_at: float | None = None
    _last_step: int = -1

    def due(self, now_s: float, current: int, total: int) -> bool:
        """Whether to report ``current`` of ``total`` bytes now; if so, it counts as
        reported. ``total`` 0: not known yet (only time makes a report due)."""
        step = current * 100 // (total * self.step_pct) if total > 0 else self._last_step
        if (
            self._last_at is not None
            and now_s - self._last_at < self.every_s
            and step <= self._last_step
        ):
            return False
        self._last_at, self._last_step = now_s, max(step, self._last_step)
        return True
