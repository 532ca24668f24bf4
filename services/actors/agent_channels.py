"""Channels into the agent's sessions: a terminal (``fgpu session shell``), one TCP
connection to a port in the container (``fgpu session app``), or the container's output
followed (``fgpu session logs --follow``), relayed over the bus.

The request comes as a command's does (``fgpu.rpc.<agent>.<key>``, checked the same way:
``services.domain.access.session_access.may_not_exec``; a follow of the output as reading
it is, ``may_not_read``); the bytes then go on the channel's own
subjects, ``fgpu.tty.<agent>.<key>.<channel>.up|down``, which the server lets that key
alone use on the user's side. No port of the agent's host is opened to anyone: the agent
reaches out to NATS, and reaches into the container through its engine (an exec with a
terminal, or a relay program run inside the container: ``relay_argv`` says why; a follow
reads the engine's log of it). Each channel holds one of the agent's ``max_open`` slots,
and moves at most the relay's window of bytes not yet acknowledged: a reader who stops
reading stops the container's output being read, so nothing piles up in the agent.

Every opening and closing is on the log, on the session's exec subject:
``session.channel-opened`` before anything is opened (if it cannot be written, nothing
is), ``session.channel-closed`` with the byte counts and why once it has closed. What
went through never is. A channel is cut, with the reason, once the agent's fold shows
its requester's key revoked (or its user removed): ``cut_refused``.
"""

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from events import SessionChannelClosed, SessionChannelOpened
from events import subjects as subj
from services.actors.common import Provenance, stamp
from services.actors.relay import Closing, relay
from services.domain.access.session_access import key_refusal
from services.domain.channels import IDLE_S, OUTPUT_ENDED, PING_S, Program
from services.domain.fold.cluster import ClusterState
from services.ports import (
    AgentRequests,
    AgentUnreachable,
    Clock,
    ContainerError,
    ContainerRuntime,
    EventLog,
    ExecChannel,
    LogError,
    OutputFollow,
)

__all__ = ["MAX_OPEN", "MAX_OPEN_PER_KEY", "Channels", "Opening"]

log = structlog.get_logger()
MAX_OPEN = 256  # channels an agent holds open at once (each an exec in a container)
# Channels one key holds open on an agent at once: one tenant's pages, follows and app
# requests never take the whole of ``MAX_OPEN`` from the others on the same agent (a
# browser's app page opens a few connections at a time; its follows, one a page).
MAX_OPEN_PER_KEY = 64


@dataclass(frozen=True)
class Opening:
    """A channel allowed and resolved: who, into which container, to run what."""

    session_id: str
    requester: str
    channel: str
    correlation_id: str
    container_id: str
    program: Program


@dataclass(eq=False)
class _Open:
    """A channel open (or opening): cut by setting why."""

    opening: Opening
    why: str = ""
    _cut: anyio.Event = field(default_factory=anyio.Event)

    def cut(self, why: str) -> None:
        self.why = self.why or why
        self._cut.set()

    async def cut_off(self) -> str:
        await self._cut.wait()
        return self.why


