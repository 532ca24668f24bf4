"""Many agents in one process sharing one fold of the log: for simulation at scale.

A thousand ``AgentActor`` each folding the whole log would do a thousand times the same
work; here one durable consumer feeds one state to every agent's ``react``, which only
looks at its own sessions. Used with the dummy runtime by ``fgpu sim agents`` and the
benchmark; a real node runs one ``AgentActor``.
"""

import anyio
from anyio.abc import TaskStatus

from services.actors.agent import AgentActor
from services.actors.common import follow_log
from services.actors.snapshots import Snapshots
from services.domain.fold.cluster import ClusterState
from services.ports import EventLog

__all__ = ["AgentHost"]


class AgentHost:
    def __init__(
        self,
        events: EventLog,
        agents: list[AgentActor],
        *,
        durable: str,
        snapshots: Snapshots | None = None,
    ) -> None:
        self.events = events
        self.agents = agents
        self.durable = durable
        self.snapshots = snapshots
        self._by_id = {a.config.agent_id: a for a in agents}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            for a in self.agents:
                a.attach(tg)
            await tg.start(self._follow)
            task_status.started()

    async def _follow(self, *, task_status: TaskStatus[ClusterState]) -> None:
        await follow_log(
            self.events,
            self.durable,
            self.react,
            task_status=task_status,
            on_rebuild=self.on_rebuild,
            snapshots=self.snapshots,
        )

    async def on_rebuild(self, s: ClusterState) -> None:
        for a in self.agents:
            await a.on_rebuild(s)

    async def react(self, s: ClusterState) -> None:
        """Hand each agent the sessions of its own that the batch changed; agents the
        batch does not concern are not visited (a host may run thousands)."""
        mine: dict[str, list[str]] = {}
        for session_id in s.changed:
            agent_id = s.sessions[session_id].agent_id
            if agent_id is not None:
                mine.setdefault(agent_id, []).append(session_id)
        for agent_id in {**mine, **s.changed_agents}:
            a = self._by_id.get(agent_id)
            if a is not None:
                changed = agent_id in s.changed_agents
                await a.react_to(s, mine.get(agent_id, []), agent_changed=changed)
