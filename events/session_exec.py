"""Commands run inside a session's container on its user's behalf (``fgpu session exec``).

Subject ``fgpu.agent.<agent_id>.exec.<session_id>``, written by the agent that runs the
session: the opening before the command starts, the closing once it has ended (or could
not be waited for). They are the audit of who ran what where; what the command printed
goes only to the person who ran it, never onto the log.
"""

from events.base import Event

__all__ = [
    "SessionChannelClosed",
    "SessionChannelOpened",
    "SessionExecFinished",
    "SessionExecStarted",
]


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


class SessionChannelOpened(Event, frozen=True, kw_only=True, tag="session.channel-opened.v1"):
    """``requester`` (allowed as for a command: the owner, or an administrator of the
    session's domain) opens a channel into the session's container, relayed by its agent
    over the bus: ``kind`` ``shell`` (a terminal running ``target``, the shell's argv as
    one string), ``app`` (a TCP connection to port ``target`` in the container, with the
    image's service name ``service`` if it was asked by name), or ``logs`` (the container's
    output followed from its last ``target`` lines; allowed as reading the logs is: the
    owner, an administrator of its domain). ``channel`` names it on the bus
    (``fgpu.tty.<agent>.<requester>.<channel>``)."""

    session_id: str
    agent_id: str
    requester: str
    kind: str
    target: str
    service: str | None = None
    channel: str


class SessionChannelClosed(Event, frozen=True, kw_only=True, tag="session.channel-closed.v1"):
    """The channel its ``causation_id`` opened has closed: ``bytes_in`` went from the
    requester into the container, ``bytes_out`` came back; ``exit_code`` is the shell's
    (or the relay's), None if it was not waited for; ``reason`` says who ended it (the
    program exited, the requester closed, nothing heard for too long, an error)."""

    session_id: str
    agent_id: str
    requester: str
    channel: str
    bytes_in: int = 0
    bytes_out: int = 0
    exit_code: int | None = None
    reason: str = ""
