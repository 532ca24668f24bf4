"""Where a session can go: pure functions over the folded state.

Rules (the issue's): a request of at most one device's worth takes a fraction of one
device; a larger one takes whole free devices plus one fraction for the remainder
(2.5 GPUs = two whole devices and half of a third). All of a session's devices are on
one agent. Among fitting devices and agents the tightest fit wins (best fit), which
keeps large holes open for large requests: the fragmentation Backend.AI users report
(#3327, #9480) comes from spreading small shares over many devices.
"""

from collections.abc import Set as AbstractSet
from typing import NamedTuple

from events import DevicePlacement, Slots
from services.domain.resources import fits, format_slots
from services.domain.state import AgentView, ClusterState

__all__ = ["Placement", "Refusal", "never_fits", "place"]

Placement = tuple[str, tuple[DevicePlacement, ...]]


def _devices(a: AgentView, need: int) -> tuple[DevicePlacement, ...] | None:
    """The devices of ``a`` that give ``need`` quanta, or None if they cannot."""
    per = a.fgpu_per_gpu
    if need <= per:
        best = None
        for g in a.gpus.values():
            if g.free >= need and (best is None or g.free < best.free):
                best = g
        return None if best is None else (DevicePlacement(gpu_index=best.info.index, fgpu=need),)
    whole, rest = divmod(need, per)
    empty = sorted(i for i, g in a.gpus.items() if g.free == per)
    if len(empty) < whole:
        return None
    chosen = [DevicePlacement(gpu_index=i, fgpu=per) for i in empty[:whole]]
    if rest:
        taken = set(empty[:whole])
        part = [g for i, g in a.gpus.items() if i not in taken and g.free >= rest]
        if not part:
            return None
        g = min(part, key=lambda g: (g.free, g.info.index))
        chosen.append(DevicePlacement(gpu_index=g.info.index, fgpu=rest))
    return tuple(chosen)


def _usable(a: AgentView, slots: Slots, image: str, unheard: AbstractSet[str]) -> bool:
    return not a.lost and a.agent_id not in unheard and image in a.images and fits(slots, a.free)


def place(
    s: ClusterState, slots: Slots, image: str, unheard: AbstractSet[str] = frozenset()
) -> Placement | None:
    """The agent and devices for a session needing ``slots`` of ``image``, or None now.
    ``unheard``: agents not known to be alive yet (not heard from since the scheduler
    started), on which nothing is placed."""
    if slots.fgpu <= 0:
        return None
    agents = s.agents
    smallest = s.fit.smallest_device()
    if smallest is not None and slots.fgpu <= smallest:
        # Every agent could take it on one device: the index finds the tightest quickly.
        for agent_id in s.fit.candidates(slots.fgpu):
            a = agents[agent_id]
            if _usable(a, slots, image, unheard):
                devices = _devices(a, slots.fgpu)
                if devices is not None:
                    return agent_id, devices
        return None
    best: tuple[int, str, tuple[DevicePlacement, ...]] | None = None
    for agent_id, a in agents.items():
        if not _usable(a, slots, image, unheard):
            continue
        devices = _devices(a, slots.fgpu)
        if devices is not None and (best is None or a.free.fgpu < best[0]):
            best = (a.free.fgpu, agent_id, devices)
    return None if best is None else (best[1], best[2])


class Refusal(NamedTuple):
    """Why a session can never be placed: ``code`` as SessionRejected carries it."""

    code: str  # "unknown-image" or "unsatisfiable"
    reason: str


def never_fits(
    s: ClusterState, slots: Slots, image: str, *, live_only: bool = False
) -> Refusal | None:
    """Why no registered agent could ever take this session, even empty; None if one could.

    Lost agents count: they may come back, and a heartbeat gap must not turn a request
    away for good (``live_only``: count only agents not lost). With no agent registered yet
    nothing is known, so nothing is refused.
    """
    known = [a for a in s.agents.values() if not (live_only and a.lost)]
    if not known:
        return None
    with_image = [a for a in known if image in a.images]
    if not with_image:
        return Refusal("unknown-image", f"image {image!r} is not available on any agent")
    for a in with_image:
        if fits(slots, a.capacity) and slots.fgpu <= len(a.gpus) * a.fgpu_per_gpu:
            return None
    most = max(with_image, key=lambda a: len(a.gpus) * a.fgpu_per_gpu)
    offers = format_slots(
        Slots(cpu=most.capacity.cpu, mem=most.capacity.mem, fgpu=len(most.gpus) * most.fgpu_per_gpu)
    )
    why = f"no agent can ever hold {format_slots(slots)}; the largest offers {offers}"
    return Refusal("unsatisfiable", why)
