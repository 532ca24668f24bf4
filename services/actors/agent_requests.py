"""What an agent answers off the log: requests only its host can answer (a session's logs,
a command run in its container, a terminal or an app port opened into it: those are
``agent_channels``'s once allowed here; the services its image declares, to whoever may
open one, for the web UI's list of apps).

A command run in a session is audited on the log, on the agent's own subject for it
(``fgpu.agent.<id>.exec.<session>``): ``session.exec-started`` before it starts, and
``session.exec-finished`` once it has ended or could not be waited for. An opening that
cannot be written refuses the command: nothing runs that the log does not show. What the
command printed goes to the requester only. A refusal (another's session, one not running
here) is answered, not written: the server already confines each user to asking in its own
name, and a flood of refusals must not fill the log.
"""

from collections.abc import Callable

import anyio
import structlog

from events import SessionExecFinished, SessionExecStarted
from events import subjects as subj
from services.actors.agent_channels import Channels, Opening
from services.actors.common import Provenance, stamp
from services.domain.access.session_access import (
    exec_problem,
    may_not_exec,
    may_not_read,
    may_not_read_kept,
)
from services.domain.channels import (
    MAX_TAIL,
    Program,
    app_program,
    app_target,
    channel_problem,
    logs_program,
    services_of,
    shell_program,
)
from services.domain.container_spec import LABEL_AGENT, LABEL_SESSION
from services.domain.fold.cluster import ClusterState
from services.ports import (
    EXEC_OUTPUT_KEPT,
    AgentReply,
    AgentRequest,
    AppRequest,
    ChannelReply,
    Clock,
    ContainerError,
    ContainerRuntime,
    EventLog,
    ExecReply,
    ExecRequest,
    ExecResult,
    FollowRequest,
    LogError,
    LogsReply,
    LogsRequest,
    OutputStore,
    ServicesReply,
    ServicesRequest,
    ShellRequest,
)

__all__ = ["AgentAnswers", "answering"]

log = structlog.get_logger()


