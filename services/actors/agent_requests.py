"""What an agent answers off the log: requests only its host can answer (a session's logs)."""

from collections.abc import Callable

from events import Role
from services.domain.container_spec import LABEL_AGENT, LABEL_SESSION
from services.domain.state import ClusterState
from services.ports import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    ContainerError,
    ContainerRuntime,
    LogsReply,
    LogsRequest,
)

__all__ = ["answering"]


def answering(
    agent_id: str, runtime: ContainerRuntime, state: Callable[[], ClusterState]
) -> AgentHandler:
    """The handler of ``agent_id``'s requests, over its container engine and the fold
    (``state``, the agent's). Only the agent's own containers are looked at; only a
    session's owner, or an administrator of its domain, may ask about it (on a cluster
    without tenancy, anyone may)."""

    async def answer(requester: str, request: AgentRequest) -> AgentReply:
        match request:
            case LogsRequest(session_id=session_id, tail=tail):
                refused = _not_allowed(state(), requester, session_id)
                if refused is not None:
                    return LogsReply(ok=False, error=refused)
                labels = {LABEL_AGENT: agent_id, LABEL_SESSION: session_id}
                try:
                    found = await runtime.list(labels)
                    if not found:
                        return LogsReply(ok=False, error=f"no container of {session_id} here")
                    return LogsReply(ok=True, logs=await runtime.logs(found[0].id, tail=tail))
                except ContainerError as e:
                    return LogsReply(ok=False, error=str(e))

    return answer


def _not_allowed(s: ClusterState, requester: str, session_id: str) -> str | None:
    """Why ``requester`` may not ask about ``session_id``; None if it may."""
    t = s.tenancy
    if not t.on:
        return None
    v = s.sessions.get(session_id)
    if v is not None and v.owner == requester:
        return None
    who = t.user_of(requester)
    if who is not None and (
        who.role is Role.SUPERADMIN
        or (who.role is Role.DOMAIN_ADMIN and v is not None and v.domain == who.domain)
    ):
        return None
    return f"{requester} may not see session {session_id}"
