"""Why a PENDING session waits: the resource that is short, and where.

The scheduler tells a session why it waits the first round it does not fit
(``session.queued``); the read API, the CLI and the web UI show that note as it is. The
note is worked out against the round's state, over the session's candidate agents: those
of its resource group that are alive and heard from, mount its folders' storage hosts and
hold its image or can pull it. For each, which of CPU, memory and fGPU it lacks (fGPU: a
free share of one device large enough, or for more than one device's worth, enough whole
free devices and a share beside them, of the models the session names). Then:

- no candidate: the note says which filter left none (no live agent; none mounting the
  storage hosts; none with the image);
- a resource every candidate lacks blocks the session by itself: the note names each
  such resource, with the most any candidate has free and where (``waiting for CPU: no
  agent of resource group G has 2 CPU free (most free: 0.5 CPU on a1)``);
- no resource short everywhere (the agents lack different things): the note names the
  agent closest to fitting, the one lacking the fewest resources (the first registered of
  equals), and what it lacks;
- a candidate lacks nothing: the session fits, and waits behind the session that
  reserves the group (``reserved_by``), which waited longest and does not fit.

Cheap at any scale: the candidates are filed once per round by what the check sees of
them (free CPU, memory and each device's model and free share), so a note costs the
distinct agents, not the agents; and notes are kept per shape of session (slots, image,
GPU models, storage hosts) for the round, where nothing frees.
"""

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from events import Slots
from services.domain.fold.cluster import ClusterState
from services.domain.records import AgentView, SessionView
from services.domain.resources import format_cpu, format_fgpu, format_mem
from services.domain.scheduling.images import obtainable

__all__ = ["WaitingNotes"]

# What the check sees of an agent: free CPU, free memory, fGPU per device, and each
# device's (model, free share) in index order. Alike agents share one.
_Profile = tuple[int, int, int, tuple[tuple[str, int], ...]]
_NoteKey = tuple[Slots, str, tuple[str, ...], tuple[str, ...]]

_CPU, _MEM, _FGPU = "CPU", "memory", "fGPU"
_RESOURCES = (_CPU, _MEM, _FGPU)


@dataclass(frozen=True)
class _Offer:
    """What one candidate agent offers of fGPU for a need, comparable: for one device's
    worth, its largest free share (``whole`` 0); beyond, its whole free devices and the
    largest free share of its other devices."""

    whole: int
    share: int
    gpu: int | None  # the device of ``share`` (the lowest of equals), None if none


def _offer(a: AgentView, need: int, models: tuple[str, ...]) -> _Offer:
    per = a.fgpu_per_gpu
    devices = [(i, g.info.model, g.free) for i, g in a.gpus.items()]
    allowed = [d for d in devices if not models or d[1] in models]
    if need <= per:
        best = max(allowed, key=lambda d: (d[2], -d[0]), default=None)
        return _Offer(0, 0, None) if best is None else _Offer(0, best[2], best[0])
    whole = sum(1 for d in allowed if d[2] == per)
    rest = max((d for d in allowed if d[2] < per), key=lambda d: (d[2], -d[0]), default=None)
    return _Offer(whole, 0, None) if rest is None else _Offer(whole, rest[2], rest[0])


def _fgpu_fits(offer: _Offer, need: int, per: int) -> bool:
    if need <= per:
        return offer.share >= need
    whole, rest = divmod(need, per)
    if offer.whole > whole:  # a whole device beyond those taken gives the rest
        return True
    return offer.whole == whole and (rest == 0 or offer.share >= rest)


def _short(p: _Profile, slots: Slots, offer: _Offer) -> tuple[str, ...]:
    """The resources an agent of profile ``p`` lacks for ``slots``."""
    cpu, mem, per, _ = p
    return tuple(
        r
        for r, lacks in (
            (_CPU, slots.cpu > cpu),
            (_MEM, slots.mem > mem),
            (_FGPU, slots.fgpu > 0 and not _fgpu_fits(offer, slots.fgpu, per)),
        )
        if lacks
    )


