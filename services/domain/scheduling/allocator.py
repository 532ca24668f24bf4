"""Where a session can go: pure functions over the folded state.

Rules (the issue's): a request of at most one device's worth takes a fraction of one
device; a larger one takes whole free devices plus one fraction for the remainder
(2.5 GPUs = two whole devices and half of a third). All of a session's devices are on
one agent. Among fitting devices and agents the tightest fit wins (best fit), which
keeps large holes open for large requests: the fragmentation Backend.AI users report
(#3327, #9480) comes from spreading small shares over many devices.

This is the ``best-fit`` placement policy, the default; the others are in
``services.domain.scheduling.placement``. A session may name the GPU models it runs on: only
devices of those models are given to it. A CPU-only session (no fGPU) takes no device: the
agent whose free CPU fits tightest.
"""

from collections.abc import Set as AbstractSet
from typing import NamedTuple

from events import DevicePlacement, Slots
from services.domain.fold.cluster import ClusterState
from services.domain.records import AgentView, GpuView
from services.domain.resources import fits, format_slots
from services.domain.scheduling.images import obtainable

__all__ = [
    "Devices",
    "Placement",
    "Refusal",
    "allowed",
    "device_options",
    "never_fits",
    "place",
    "usable",
]

Devices = tuple[DevicePlacement, ...]
Placement = tuple[str, Devices]


def allowed(g: GpuView, gpu_models: tuple[str, ...]) -> bool:
    """Whether device ``g`` is of one of ``gpu_models`` (empty: any model)."""
    return not gpu_models or g.info.model in gpu_models


def _devices(
    a: AgentView, need: int, gpu_models: tuple[str, ...] = ()
) -> tuple[DevicePlacement, ...] | None:
    """The devices of ``a`` that give ``need`` quanta, or None if they cannot."""
    per = a.fgpu_per_gpu
    gpus = [g for g in a.gpus.values() if allowed(g, gpu_models)] if gpu_models else a.gpus.values()
    if need <= per:
        best = None
        for g in gpus:
            if g.free >= need and (best is None or g.free < best.free):
                best = g
        return None if best is None else (DevicePlacement(gpu_index=best.info.index, fgpu=need),)
    whole, rest = divmod(need, per)
    empty = sorted(g.info.index for g in gpus if g.free == per)
    if len(empty) < whole:
        return None
    chosen = [DevicePlacement(gpu_index=i, fgpu=per) for i in empty[:whole]]
    if rest:
        taken = set(empty[:whole])
        part = [g for g in gpus if g.info.index not in taken and g.free >= rest]
        if not part:
            return None
        g = min(part, key=lambda g: (g.free, g.info.index))
        chosen.append(DevicePlacement(gpu_index=g.info.index, fgpu=rest))
    return tuple(chosen)


def device_options(a: AgentView, need: int, gpu_models: tuple[str, ...] = ()) -> list[Devices]:
    """Every way ``a``'s devices can give ``need`` quanta that could matter: devices of
    one model with the same free share are interchangeable, so each (model, free share)
    is offered once, on its lowest index. A CPU-only need (0) takes no device."""
    if need <= 0:
        return [()]
    per = a.fgpu_per_gpu
    gpus = sorted(
        (g for g in a.gpus.values() if allowed(g, gpu_models)), key=lambda g: g.info.index
    )
    whole, rest = divmod(need, per) if need > per else (0, need)
    empty = [g.info.index for g in gpus if g.free == per][:whole]
    if len(empty) < whole:
        return []
    base = tuple(DevicePlacement(gpu_index=i, fgpu=per) for i in empty)
    if not rest:
        return [base]
    taken = set(empty)
    seen: dict[tuple[str, int], int] = {}
    for g in gpus:
        if g.free >= rest and g.info.index not in taken:
            seen.setdefault((g.info.model, g.free), g.info.index)
    return [(*base, DevicePlacement(gpu_index=i, fgpu=rest)) for i in seen.values()]


def usable(a: AgentView, slots: Slots, image: str, unheard: AbstractSet[str]) -> bool:
    """Whether ``a`` may take a session of ``slots`` and ``image`` now, devices aside: alive,
    heard from, holding the image or able to pull it from its registry
    (``services.domain.scheduling.images``), with the CPU, memory and fGPU free in all."""
    return not a.lost and a.agent_id not in unheard and obtainable(a, image) and fits(slots, a.free)


