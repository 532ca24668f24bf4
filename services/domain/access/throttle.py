"""Wrong secrets, throttled: each costs a slow scrypt check, so a key that keeps failing
is refused for a while without one.

At most ``limit`` failures of one access key per ``window_s``; past that, attempts with
an unchecked secret are refused at once until the window has moved on. A secret already
known to be right is still accepted (it costs nothing to compare), so someone failing on
purpose does not lock out a person who signed in before. Pure: the caller gives the time.
"""

import hashlib
import hmac
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["FailureThrottle", "SecretChecks"]


@dataclass
class FailureThrottle:
    limit: int = 5
    window_s: float = 60.0
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def wait_s(self, key: str, now: float) -> float:
        """0 if ``key`` may have its secret checked now; else how long until it may."""
        times = self._recent(key, now)
        if len(times) < self.limit:
            return 0.0
        return times[0] + self.window_s - now

    def failed(self, key: str, now: float) -> None:
        times = self._failures.setdefault(key, deque())
        times.append(now)
        while len(times) > self.limit:
            times.popleft()


@dataclass
class SecretChecks:
    """Which secrets were found right (their SHA-256, per access key), and the throttle
    on wrong ones: what a door knows before it pays for a scrypt check."""

    throttle: FailureThrottle = field(default_factory=FailureThrottle)
    _right: dict[str, bytes] = field(default_factory=dict)

    def before(self, key: str, secret: str, now: float) -> bool | str:
        """True: right (known); False: wrong (a known key, another secret); a reason:
        refused without a check (throttled); "" : check it (``after`` then)."""
        digest = hashlib.sha256(secret.encode()).digest()
        known = self._right.get(key)
        if known is not None:
            return hmac.compare_digest(known, digest)
        wait = self.throttle.wait_s(key, now)
        if wait > 0:
            return f"too many wrong secrets for access key {key}: try again in {wait:.0f} s"
        return ""

    def after(self, key: str, secret: str, right: bool, now: float) -> None:
        if right:
            self._right[key] = hashlib.sha256(secret.encode()).digest()
        else:
            self.throttle.failed(key, now)

    async def refusal(
        self, key: str, secret: str, now: float, check: Callable[[], Awaitable[bool]]
    ) -> str | None:
        """Why ``secret`` is refused for ``key`` (None: it is right), awaiting ``check``
        (the slow scrypt comparison) only when nothing known decides it."""
        seen = self.before(key, secret, now)
        if seen is True:
            return None
        if seen is False:
            return f"wrong secret for access key {key}"
        if seen:
            return seen
        right = await check()
        self.after(key, secret, right, now)
        return None if right else f"wrong secret for access key {key}"

    def forget(self, key: str) -> None:
        """The keypair is gone (revoked, its user removed): its secret is right no more."""
        self._right.pop(key, None)
