"""The Clock port on this machine's clock."""

from datetime import UTC, datetime

__all__ = ["SystemClock"]


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)