class Channels:
    """The open channels of agent ``agent_id``, each relayed in a task of the group that
    ``run`` holds (closed when it ends)."""

    def __init__(
        self,
        agent_id: str,
        runtime: ContainerRuntime,
        bus: AgentRequests,
        events: EventLog,
        clock: Clock,
        *,
        ping_s: float = PING_S,
        idle_s: float = IDLE_S,
        max_open: int = MAX_OPEN,
        max_per_key: int = MAX_OPEN_PER_KEY,
    ) -> None:
        self.agent_id, self.runtime, self.bus = agent_id, runtime, bus
        self.events, self.clock = events, clock
        self.ping_s, self.idle_s, self.max_open = ping_s, idle_s, max_open
        self.max_per_key = max_per_key
        self.open_now = 0  # channels opening or open
        self._by_key: Counter[str] = Counter()  # the same, by requester
        self._relaying: set[_Open] = set()  # those relaying now
        # The agent's fold, as last handed to ``cut_refused`` (folded into in place).
        self._state: ClusterState | None = None
        self._tg: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    async def cut_refused(self, s: ClusterState) -> None:
        """Cut every open channel whose requester's key ``s`` (the agent's fold, once its
        tenancy changed or was rebuilt) shows revoked or its user removed, the reason told
        to the requester's side and written in the closing. A channel that opens later
        is checked against ``s`` as it is then: it was allowed on an older fold."""
        self._state = s
        for held in list(self._relaying):
            self._check(held)

    def _check(self, held: _Open) -> None:
        why = None if self._state is None else key_refusal(self._state, held.opening.requester)
        if why is not None:
            held.cut(why)

    async def open(self, o: Opening) -> str | None:
        """Open ``o``'s channel (written on the log first) and relay it in the background;
        None once it is open, else why not (then its closing is written too)."""
        if self._tg is None:
            return "this agent opens no channels"
        if self.open_now >= self.max_open:
            return f"agent {self.agent_id} has {self.open_now} channels open, its most: later"
        held = self._by_key[o.requester]
        if held >= self.max_per_key:
            return f"{o.requester} has {held} channels open on agent {self.agent_id}, its most"
        self._take(o.requester)  # given back when it closes (``_serve``), or here if not opened
        error: str | None = "cancelled"
        try:
            error = await self._open(o)
        finally:
            if error is not None:
                self._give(o.requester)
        return error

    def _take(self, requester: str) -> None:
        self.open_now += 1
        self._by_key[requester] += 1

    def _give(self, requester: str) -> None:
        self.open_now -= 1
        self._by_key[requester] -= 1
        if self._by_key[requester] <= 0:
            del self._by_key[requester]  # a key that holds none takes no room

    async def _open(self, o: Opening) -> str | None:
        assert self._tg is not None
        try:
            opened = await self._write(
                SessionChannelOpened,
                o,
                None,
                kind=o.program.kind,
                target=o.program.target,
                service=o.program.service,
            )
        except LogError as e:
            return f"not opened: it could not be written on the log ({e})"
        try:
            await self._tg.start(self._serve, o, opened)
        except (ContainerError, AgentUnreachable) as e:
            await self._closed(o, opened, Closing(reason=f"could not open: {e}"))
            return str(e)
        return None

    async def _serve(self, o: Opening, opened: str, *, task_status: TaskStatus[None]) -> None:
        """Hear the channel and start the program, then say so (the asker is answered)
        and relay until it closes; the closing is written whatever ends it."""
        up, down = subj.channel(self.agent_id, o.requester, o.channel)
        async with (
            self.bus.pipe(listen=up, speak=down) as pipe,
            self._started(o) as program,
        ):
            if o.program.tty is not None:
                await program.resize(*o.program.tty)
            task_status.started()
            closing = Closing(reason="the agent stopped")
            held = _Open(o)
            self._relaying.add(held)
            self._check(held)
            try:
                closing = await relay(
                    pipe,
                    program,
                    exit_code=program.exit_code,
                    on_resize=program.resize if o.program.tty is not None else None,
                    ping_s=self.ping_s,
                    idle_s=self.idle_s,
                    cut=held.cut_off,
                    ended=OUTPUT_ENDED if o.program.kind == "logs" else "the program exited",
                )
            except Exception as e:  # one channel's failure ends it alone, never the agent
                log.exception("agent.channel_failed", session=o.session_id, channel=o.channel)
                closing = Closing(reason=f"error: {type(e).__name__}: {e}")
            finally:
                self._give(o.requester)
                self._relaying.discard(held)
                with anyio.CancelScope(shield=True):
                    await self._closed(o, opened, closing)

    def _started(self, o: Opening) -> AbstractAsyncContextManager[ExecChannel]:
        """The channel's end in the container: its program, or its output followed."""
        if o.program.kind == "logs":
            return _following(self.runtime, o.container_id, int(o.program.target))
        tty = o.program.tty is not None
        return self.runtime.open_exec(o.container_id, o.program.argv, tty=tty, env=o.program.env)

    async def _closed(self, o: Opening, opened: str, closing: Closing) -> None:
        try:
            await self._write(
                SessionChannelClosed,
                o,
                opened,
                bytes_in=closing.received,
                bytes_out=closing.sent,
                exit_code=closing.exit_code,
                reason=closing.reason,
            )
        except LogError as e:  # the opening stands: the log shows it opened
            log.warning("agent.channel_close_not_written", session=o.session_id, error=str(e))

    async def _write(
        self,
        cls: type[SessionChannelOpened] | type[SessionChannelClosed],
        o: Opening,
        cause: str | None,
        **fields: object,
    ) -> str:
        """Append an event of ``cls`` on the session's exec subject; its id. Raises
        LogError."""
        prov = Provenance(f"agent:{self.agent_id}", self.clock.now(), cause, o.correlation_id)
        e = stamp(
            cls,
            prov,
            session_id=o.session_id,
            agent_id=self.agent_id,
            requester=o.requester,
            channel=o.channel,
            **fields,
        )
        await self.events.append(subj.agent_exec(self.agent_id, o.session_id), e)
        return e.id


@asynccontextmanager
async def _following(
    runtime: ContainerRuntime, container_id: str, tail: int
) -> AsyncIterator[ExecChannel]:
    """A container's output followed, as a program's end: its reads are the output (the
    relay asks for the next only once the window has room, so a reader who does not read
    holds the follow still), what the asker sends is dropped, and no exit code is
    reported (the session's own end says how it ended)."""
    async with runtime.follow_logs(container_id, tail=tail) as output:
        yield _Followed(output)


class _Followed:
    def __init__(self, output: OutputFollow) -> None:
        self._output = output

    async def read(self) -> bytes | None:
        return await self._output.read()

    async def write(self, data: bytes) -> None:
        """Nothing reaches a container through its output."""

    async def resize(self, rows: int, cols: int) -> None:
        """No terminal."""

    async def exit_code(self) -> int | None:
        return None