def place(
    s: ClusterState,
    slots: Slots,
    image: str,
    unheard: AbstractSet[str] = frozenset(),
    gpu_models: tuple[str, ...] = (),
) -> Placement | None:
    """The agent and devices for a session needing ``slots`` of ``image`` on devices of
    ``gpu_models`` (empty: any), or None now. ``unheard``: agents not known to be alive
    yet (not heard from since the scheduler started), on which nothing is placed."""
    if slots.fgpu <= 0:
        return _cpu_only(s, slots, image, unheard)
    agents = s.agents
    smallest = s.fit.smallest_device()
    if smallest is not None and slots.fgpu <= smallest:
        # Every agent could take it on one device: the index walks the agents tightest
        # first (their largest free share), the fullest of those first (their fGPU free
        # in all: best fit packs, and does not spread whole-device requests over every
        # agent), so the first that can take it is the best fit.
        for agent_id in s.fit.candidates(slots.fgpu):
            a = agents[agent_id]
            if usable(a, slots, image, unheard):
                devices = _devices(a, slots.fgpu, gpu_models)
                if devices is not None:
                    return agent_id, devices
        return None
    best: tuple[int, str, tuple[DevicePlacement, ...]] | None = None
    for agent_id, a in agents.items():
        if not usable(a, slots, image, unheard):
            continue
        devices = _devices(a, slots.fgpu, gpu_models)
        if devices is not None and (best is None or a.free.fgpu < best[0]):
            best = (a.free.fgpu, agent_id, devices)
    return None if best is None else (best[1], best[2])


def _cpu_only(
    s: ClusterState, slots: Slots, image: str, unheard: AbstractSet[str]
) -> Placement | None:
    """The agent with the least free fGPU and then the tightest free CPU for a CPU-only
    session (first registered of equals), with no device: CPU taken where devices are
    free may leave them too little to be used."""
    best: tuple[tuple[int, int], str] | None = None
    for agent_id, a in s.agents.items():
        if usable(a, slots, image, unheard):
            key = (a.free.fgpu, a.capacity.cpu - a.allocated.cpu)
            if best is None or key < best[0]:
                best = (key, agent_id)
    return None if best is None else (best[1], ())


class Refusal(NamedTuple):
    """Why a session can never be placed: ``code`` as SessionRejected carries it."""

    code: str  # "unknown-image" or "unsatisfiable"
    reason: str


def never_fits(
    s: ClusterState,
    slots: Slots,
    image: str,
    *,
    live_only: bool = False,
    gpu_models: tuple[str, ...] = (),
    group: str | None = None,
    excluded: AbstractSet[str] = frozenset(),
) -> Refusal | None:
    """Why no registered agent (of ``group``, if given; not ``excluded``) could ever take
    this session, even empty, on devices of ``gpu_models`` (empty: any); None if one could.

    Lost agents count: they may come back, and a heartbeat gap must not turn a request
    away for good (``live_only``: count only agents not lost). With no agent registered yet
    nothing is known, so nothing is refused.
    """
    known = [
        a
        for a in s.agents.values()
        if not (live_only and a.lost) and (group is None or a.group == group)
    ]
    if excluded:  # rare (folders' storage hosts): the common call pays nothing for it
        known = [a for a in known if a.agent_id not in excluded]
    if not known:
        return None
    with_image = [a for a in known if obtainable(a, image)]
    if not with_image:
        where = "any agent" if group is None else f"any agent of resource group {group}"
        why = f"image {image!r} is not available on {where}, nor from its registry"
        return Refusal("unknown-image", why)
    for a in with_image:
        devices = (
            sum(1 for g in a.gpus.values() if allowed(g, gpu_models)) if gpu_models else len(a.gpus)
        )
        if fits(slots, a.capacity) and slots.fgpu <= devices * a.fgpu_per_gpu:
            return None
    if gpu_models and slots.fgpu > 0:
        models = ", ".join(gpu_models)
        if not any(allowed(g, gpu_models) for a in with_image for g in a.gpus.values()):
            return Refusal("unsatisfiable", f"no agent has a GPU of model {models}")
    most = max(with_image, key=lambda a: len(a.gpus) * a.fgpu_per_gpu)
    offers = format_slots(
        Slots(cpu=most.capacity.cpu, mem=most.capacity.mem, fgpu=len(most.gpus) * most.fgpu_per_gpu)
    )
    why = f"no agent can ever hold {format_slots(slots)}; the largest offers {offers}"
    return Refusal("unsatisfiable", why)