class AgentAnswers:
    """``agent_id``'s answers, over its container engine, the fold (``state``, the
    agent's) and the log it writes the audit of commands to. Only the agent's own
    containers are looked at; who may ask what is ``services.domain.access.session_access``'s. A
    command's output keeps ``keep`` bytes of each stream. Once a session's container is
    gone, its logs are what ``output`` kept. Terminals and app ports are opened through
    ``channels`` (none without it). An instance is the agent's ``AgentHandler``."""

    def __init__(
        self,
        agent_id: str,
        runtime: ContainerRuntime,
        state: Callable[[], ClusterState],
        events: EventLog,
        clock: Clock,
        *,
        keep: int = EXEC_OUTPUT_KEPT,
        output: OutputStore | None = None,
        channels: Channels | None = None,
    ) -> None:
        self._agent_id, self._runtime, self._state = agent_id, runtime, state
        self._events, self._clock, self._keep = events, clock, keep
        self._output, self._channels = output, channels

    async def __call__(self, requester: str, request: AgentRequest) -> AgentReply:
        """The reply to ``request`` from ``requester`` (an access key); a refusal is a
        reply, not an error."""
        match request:
            case LogsRequest():
                return await self.logs(requester, request)
            case ExecRequest():
                return await self.run(requester, request)
            case ShellRequest() | AppRequest():
                return await self.open_channel(requester, request)
            case ServicesRequest():
                return await self.services(requester, request)
            case FollowRequest():
                return await self.follow(requester, request)

    async def logs(self, requester: str, request: LogsRequest) -> LogsReply:
        """The tail of a session's output: its container's, else what was kept of it."""
        try:
            container = await self._container_of(request.session_id)
        except ContainerError as e:
            return LogsReply(ok=False, error=str(e))
        if container is None:
            return await self._kept_logs(requester, request)
        refused = may_not_read(self._state(), requester, request.session_id)
        if refused is not None:
            return LogsReply(ok=False, error=refused)
        try:
            return LogsReply(ok=True, logs=await self._runtime.logs(container, tail=request.tail))
        except ContainerError as e:
            return LogsReply(ok=False, error=str(e))

    async def run(self, requester: str, request: ExecRequest) -> ExecReply:
        """A command run in a session's container, audited on the log before it starts
        and once it has ended (see the module's docstring)."""
        s, sid = self._state(), request.session_id
        refused = may_not_exec(s, requester, sid, self._agent_id) or exec_problem(
            request.argv, request.timeout_s
        )
        if refused is not None:
            return ExecReply(ok=False, error=refused)
        correlation = s.sessions[sid].correlation_id  # read before the fold moves on
        try:
            container = await self._container_of(sid)
        except ContainerError as e:
            return ExecReply(ok=False, error=str(e))
        if container is None:
            return ExecReply(ok=False, error=f"no container of {sid} here")
        audit = _Audit(
            self._events,
            subj.agent_exec(self._agent_id, sid),
            self._clock,
            f"agent:{self._agent_id}",
        )
        fields = {"session_id": sid, "agent_id": self._agent_id, "requester": requester}
        try:
            opened = await audit.write(
                SessionExecStarted, None, correlation, argv=request.argv, **fields
            )
        except LogError as e:
            return ExecReply(ok=False, error=f"not run: it could not be written on the log ({e})")
        result, error = await self._exec(container, request)
        try:
            await audit.write(
                SessionExecFinished, opened, correlation, **_closing(result, error), **fields
            )
        except LogError as e:  # the opening stands: the log shows it ran, not how it ended
            log.warning("agent.exec_end_not_written", session=sid, error=str(e))
        if result is None:
            return ExecReply(ok=False, error=error)
        return ExecReply(
            ok=True,
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            stdout_bytes=result.stdout_bytes,
            stderr_bytes=result.stderr_bytes,
        )

    async def open_channel(
        self, requester: str, request: ShellRequest | AppRequest
    ) -> ChannelReply:
        """A terminal or an app connection, allowed as a command is (and audited: the
        opening, then the closing, on the same subject)."""
        s, sid = self._state(), request.session_id
        refused = may_not_exec(s, requester, sid, self._agent_id) or channel_problem(
            request.channel
        )
        if refused is not None:
            return ChannelReply(ok=False, error=refused)
        if self._channels is None:
            return ChannelReply(ok=False, error=f"agent {self._agent_id} opens no channels")
        correlation = s.sessions[sid].correlation_id  # read before the fold moves on
        try:
            found = await self._runtime.list(self._labels(sid))
        except ContainerError as e:
            return ChannelReply(ok=False, error=str(e))
        if not found:
            return ChannelReply(ok=False, error=f"no container of {sid} here")
        container = found[0]
        program = _program(request, container.labels)
        if isinstance(program, str):
            return ChannelReply(ok=False, error=program)
        error = await self._open(
            Opening(sid, requester, request.channel, correlation, container.id, program)
        )
        if error is not None:
            return ChannelReply(ok=False, error=error)
        port = None if program.kind == "shell" else int(program.target)
        return ChannelReply(ok=True, port=port, service=program.service)

    async def services(self, requester: str, request: ServicesRequest) -> ServicesReply:
        """The services the session's image declares, told to whoever may open them (as
        an app channel is allowed); nothing is written: nothing was opened."""
        sid = request.session_id
        refused = may_not_exec(self._state(), requester, sid, self._agent_id)
        if refused is not None:
            return ServicesReply(ok=False, error=refused)
        try:
            found = await self._runtime.list(self._labels(sid))
        except ContainerError as e:
            return ServicesReply(ok=False, error=str(e))
        if not found:
            return ServicesReply(ok=False, error=f"no container of {sid} here")
        declared = sorted(services_of(found[0].labels).values(), key=lambda s: s.name)
        return ServicesReply(
            ok=True, services=tuple((s.name, s.protocol, s.port) for s in declared)
        )

    async def follow(self, requester: str, request: FollowRequest) -> ChannelReply:
        """A session's output followed on a channel, allowed as reading its logs is (and
        audited as a channel: the opening, then the closing). Only while its container is
        here: an ended session's kept output is ``logs``'s."""
        s, sid = self._state(), request.session_id
        refused = (
            may_not_read(s, requester, sid)
            or channel_problem(request.channel)
            or (None if 0 <= request.tail <= MAX_TAIL else f"tail must be 0 to {MAX_TAIL}")
        )
        if refused is not None:
            return ChannelReply(ok=False, error=refused)
        session = s.sessions.get(sid)
        if session is None or self._channels is None:
            return ChannelReply(ok=False, error=f"no container of {sid} here")
        try:
            container = await self._container_of(sid)
        except ContainerError as e:
            return ChannelReply(ok=False, error=str(e))
        if container is None:
            return ChannelReply(ok=False, error=f"no container of {sid} here")
        program = logs_program(request.tail)
        error = await self._open(
            Opening(sid, requester, request.channel, session.correlation_id, container, program)
        )
        return ChannelReply(ok=error is None, error=error)

    async def _open(self, opening: Opening) -> str | None:
        """Open a channel (the caller has allowed it); None once open, else why not."""
        assert self._channels is not None
        return await self._channels.open(opening)

    def _labels(self, session_id: str) -> dict[str, str]:
        """The labels of this agent's container of ``session_id``."""
        return {LABEL_AGENT: self._agent_id, LABEL_SESSION: session_id}

    async def _container_of(self, session_id: str) -> str | None:
        found = await self._runtime.list(self._labels(session_id))
        return found[0].id if found else None

    async def _kept_logs(self, requester: str, request: LogsRequest) -> LogsReply:
        """An ended session's output, as the agent kept it when the container went."""
        sid = request.session_id
        kept = None if self._output is None else await self._output.kept(sid)
        if kept is None:
            refused = may_not_read(self._state(), requester, sid)
            return LogsReply(ok=False, error=refused or f"no container of {sid} here")
        refused = may_not_read_kept(self._state(), requester, kept.owner, kept.domain)
        if refused is not None:
            return LogsReply(ok=False, error=refused)
        lines = kept.text.splitlines(keepends=True)
        return LogsReply(ok=True, logs="".join(lines[-request.tail :] if request.tail else []))

    async def _exec(
        self, container: str, request: ExecRequest
    ) -> tuple[ExecResult | None, str | None]:
        """The command's result, or why there is none (the engine's error, or the time
        it had run out: it may still run, the engine cannot be asked to stop it)."""
        result: ExecResult | None = None
        error: str | None = None
        with anyio.move_on_after(request.timeout_s):
            try:
                result = await self._runtime.exec(container, request.argv, keep=self._keep)
            except ContainerError as e:
                error = str(e)
        if result is None and error is None:
            error = f"timed out after {request.timeout_s:g} s: it may still run in the container"
        return result, error


