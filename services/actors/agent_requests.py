"""What an agent answers off the log: requests only its host can answer (a session's logs,
a command run in its container, a terminal or an app port opened into it: those are
``agent_channels``'s once allowed here).

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
from services.domain.channels import app_program, app_target, channel_problem, shell_program
from services.domain.container_spec import LABEL_AGENT, LABEL_SESSION
from services.domain.fold.cluster import ClusterState
from services.ports import (
    EXEC_OUTPUT_KEPT,
    AgentHandler,
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
    LogError,
    LogsReply,
    LogsRequest,
    OutputStore,
    ShellRequest,
)

__all__ = ["answering"]

log = structlog.get_logger()


def answering(
    agent_id: str,
    runtime: ContainerRuntime,
    state: Callable[[], ClusterState],
    events: EventLog,
    clock: Clock,
    *,
    keep: int = EXEC_OUTPUT_KEPT,
    output: OutputStore | None = None,
    channels: Channels | None = None,
) -> AgentHandler:
    """The handler of ``agent_id``'s requests, over its container engine, the fold
    (``state``, the agent's) and the log it writes the audit of commands to. Only the
    agent's own containers are looked at; who may ask what is
    ``services.domain.access.session_access``'s. A command's output keeps ``keep`` bytes of each
    stream. Once a session's container is gone, its logs are what ``output`` kept.
    Terminals and app ports are opened through ``channels`` (none without it)."""
    labels = {LABEL_AGENT: agent_id}

    async def container_of(session_id: str) -> str | None:
        found = await runtime.list({**labels, LABEL_SESSION: session_id})
        return found[0].id if found else None

    async def logs(requester: str, request: LogsRequest) -> LogsReply:
        try:
            container = await container_of(request.session_id)
        except ContainerError as e:
            return LogsReply(ok=False, error=str(e))
        if container is None:
            return await kept_logs(requester, request)
        refused = may_not_read(state(), requester, request.session_id)
        if refused is not None:
            return LogsReply(ok=False, error=refused)
        try:
            return LogsReply(ok=True, logs=await runtime.logs(container, tail=request.tail))
        except ContainerError as e:
            return LogsReply(ok=False, error=str(e))

    async def kept_logs(requester: str, request: LogsRequest) -> LogsReply:
        """An ended session's output, as the agent kept it when the container went."""
        sid = request.session_id
        kept = None if output is None else await output.kept(sid)
        if kept is None:
            refused = may_not_read(state(), requester, sid)
            return LogsReply(ok=False, error=refused or f"no container of {sid} here")
        refused = may_not_read_kept(state(), requester, kept.owner, kept.domain)
        if refused is not None:
            return LogsReply(ok=False, error=refused)
        lines = kept.text.splitlines(keepends=True)
        return LogsReply(ok=True, logs="".join(lines[-request.tail :] if request.tail else []))

    async def run(requester: str, request: ExecRequest) -> ExecReply:
        s, sid = state(), request.session_id
        refused = may_not_exec(s, requester, sid, agent_id) or exec_problem(
            request.argv, request.timeout_s
        )
        if refused is not None:
            return ExecReply(ok=False, error=refused)
        correlation = s.sessions[sid].correlation_id  # read before the fold moves on
        try:
            container = await container_of(sid)
        except ContainerError as e:
            return ExecReply(ok=False, error=str(e))
        if container is None:
            return ExecReply(ok=False, error=f"no container of {sid} here")
        audit = _Audit(events, subj.agent_exec(agent_id, sid), clock, f"agent:{agent_id}")
        fields = {"session_id": sid, "agent_id": agent_id, "requester": requester}
        try:
            opened = await audit.write(
                SessionExecStarted, None, correlation, argv=request.argv, **fields
            )
        except LogError as e:
            return ExecReply(ok=False, error=f"not run: it could not be written on the log ({e})")
        result: ExecResult | None = None
        error: str | None = None
        with anyio.move_on_after(request.timeout_s):
            try:
                result = await runtime.exec(container, request.argv, keep=keep)
            except ContainerError as e:
                error = str(e)
        if result is None and error is None:
            error = f"timed out after {request.timeout_s:g} s: it may still run in the container"
        closing = (
            {"error": error}
            if result is None
            else {
                "exit_code": result.exit_code,
                "stdout_bytes": result.stdout_bytes,
                "stderr_bytes": result.stderr_bytes,
            }
        )
        try:
            await audit.write(SessionExecFinished, opened, correlation, **closing, **fields)
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

    async def open_channel(requester: str, request: ShellRequest | AppRequest) -> ChannelReply:
        """A terminal or an app connection, allowed as a command is (and audited: the
        opening, then the closing, on the same subject)."""
        s, sid = state(), request.session_id
        refused = may_not_exec(s, requester, sid, agent_id) or channel_problem(request.channel)
        if refused is not None:
            return ChannelReply(ok=False, error=refused)
        if channels is None:
            return ChannelReply(ok=False, error=f"agent {agent_id} opens no channels")
        correlation = s.sessions[sid].correlation_id  # read before the fold moves on
        try:
            found = await runtime.list({**labels, LABEL_SESSION: sid})
        except ContainerError as e:
            return ChannelReply(ok=False, error=str(e))
        if not found:
            return ChannelReply(ok=False, error=f"no container of {sid} here")
        container = found[0]
        if isinstance(request, ShellRequest):
            program = shell_program(request.rows, request.cols, request.term)
        else:
            service = app_target(container.labels, request.target)
            if isinstance(service, str):
                return ChannelReply(ok=False, error=service)
            program = app_program(service)
        opening = Opening(
            session_id=sid,
            requester=requester,
            channel=request.channel,
            correlation_id=correlation,
            container_id=container.id,
            program=program,
        )
        error = await channels.open(opening)
        if error is not None:
            return ChannelReply(ok=False, error=error)
        port = None if program.kind == "shell" else int(program.target)
        return ChannelReply(ok=True, port=port, service=program.service)

    async def answer(requester: str, request: AgentRequest) -> AgentReply:
        match request:
            case LogsRequest():
                return await logs(requester, request)
            case ExecRequest():
                return await run(requester, request)
            case ShellRequest() | AppRequest():
                return await open_channel(requester, request)

    return answer


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
