"""What an agent answers off the log: requests only its host can answer (a session's logs)."""

from services.domain.container_spec import LABEL_AGENT, LABEL_SESSION
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


def answering(agent_id: str, runtime: ContainerRuntime) -> AgentHandler:
    """The handler of ``agent_id``'s requests, over its container engine. Only the agent's
    own containers are looked at: another agent's session is not found here."""

    async def answer(request: AgentRequest) -> AgentReply:
        match request:
            case LogsRequest(session_id=session_id, tail=tail):
                labels = {LABEL_AGENT: agent_id, LABEL_SESSION: session_id}
                try:
                    found = await runtime.list(labels)
                    if not found:
                        return LogsReply(ok=False, error=f"no container of {session_id} here")
                    return LogsReply(ok=True, logs=await runtime.logs(found[0].id, tail=tail))
                except ContainerError as e:
                    return LogsReply(ok=False, error=str(e))

    return answer