def _closing(result: ExecResult | None, error: str | None) -> dict[str, object]:
    """The fields of ``session.exec-finished``: how the command ended, or why unknown."""
    if result is None:
        return {"error": error}
    return {
        "exit_code": result.exit_code,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
    }


def _program(request: ShellRequest | AppRequest, labels: dict[str, str]) -> Program | str:
    """What a channel runs in the container (of ``labels``): a terminal, or a connection
    to an app's port; a refusal's reason for an app the container does not serve."""
    if isinstance(request, ShellRequest):
        return shell_program(request.rows, request.cols, request.term)
    service = app_target(labels, request.target)
    if isinstance(service, str):
        return service
    return app_program(service)


# The handler of an agent's requests, by the name the stack wires it with.
answering = AgentAnswers


class _Audit:
    """Writes the audit of commands run in one session on ``subject``, as ``actor``."""

    def __init__(self, events: EventLog, subject: str, clock: Clock, actor: str) -> None:
        self._events, self._subject, self._clock, self._actor = events, subject, clock, actor

    async def write(
        self,
        cls: type[SessionExecStarted] | type[SessionExecFinished],
        cause: str | None,
        correlation: str,
        **fields: object,
    ) -> str:
        """Append an event of ``cls`` (deduped by its id, no expected sequence: nothing
        else writes this subject's events in an order that matters); its id. Raises
        LogError."""
        prov = Provenance(self._actor, self._clock.now(), cause, correlation)
        e = stamp(cls, prov, **fields)
        await self._events.append(self._subject, e)
        return e.id
