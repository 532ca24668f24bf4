"""What the fGPU shim measured inside a session's container, as the agent reports it.

Subject ``fgpu.usage.<agent_id>.<session_id>``. Samples are periodic (every few seconds
per session and device); an out-of-memory refusal is reported at once.
"""

from events.base import Event

__all__ = ["GpuOomRefused", "GpuUsageSampled", "SessionCpuSampled"]


class GpuUsageSampled(Event, frozen=True, kw_only=True, tag="gpu.usage-sampled.v1"):
    """Counters of one device of one session, read from the shim's shared region.

    ``mem_used``/``mem_peak``/``mem_limit`` in bytes; ``launches``, ``throttled_ns`` and
    ``oom_refusals`` are totals since the session started (monotonic).
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
