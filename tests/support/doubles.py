"""Stand-ins for a port that a test must never touch."""


class NoLog:
    """decide() is pure: it must never touch the log."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"decide() used the log: {name}")
