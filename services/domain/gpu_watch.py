"""Whether a session holds more of a GPU than its slice, by the driver's own figures.

The shim enforces a slice from inside the container, where a hostile process can skip it
(its own environment, the real driver loaded by path) or lie in its counters. The driver's
per-process figures (NVML) are beyond its reach: the agent's watch
(``services.actors.agent_watch``) reads them, this module judges them. Pure: no clock, no
I/O; times are what the caller says.

Memory: a session holding more than its slice on a GPU beyond the tolerance is stopped.
The tolerance is ``slack`` plus ``per_process`` for each of its processes on that GPU:
the driver counts memory the shim's slice cannot (what it takes lazily after a context
and its modules were measured and charged, a context that could not be measured) and
rounds allocations up, so a session that uses its whole slice honestly is never stopped.
What a hostile session can keep beyond its slice is therefore bounded by that tolerance.

SM share: the shim's share is soft (launch pacing, docs/architecture.md). Sustained use
beyond it (the mean over a whole window above the share by more than a margin) is
recorded, never acted on: the figures are the driver's samples, coarse and late, and a
share is a cap the shim keeps for cooperating processes, not a reservation another
session is owed.
"""

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.domain.gpu_slice import SHARE_FULL_PPM

__all__ = [
    "Held",
    "OverSlice",
    "ShareExceeded",
    "ShareWatch",
    "Used",
    "WatchSettings",
    "held_by_session",
    "over_slice",
    "used_by_session",
]

MIB = 1 << 20
_PPM_PER_PERCENT = SHARE_FULL_PPM // 100


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How the agent watches its sessions' GPU use (the defaults are the documented ones).

    ``interval_s``: how often the driver is asked (a session over its slice is stopped
    within about that long of holding it); ``slack`` and ``per_process``: the memory
    tolerance (module docstring); ``share_window_s`` and ``share_margin_ppm``: how long and
    how far beyond its share a session's SM use must go to be recorded.
    """

    interval_s: float = 0.5
    slack: int = 256 * MIB
    per_process: int = 512 * MIB
    share_window_s: float = 30.0
    share_margin_ppm: int = 100_000

    def tolerance(self, processes: int) -> int:
        """Bytes a session with ``processes`` processes on a GPU may hold beyond its slice."""
        return self.slack + self.per_process * processes


@dataclass(frozen=True, slots=True)
class Held:
    """What one session's processes hold on one GPU, by the driver's count."""

    session_id: str
    gpu_index: int
    bytes: int
    pids: tuple[int, ...]  # sorted


@dataclass(frozen=True, slots=True)
class OverSlice:
    held: Held
    mem_limit: int
    tolerance: int


def held_by_session(
    processes: Iterable[tuple[int, int, int]], session_of: Mapping[int, str]
) -> list[Held]:
    """Per session and GPU, the bytes its processes hold: ``processes`` are (GPU index,
    pid, bytes) as the driver lists them; ``session_of`` maps a pid to its session (a pid
    of no session is no one's to judge here)."""
    sums: dict[tuple[str, int], tuple[int, set[int]]] = {}
    for gpu, pid, mem in processes:
        session_id = session_of.get(pid)
        if session_id is None:
            continue
        total, pids = sums.get((session_id, gpu), (0, set()))
        sums[(session_id, gpu)] = (total + mem, pids | {pid})
    return [
        Held(session_id=s, gpu_index=g, bytes=total, pids=tuple(sorted(pids)))
        for (s, g), (total, pids) in sorted(sums.items())
    ]


def over_slice(
    held: Iterable[Held], limits: Mapping[tuple[str, int], int], settings: WatchSettings
) -> list[OverSlice]:
    """The holdings beyond their slice's memory (``limits``, by session and GPU index) and
    the tolerance. A GPU the session was given none of has a limit of 0."""
    out = []
    for h in held:
        limit = limits.get((h.session_id, h.gpu_index), 0)
        tolerance = settings.tolerance(len(h.pids))
        if h.bytes > limit + tolerance:
            out.append(OverSlice(held=h, mem_limit=limit, tolerance=tolerance))
    return out


@dataclass(frozen=True, slots=True)
class Used:
    """How much of one GPU's SM time one session's processes used in one look."""

    ppm: int  # summed over its processes, at most the whole device
    pids: tuple[int, ...]


def used_by_session(
    samples: Iterable[tuple[int, int, int]], session_of: Mapping[int, str]
) -> dict[tuple[str, int], Used]:
    """Per session and GPU, its SM use in one look: ``samples`` are (GPU index, pid, SM
    percent) as the driver sampled them since the last look; a process's samples are
    averaged, the processes of a session summed (capped at the whole device)."""
    per_pid: dict[tuple[str, int, int], list[int]] = {}
    for gpu, pid, percent in samples:
        session_id = session_of.get(pid)
        if session_id is not None:
            per_pid.setdefault((session_id, gpu, pid), []).append(percent)
    out: dict[tuple[str, int], Used] = {}
    for (session_id, gpu, pid), percents in sorted(per_pid.items()):
        ppm = sum(percents) * _PPM_PER_PERCENT // len(percents)
        before = out.get((session_id, gpu), Used(ppm=0, pids=()))
        total = min(SHARE_FULL_PPM, before.ppm + ppm)
        out[(session_id, gpu)] = Used(ppm=total, pids=(*before.pids, pid))
    return out


@dataclass(frozen=True, slots=True)
class ShareExceeded:
    session_id: str
    gpu_index: int
    sm_share_ppm: int
    used_ppm: int  # the mean over the window
    window_s: float
    pids: tuple[int, ...]


@dataclass
class _Window:
    since: float  # when the look at this session and GPU began (or last reported)
    looks: deque[tuple[float, Used]] = field(default_factory=deque)  # within the window


class ShareWatch:
    """Sustained SM use beyond a share: a session and GPU whose mean use over a whole
    window (``WatchSettings.share_window_s``) exceeds its share by more than the margin.
    Reported once per window it lasts: after a report the window starts anew."""

    def __init__(self, settings: WatchSettings) -> None:
        self.settings = settings
        self._windows: dict[tuple[str, int], _Window] = {}

    def look(
        self,
        now: float,
        shares: Mapping[tuple[str, int], int],
        used: Mapping[tuple[str, int], Used],
    ) -> list[ShareExceeded]:
        """One look at ``now`` (seconds, any monotonic origin): ``shares`` are the SM
        shares of the sessions running now, by session and GPU (a session or GPU not among
        them is forgotten); ``used`` what they used since the last look (none: idle)."""
        window = self.settings.share_window_s
        for gone in self._windows.keys() - shares.keys():
            del self._windows[gone]
        out = []
        for key, share in shares.items():
            if share >= SHARE_FULL_PPM:
                continue  # the whole device is the session's: nothing to exceed
            w = self._windows.setdefault(key, _Window(since=now))
            w.looks.append((now, used.get(key, Used(ppm=0, pids=()))))
            while w.looks[0][0] < now - window:
                w.looks.popleft()
            if now - w.since < window:
                continue  # not a whole window yet
            mean = sum(u.ppm for _, u in w.looks) // len(w.looks)
            if mean > share + self.settings.share_margin_ppm:
                session_id, gpu = key
                pids = tuple(sorted({p for _, u in w.looks for p in u.pids}))
                out.append(ShareExceeded(session_id, gpu, share, mean, window, pids))
                self._windows[key] = _Window(since=now)
        return out