@dataclass
class _Candidate:
    agent: AgentView
    profile: _Profile
    offer: _Offer
    short: tuple[str, ...]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class WaitingNotes:
    """Why sessions of ``group`` wait, against ``s`` as it stands: one per round (or per
    time-limits check). ``excluded``: agents nothing is placed on (another group's, not
    heard from yet); ``not_mounting(hosts)``: the agents that do not mount every storage
    host in ``hosts``."""

    def __init__(
        self,
        s: ClusterState,
        group: str,
        excluded: AbstractSet[str],
        not_mounting: Callable[[tuple[str, ...]], AbstractSet[str]],
    ) -> None:
        self._s = s
        self._group = group
        self._excluded = excluded
        self._not_mounting = not_mounting
        # profile -> (order of registration, agent) of the group's live agents
        self._profiles: dict[_Profile, list[tuple[int, AgentView]]] | None = None
        self._notes: dict[_NoteKey, tuple[str, str | None]] = {}

    def note(self, v: SessionView, reserved_by: str | None = None) -> str:
        """Why ``v`` waits; ``reserved_by``: the session that reserves the group this
        round, if one does (what ``v`` waits behind when it fits)."""
        said, fits_on = self._worked_out(v)
        if fits_on is None:
            return said
        if reserved_by is not None and reserved_by != v.session_id:
            return (
                f"waiting behind session {reserved_by}: it waited longest, and nothing "
                f"else of resource group {self._group} is placed until it fits"
            )
        return f"waiting for its turn: it fits on {fits_on} now"

    def fits(self, v: SessionView) -> bool:
        """Whether some candidate agent has all ``v`` asks for free now."""
        return self._worked_out(v)[1] is not None

    def _worked_out(self, v: SessionView) -> tuple[str, str | None]:
        key = (v.slots, v.image, v.gpu_models, v.storage_hosts)
        if key not in self._notes:
            self._notes[key] = self._work_out(v)
        return self._notes[key]

    def _by_profile(self) -> dict[_Profile, list[tuple[int, AgentView]]]:
        """The live agents of the group, filed by profile, in order of registration."""
        if self._profiles is None:
            # The one walk of every agent a round's notes make: kept lean (no Slots built,
            # no call per agent).
            group, excluded = self._group, self._excluded
            profiles: dict[_Profile, list[tuple[int, AgentView]]] = {}
            for rank, a in enumerate(self._s.agents.values()):
                if a.lost or a.group != group or a.agent_id in excluded:
                    continue
                capacity, allocated = a.capacity, a.allocated
                key = (
                    capacity.cpu - allocated.cpu,
                    capacity.mem - allocated.mem,
                    a.fgpu_per_gpu,
                    tuple([(g.info.model, g.free) for g in a.gpus.values()]),
                )
                alike = profiles.get(key)
                if alike is None:
                    profiles[key] = [(rank, a)]
                else:
                    alike.append((rank, a))
            self._profiles = profiles
        return self._profiles

    def _candidates(self, v: SessionView) -> tuple[list[_Candidate], str | None]:
        """One candidate per profile (its first agent that mounts ``v``'s storage hosts
        and can have its image), in order of registration, or why there is none."""
        profiles = self._by_profile()
        if not profiles:
            return [], f"no agent of resource group {self._group} is alive"
        unmounting = self._not_mounting(v.storage_hosts) if v.storage_hosts else frozenset()
        mounting = False
        out: list[tuple[int, _Candidate]] = []
        for p, agents in profiles.items():
            for rank, a in agents:
                if a.agent_id in unmounting:
                    continue
                mounting = True
                if obtainable(a, v.image):
                    offer = _offer(a, v.slots.fgpu, v.gpu_models)
                    out.append((rank, _Candidate(a, p, offer, _short(p, v.slots, offer))))
                    break
        if out:
            out.sort(key=lambda ranked: ranked[0])
            return [c for _, c in out], None
        if not mounting:
            hosts = ", ".join(v.storage_hosts)
            return [], (
                f"no live agent of resource group {self._group} mounts the virtual folders "
                f"of storage host {hosts}"
            )
        return [], (
            f"no live agent of resource group {self._group} holds image {v.image!r} or can pull it"
        )

    def _work_out(self, v: SessionView) -> tuple[str, str | None]:
        """The note for ``v``'s shape, or (with the agent) that it fits somewhere."""
        candidates, none = self._candidates(v)
        if none is not None:
            return f"waiting for an agent: {none}", None
        fitting = next((c for c in candidates if not c.short), None)
        if fitting is not None:
            return "", fitting.agent.agent_id
        blocking = [r for r in _RESOURCES if all(r in c.short for c in candidates)]
        if blocking:
            clauses = "; ".join(self._nowhere(r, v, candidates) for r in blocking)
            return f"waiting for {' and '.join(blocking)}: {clauses}", None
        lacking = [r for r in _RESOURCES if any(r in c.short for c in candidates)]
        closest = min(candidates, key=lambda c: len(c.short))  # the first of equals
        lacks = " and ".join(_has(r, closest, v) for r in closest.short)
        return (
            f"waiting for {' or '.join(lacking)}: no agent of resource group {self._group} "
            f"has {_asked(v)} free at once (closest: {closest.agent.agent_id}, "
            f"short of {lacks})"
        ), None

    def _nowhere(self, r: str, v: SessionView, candidates: list[_Candidate]) -> str:
        """That no candidate has enough of ``r`` for ``v``, and the most one has."""
        g = self._group
        slots = v.slots
        if r in (_CPU, _MEM):
            free = _free_cpu if r == _CPU else _free_mem
            best = max(candidates, key=free)
            most = free(best)
            asked, has = (
                (f"{format_cpu(slots.cpu)} CPU", f"{format_cpu(most)} CPU")
                if r == _CPU
                else (f"{format_mem(slots.mem)} memory", format_mem(most))
            )
            where = (
                f"most free: {has} on {best.agent.agent_id}" if most else "none free on any agent"
            )
            return f"no agent of resource group {g} has {asked} free ({where})"
        models = f" of model {', '.join(v.gpu_models)}" if v.gpu_models else ""
        best = max(candidates, key=lambda c: (c.offer.whole, c.offer.share))
        per = best.profile[2]
        if slots.fgpu <= per:
            where = f"largest free share: {_share_on(best)}"
            if not best.offer.share:
                where = "none free on any device"
            return (
                f"no device{models} in resource group {g} has {format_fgpu(slots.fgpu)} fGPU "
                f"free ({where})"
            )
        whole, rest = divmod(slots.fgpu, per)
        wanted = _plural(whole, "whole device") + models
        if rest:
            wanted += f" and a {format_fgpu(rest)} fGPU share"
        return (
            f"no agent of resource group {g} has {wanted} free "
            f"(most: {_devices_free(best)} on {best.agent.agent_id})"
        )


