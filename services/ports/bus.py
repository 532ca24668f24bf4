"""What travels beside the log: heartbeats, and requests answered by one agent.

Neither is state: a heartbeat says an agent is alive now, a request (a session's logs, a
command to run in it) asks an agent for what only its host has. Both are lost with the
connection, and that is fine: the next beat comes in seconds, a request fails with
AgentUnreachable.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import msgspec

__all__ = [
    "AgentHandler",
    "AgentReply",
    "AgentRequest",
    "AgentRequests",
    "AppRequest",
    "ChannelReply",
    "ExecReply",
    "ExecRequest",
    "FollowRequest",
    "Heartbeats",
    "LogsReply",
    "LogsRequest",
    "Pipe",
    "RequestFailed",
    "ServicesReply",
    "ServicesRequest",
    "ShellRequest",
]


class LogsRequest(msgspec.Struct, frozen=True, kw_only=True, tag="logs"):
    """The last ``tail`` lines of a session's container output."""

    session_id: str
    tail: int = 200


class LogsReply(msgspec.Struct, frozen=True, kw_only=True, tag="logs"):
    """``ok`` false: no container of the session on that agent (``error`` says why)."""

    ok: bool
    logs: str = ""
    error: str | None = None


class FollowRequest(msgspec.Struct, frozen=True, kw_only=True, tag="follow"):
    """Follow a session's container output: its last ``tail`` lines, then what it writes
    as it writes it, relayed on channel ``channel`` (as a terminal's, the asker listening
    on its down subject first) until the container ends or the asker leaves."""

    session_id: str
    channel: str
    tail: int = 200


class ExecRequest(msgspec.Struct, frozen=True, kw_only=True, tag="exec"):
    """Run ``argv`` in a session's container (no shell, no terminal, no input) and answer
    once it has ended, or after ``timeout_s``."""

    session_id: str
    argv: tuple[str, ...]
    timeout_s: float = 60.0


class ExecReply(msgspec.Struct, frozen=True, kw_only=True, tag="exec"):
    """``ok``: the command ran and ended with ``exit_code``; ``stdout`` and ``stderr`` are
    the first bytes of what it wrote and ``*_bytes`` all it wrote (more than was kept: the
    output was cut). Not ``ok``: ``error`` says why (refused, not running, timed out)."""

    ok: bool
    exit_code: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    error: str | None = None


class ShellRequest(msgspec.Struct, frozen=True, kw_only=True, tag="shell"):
    """Open a terminal in a session's container, ``rows`` x ``cols``, relayed on channel
    ``channel`` (chosen by the asker, a subject token: ``events.subjects.channel``). The
    asker listens on the channel's down subject before it asks."""

    session_id: str
    channel: str
    rows: int = 24
    cols: int = 80
    term: str = "xterm"


class AppRequest(msgspec.Struct, frozen=True, kw_only=True, tag="app"):
    """Open one TCP connection to ``target`` in a session's container, relayed on channel
    ``channel``: a service the image declares (by name) or a port number."""

    session_id: str
    channel: str
    target: str


class ChannelReply(msgspec.Struct, frozen=True, kw_only=True, tag="channel"):
    """``ok``: the channel is open (an app's ``port`` and ``service`` say what it reaches).
    Not ``ok``: ``error`` says why (refused, not running, no such service)."""

    ok: bool
    port: int | None = None
    service: str | None = None
    error: str | None = None


class ServicesRequest(msgspec.Struct, frozen=True, kw_only=True, tag="services"):
    """The services a session's image declares (its ``fgpu.service.*`` labels), asked by
    whoever may open one (the web UI lists them, to open them through its proxy)."""

    session_id: str


class ServicesReply(msgspec.Struct, frozen=True, kw_only=True, tag="services"):
    """``ok``: ``services`` are (name, protocol, port), by name. Not ``ok``: ``error``
    says why (refused, not running)."""

    ok: bool
    services: tuple[tuple[str, str, int], ...] = ()
    error: str | None = None


class RequestFailed(msgspec.Struct, frozen=True, kw_only=True, tag="failed"):
    """The agent could not read the request, or failed while answering it."""

    error: str


AgentRequest = (
    LogsRequest | ExecRequest | ShellRequest | AppRequest | ServicesRequest | FollowRequest
)
AgentReply = LogsReply | ExecReply | ChannelReply | ServicesReply | RequestFailed
# Answers ``request`` from ``requester`` (the access key the bus says asked: on NATS, the
# one the server let in on the connection that asked).
AgentHandler = Callable[[str, AgentRequest], Awaitable[AgentReply]]


class Heartbeats(Protocol):
    """Agents say they are alive; the scheduler listens."""

    async def beat(self, agent_id: str) -> None:
        """Say that ``agent_id`` is alive now. Best effort: raises nothing on a lost beat."""
        ...

    def heard(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """Listen: inside the block, the id of each agent whose beat arrives, as it does.

        Every beat sent once the block is entered is heard (while the connection holds).
        """
        ...


class Pipe(Protocol):
    """One direction out and one in of a channel: messages sent on one subject, those that
    arrive on another, in the order they were sent. Best effort, as the bus is: a message
    is lost with the connection (the relay above it notices, by its acknowledgements and
    its silence)."""

    async def send(self, data: bytes) -> None:
        """Send ``data``. Raises AgentUnreachable with no connection."""
        ...

    def __aiter__(self) -> AsyncIterator[bytes]:
        """What arrives, as it does."""
        ...


class AgentRequests(Protocol):
    """Requests to one agent, answered by that agent alone. A bus asks as one identity
    (its connection's access key); the agent is told who asked."""

    async def ask(
        self, agent_id: str, request: AgentRequest, *, timeout_s: float = 10.0
    ) -> AgentReply:
        """The answer of ``agent_id``. Raises AgentUnreachable if none comes in time."""
        ...

    def serving(self, agent_id: str, handler: AgentHandler) -> AbstractAsyncContextManager[None]:
        """Answer the requests to ``agent_id`` with ``handler`` while the block runs; it is
        told the access key that asked each one."""
        ...

    def pipe(self, listen: str, speak: str) -> AbstractAsyncContextManager[Pipe]:
        """A pipe hearing ``listen`` and sending on ``speak`` while the block runs: every
        message sent on ``listen`` once the block is entered is heard. Raises
        AgentUnreachable with no connection."""
        ...
