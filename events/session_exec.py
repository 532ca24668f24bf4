"""Commands run inside a session's container on its user's behalf (``fgpu session exec``).

Subject ``fgpu.agent.<agent_id>.exec.<session_id>``, written by the agent that runs the
session: the opening before the command starts, the closing once it has ended (or could
not be waited for). They are the audit of who ran what where; what the command printed
goes only to the person who ran it, never onto the log.
"""

from events.base import Event

__all__ = ["SessionExecFinished", "SessionExecStarted"]


class SessionExecStarted(Event, frozen=True, kw_only=True, tag="session.exec-started.v1"):
    """``requester`` (an access key the agent found allowed: the session's owner, or an
    administrator of its domain) runs ``argv`` in the session's container, with no shell
    and no terminal."""

    session_id: str
    agent_id: str
    requester: str
    argv: tuple[str, ...]


class SessionExecFinished(Event, frozen=True, kw_only=True, tag="session.exec-finished.v1"):
    """The command its ``causation_id`` started has ended with ``exit_code``, having
    written ``stdout_bytes`` and ``stderr_bytes``; or, with ``exit_code`` None, ``error``
    says why it could not be run or waited for (the engine refused, the time ran out:
    then the command may still run in the container)."""

    session_id: str
    agent_id: str
    requester: str
    exit_code: int | None = None
    error: str | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
