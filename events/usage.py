"""What the fGPU shim measured inside a session's container, and what the driver itself
counted for its processes (the agent's NVML watch), as the agent reports it.

Subject ``fgpu.usage.<agent_id>.<session_id>``. Samples are periodic (every few seconds
per session and device); an out-of-memory refusal is reported at once, and so is a
session found holding more than its slice (the agent stops it).
"""

from events.base import Event

__all__ = [
    "GpuOomRefused",
    "GpuOverSlice",
    "GpuShareExceeded",
    "GpuUsageSampled",
    "SessionCpuSampled",
]


class GpuUsageSampled(Event, frozen=True, kw_only=True, tag="gpu.usage-sampled.v1"):
    """Counters of one device of one session, read from the shim's shared region.

    ``mem_used``/``mem_peak``/``mem_limit`` in bytes; ``launches``, ``throttled_ns`` and
    ``oom_refusals`` are totals since the session started (monotonic).

    ``charged_ns``: the GPU time the shim charged against the slice's share of the SMs
    there, in all since the session started (nanoseconds of the whole device's time). Its
    kernels' times are estimated at launch and settled as they are measured, so it may
    step back a little between samples. None where it is not counted: a slice of a whole
    device (or under MPS) is not paced, and older events do not say. Its growth between
    two samples over the time between them is how busy the session kept the device.
    """

    session_id: str
    agent_id: str
    gpu_index: int
    mem_used: int
    mem_peak: int
    mem_limit: int
    launches: int
    throttled_ns: int
    oom_refusals: int
    charged_ns: int | None = None


class GpuOomRefused(Event, frozen=True, kw_only=True, tag="gpu.oom-refused.v1"):
    """The shim refused an allocation that would have gone over the session's slice."""

    session_id: str
    agent_id: str
    gpu_index: int
    pid: int
    requested: int
    mem_used: int
    mem_limit: int


class SessionCpuSampled(Event, frozen=True, kw_only=True, tag="session.cpu-sampled.v1"):
    """The CPU time a session's container used in all since it started (``cpu_ns``,
    nanoseconds, monotonic), reported when it has grown since the last report: a session
    with none for a while used no CPU (its group's idle timeout looks at this)."""

    session_id: str
    agent_id: str
    cpu_ns: int


class GpuOverSlice(Event, frozen=True, kw_only=True, tag="gpu.over-slice.v1"):
    """The driver counted more memory on one GPU for a session's processes than its slice
    allows, beyond the tolerance: the agent stops the session at once (its end follows,
    with the reason). A process that skipped the shim (say, loaded the real driver by
    path) or lied in the shim's counters is caught so.

    ``held``: bytes the driver holds for the session's processes on ``gpu_index`` (the
    agent's GPU index), as NVML counts them, CUDA contexts included; ``mem_limit``: the
    slice's bytes there; ``tolerance``: the bytes allowed beyond it (``held`` exceeded
    ``mem_limit + tolerance``); ``pids``: those processes, as the host numbers them.
    """

    session_id: str
    agent_id: str
    gpu_index: int
    held: int
    mem_limit: int
    tolerance: int
    pids: tuple[int, ...]


class GpuShareExceeded(Event, frozen=True, kw_only=True, tag="gpu.share-exceeded.v1"):
    """A session's processes kept one GPU's SMs busier than its share, on average over a
    whole window (NVML's per-process utilisation samples): recorded, not acted on. The
    share is soft (the shim paces launches); see docs/architecture.md for what it holds.

    ``sm_share_ppm``: the slice's share of the SMs' time, in parts per million;
    ``used_ppm``: the part of the window the session's kernels ran, summed over its
    processes (the driver's per-process figures, at most the whole device); ``window_s``:
    the window's length; ``pids``: the processes sampled, as the host numbers them.
    """

    session_id: str
    agent_id: str
    gpu_index: int
    sm_share_ppm: int
    used_ppm: int
    window_s: int
    pids: tuple[int, ...]
