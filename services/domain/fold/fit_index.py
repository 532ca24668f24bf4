"""An index of agents by the largest fGPU share one of their devices can still give, and
then by the fGPU they have free in all.

It lets the allocator find a best-fit agent for a fractional request without scanning
every agent: the tightest device first, the fullest agent of those (best fit packs),
found by walking the index until the first agent that can take it.
"""

from bisect import bisect_left, insort
from collections.abc import Iterator

from services.domain.records import AgentView

__all__ = ["FitIndex"]


class FitIndex:
    """Buckets of usable agents keyed by their largest free device share, in quanta, each
    split by the agents' free fGPU in all.

    An agent changed is only noted (``update``) and re-filed when the index is next read:
    a fold that never places anything (the projections') pays a dict entry per change,
    not a re-filing. Within a bucket agents stand by their free fGPU, least first, and
    then in the order of their last change.
    """

    __slots__ = (
        "_buckets",
        "_frees",
        "_key_of",
        "_keys",
        "_per_gpu",
        "_per_gpu_agents",
        "_stale",
        "_touched",
    )

    def __init__(self) -> None:
        # key -> free fGPU in all -> agents in the order of their last change
        self._buckets: dict[int, dict[int, dict[str, None]]] = {}
        self._frees: dict[int, list[int]] = {}  # key -> sorted free amounts of its bucket
        self._keys: list[int] = []  # sorted keys of non-empty buckets
        self._key_of: dict[str, tuple[int, int]] = {}  # agent -> (key, free in all)
        # Agents changed since the index was last read, in the order of their last change.
        self._stale: dict[str, AgentView] = {}
        # Every agent's device size (fGPU quanta a whole device is worth), lost ones too,
        # and how many agents have each size: the smallest is a lookup, not a scan.
        self._per_gpu: dict[str, int] = {}
        self._per_gpu_agents: dict[int, int] = {}
        # Agents changed since ``take_touched`` was last called: the feed a placement
        # policy with an index of its own follows (at most one entry per agent).
        self._touched: dict[str, None] = {}

    def update(self, a: "AgentView") -> None:
        """Note that ``a``'s allocations, capacity or liveness changed."""
        stale = self._stale
        stale.pop(a.agent_id, None)  # a later change moves it last
        stale[a.agent_id] = a
        self._touched[a.agent_id] = None

    def take_touched(self) -> list[str]:
        """The agents changed since the last call (every agent, the first time), in the
        order of their first change since; for one reader (a placement policy's index)."""
        touched = list(self._touched)
        self._touched.clear()
        return touched

    def _refile_stale(self) -> None:
        for a in self._stale.values():
            self._refile(a)
        self._stale.clear()

    def _refile(self, a: "AgentView") -> None:
        self._note_size(a.agent_id, a.fgpu_per_gpu)
        frees = [g.free for g in a.gpus.values()]
        key = 0 if a.lost or not frees else max(frees)
        place = (key, sum(frees))
        agent_id = a.agent_id
        old = self._key_of.pop(agent_id, None)
        if old is not None:  # out of its place; back in last, as a removal and insertion
            self._unfile(agent_id, old)
        if key > 0:
            self._file(agent_id, place)
            self._key_of[agent_id] = place

    def _file(self, agent_id: str, place: tuple[int, int]) -> None:
        key, free = place
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            self._frees[key] = []
            insort(self._keys, key)
        same = bucket.get(free)
        if same is None:
            same = bucket[free] = {}
            insort(self._frees[key], free)
        same[agent_id] = None

    def _unfile(self, agent_id: str, place: tuple[int, int]) -> None:
        key, free = place
        bucket = self._buckets[key]
        same = bucket[free]
        del same[agent_id]
        if same:
            return
        del bucket[free]
        frees = self._frees[key]
        del frees[bisect_left(frees, free)]
        if bucket:
            return
        del self._buckets[key]
        del self._frees[key]
        del self._keys[bisect_left(self._keys, key)]

    def _note_size(self, agent_id: str, size: int) -> None:
        old = self._per_gpu.get(agent_id)
        if old == size:
            return
        counts = self._per_gpu_agents
        if old is not None:
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
        self._per_gpu[agent_id] = size
        counts[size] = counts.get(size, 0) + 1

    def smallest_device(self) -> int | None:
        """The fGPU quanta of the smallest device size among all agents (lost ones too),
        or None before any: a request of at most this fits one device anywhere."""
        self._refile_stale()
        return min(self._per_gpu_agents) if self._per_gpu_agents else None

    def largest(self) -> int:
        """The largest share any usable agent can give on one device (0 if none)."""
        self._refile_stale()
        return self._keys[-1] if self._keys else 0

    def candidates(self, need: int) -> Iterator[str]:
        """Agents with a device of at least ``need`` free quanta, tightest first, then the
        fullest (least fGPU free in all), then in the order of their last change.

        Lazy, and as the agents were when the first is taken: changes noted while it is
        consumed are filed at the next read. Read nothing else from the index (another
        ``candidates``, ``largest``, ``smallest_device``) until it is consumed or dropped:
        that read would file them into the buckets this one walks.
        """
        self._refile_stale()
        for key in self._keys[bisect_left(self._keys, need) :]:
            bucket = self._buckets[key]
            for free in self._frees[key]:
                yield from bucket[free]