def _asked(v: SessionView) -> str:
    slots = v.slots
    parts = [f"{format_cpu(slots.cpu)} CPU", f"{format_mem(slots.mem)} memory"]
    if slots.fgpu > 0:
        parts.append(f"{format_fgpu(slots.fgpu)} fGPU")
    return ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _share_on(c: _Candidate) -> str:
    return f"{format_fgpu(c.offer.share)} fGPU on {c.agent.agent_id} gpu{c.offer.gpu}"


def _devices_free(c: _Candidate) -> str:
    whole = _plural(c.offer.whole, "whole device")
    if not c.offer.share:
        return whole
    return f"{whole} and a {format_fgpu(c.offer.share)} fGPU share"


def _has(r: str, c: _Candidate, v: SessionView) -> str:
    """What candidate ``c`` has of ``r``, which it lacks for ``v``."""
    if r == _CPU:
        return f"CPU: {format_cpu(c.profile[0])} free of {format_cpu(v.slots.cpu)}"
    if r == _MEM:
        return f"memory: {format_mem(c.profile[1])} free of {format_mem(v.slots.mem)}"
    if v.slots.fgpu <= c.profile[2]:
        if not c.offer.share:
            return f"fGPU: no share free of {format_fgpu(v.slots.fgpu)}"
        share = f"{format_fgpu(c.offer.share)} fGPU on gpu{c.offer.gpu}"
        return f"fGPU: largest free share {share} of {format_fgpu(v.slots.fgpu)}"
    return f"fGPU: {_devices_free(c)} free for {format_fgpu(v.slots.fgpu)}"


def _free_cpu(c: _Candidate) -> int:
    return c.profile[0]


def _free_mem(c: _Candidate) -> int:
    return c.profile[1]
