"""How a long-running process of fgpu tunes the interpreter under it: its entry points
(``fgpu up``, ``fgpu agent``, the actors' commands) and the benches that time the same
actors call these once, before they start."""

import gc

__all__ = ["tune_gc"]


def tune_gc() -> None:
    """For long-running actors: collect the young often, the old almost never.

    An actor's state lives as long as the process; CPython's full collections walk all
    of it and stall the actor (``bench/schedule.py`` shows the pauses as latency). The
    state holds no reference cycles, so leaving the old generation alone loses nothing.
    """
    gc.set_threshold(50_000, 50, 1000)
