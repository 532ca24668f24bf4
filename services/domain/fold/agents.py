"""The fold of agents" events: registrations, the images they report, lost and heard.

``HANDLERS`` maps each event type to its handler (``services.domain.fold.state``
dispatches on the exact type).
"""

from collections.abc import Callable
from typing import Any

from events import (
    AgentHeard,
    AgentImagesReported,
    AgentLost,
    AgentRegistered,
    Event,
)
from services.domain.fold.cluster import ClusterState
from services.domain.records import AgentView, GpuView

__all__ = ["HANDLERS"]


def _registered(s: ClusterState, seq: int, e: AgentRegistered) -> None:
    _register(s, e)
    s.agents[e.agent_id].registered_seq = seq


def _images_reported(s: ClusterState, seq: int, e: AgentImagesReported) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None:
        a.images = frozenset(i.ref for i in e.images)
        a.image_details = e.images
        s.changed_agents[a.agent_id] = None


def _agent_lost(s: ClusterState, seq: int, e: AgentLost) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None and not a.lost:
        a.lost = True
        a.lost_at = e.at
        s.fit.update(a)
        s.changed_agents[a.agent_id] = None


def _agent_heard(s: ClusterState, seq: int, e: AgentHeard) -> None:
    a = s.agents.get(e.agent_id)
    if a is not None and seq > a.heard_seq:
        a.heard_seq = seq
        s.changed_agents[a.agent_id] = None


def _register(s: ClusterState, e: AgentRegistered) -> None:
    old = s.agents.get(e.agent_id)
    before = {} if old is None else old.gpus
    # Allocations survive a re-registration: they end only with their sessions.
    gpus = {
        g.index: GpuView(
            info=g,
            capacity=e.fgpu_per_gpu,
            shares=before[g.index].shares if g.index in before else {},
        )
        for g in e.gpus
    }
    a = AgentView(
        agent_id=e.agent_id,
        capacity=e.capacity,
        fgpu_per_gpu=e.fgpu_per_gpu,
        gpus=gpus,
        images=frozenset(e.images),
        runtime=e.runtime,
        group=e.group,
        image_details=e.image_details,
        registry=e.registry,
        storage_hosts=e.storage_hosts,
    )
    if old is not None:
        a.allocated = old.allocated
        a.sessions = old.sessions
    s.shares.agent(old, a, s.sessions)
    s.agents[e.agent_id] = a
    s.fit.update(a)
    s.changed_agents[e.agent_id] = None


HANDLERS: dict[type[Event], Callable[[ClusterState, int, Any], None]] = {
    AgentRegistered: _registered,
    AgentLost: _agent_lost,
    AgentHeard: _agent_heard,
    AgentImagesReported: _images_reported,
}
