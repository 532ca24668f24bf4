"""The intake's rules: which of a key's requests go on the log, and what is said of the
rest. Pure: the intake actor (``services.actors.intake``) asks these.

People hand their requests to the intake (``fgpu.in.<key>``), not to the log. The server
keeps only a few waiting per key (the intake stream's per-subject limit, new ones
refused), so a flood costs others nothing while it waits; the intake then lets each key
through at its rate (``KeyRates``: a token bucket per key, one token per event) and drops
the rest, and writes what a request would have been on its own subject of the log
(``routed``). Nothing it drops is written one by one: ``Drops`` counts per key and says so
in one ``access.requests-dropped`` record at once, then at most one per window.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from events import (
    AdminRequested,
    AnyEvent,
    PipelineCancelRequested,
    PipelineRerunRequested,
    PipelineRunRequested,
    PipelineScheduleRemoved,
    PipelineScheduleSet,
    SecretRemoved,
    SecretSet,
    ServeRequested,
    SessionDestroyRequested,
    SessionRequested,
)
from events import subjects as subj
from services.domain.subject_rules import SUBJECT_OF

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_RATE",
    "DEFAULT_WINDOW_S",
    "Dropped",
    "Drops",
    "KeyRates",
    "routed",
]

DEFAULT_RATE = 50.0  # requests (events) a second a key may hand in, sustained
DEFAULT_BURST = 1000  # and at once (``session create --count`` asks up to 1000)
DEFAULT_WINDOW_S = 10.0  # at most one record of a key's drops per window
_REQUESTS = (
    SessionRequested,
    SessionDestroyRequested,
    AdminRequested,
    ServeRequested,
    PipelineRunRequested,
    PipelineCancelRequested,
    PipelineRerunRequested,
    PipelineScheduleSet,
    PipelineScheduleRemoved,
    SecretSet,
    SecretRemoved,
)
# Requests that stand on a subject named by their own id, not by a session's.
_BY_ID = (AdminRequested, ServeRequested, SecretSet, SecretRemoved)
_OWNED = (SessionRequested, SecretSet, SecretRemoved)  # their key is ``owner``
_PIPELINE = (PipelineRunRequested, PipelineCancelRequested, PipelineRerunRequested)
_SCHEDULE = (PipelineScheduleSet, PipelineScheduleRemoved)


def routed(key: str, events: Sequence[AnyEvent]) -> list[tuple[str, AnyEvent]] | str:
    """Each of ``events`` handed in by ``key`` with the subject of the log it stands on;
    or why they may not stand there at all (then none is written).

    Only requests are handed in, each in ``key``'s own name (owner or requester, and
    actor: who caused it), on a subject naming ``key``: the identity the server enforced
    on ``fgpu.in.<key>`` is the only one a request can carry onto the log.
    """
    if not events:
        return "no request"
    found: list[tuple[str, AnyEvent]] = []
    for e in events:
        if not isinstance(e, _REQUESTS):
            return f"{e.__struct_config__.tag} is not a request"
        named = e.owner if isinstance(e, _OWNED) else e.requester
        if named != key or e.actor != key:
            return f"a request of {key} in the name of {named if named != key else e.actor}"
        subject: str = SUBJECT_OF[type(e)](e)
        if isinstance(e, _BY_ID):
            token = e.id
        elif isinstance(e, _SCHEDULE):
            token = e.schedule_id
        else:
            token = e.run_id if isinstance(e, _PIPELINE) else e.session_id
        if not subj.is_token(token):
            return f"{subject!r} is no subject of the log"
        found.append((subject, e))
    return found


@dataclass
class _Bucket:
    tokens: float
    at: float


class KeyRates:
    """A token bucket per access key: ``rate`` tokens a second, at most ``burst`` held;
    a key never seen starts full. Buckets full again are forgotten (``forget_full``), so
    the memory held follows the keys active lately, not every key ever seen."""

    def __init__(self, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the rate must be above 0 and the burst at least 1")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def _refilled(self, key: str, now: float) -> _Bucket:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + max(0.0, now - b.at) * self.rate)
        b.at = max(b.at, now)
        return b

    def take(self, key: str, n: int, now: float) -> bool:
        """Whether ``key`` may hand in ``n`` more now (they are then taken)."""
        b = self._refilled(key, now)
        if b.tokens < n:
            return False
        b.tokens -= n
        return True

    def any_left(self, key: str, now: float) -> bool:
        """Whether ``key`` may hand in one more now (nothing taken)."""
        return self._refilled(key, now).tokens >= 1

    def forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled since last used (they start full anyway)."""
        rate, burst = self.rate, self.burst
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * rate >= burst]
        for k in full:
            del self._buckets[k]

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass(frozen=True)
class Dropped:
    """What to write of ``owner``'s drops since ``since`` (one record)."""

    owner: str
    since: float
    rate_limited: int
    refused: int
    reason: str | None


@dataclass
class _Count:
    since: float
    rate_limited: int = 0
    refused: int = 0
    reason: str | None = None


@dataclass
class Drops:
    """Per key, what was dropped and not yet said, and when it was last said."""

    window_s: float = DEFAULT_WINDOW_S
    _counts: dict[str, _Count] = field(default_factory=dict)
    _said: dict[str, float] = field(default_factory=dict)

    def rate_limited(self, key: str, n: int, now: float) -> None:
        self._count(key, now).rate_limited += n

    def refused(self, key: str, n: int, reason: str, now: float) -> None:
        c = self._count(key, now)
        c.refused += n
        if c.reason is None:
            c.reason = reason

    def _count(self, key: str, now: float) -> _Count:
        c = self._counts.get(key)
        if c is None:
            c = self._counts[key] = _Count(since=now)
        return c

    def unsay(self, d: Dropped) -> None:
        """``d`` could not be written: count it again, to be said with what follows."""
        c = self._counts.get(d.owner)
        if c is None:
            c = self._counts[d.owner] = _Count(since=d.since)
        c.since = min(c.since, d.since)
        c.rate_limited += d.rate_limited
        c.refused += d.refused
        c.reason = d.reason if d.reason is not None else c.reason
        self._said.pop(d.owner, None)

    def due(self, now: float) -> list[Dropped]:
        """The records to write now: a key's first drops at once, later ones once the
        window since its last record has passed. Each is then taken as said."""
        found = []
        for key in [k for k in self._counts if now - self._said.get(k, -1e18) >= self.window_s]:
            c = self._counts.pop(key)
            self._said[key] = now
            found.append(Dropped(key, c.since, c.rate_limited, c.refused, c.reason))
        for key in [k for k, t in self._said.items() if now - t >= self.window_s]:
            if key not in self._counts:
                del self._said[key]  # quiet for a window: its next drop is said at once
        return found

    def pending(self) -> int:
        """Keys with drops not yet said."""
        return len(self._counts)
