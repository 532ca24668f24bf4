"""The agent's scale of the shares on one GPU (services.domain.gpu_pacing)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.gpu_pacing import (
    MIN_SCALE,
    RELAX_STEP,
    ContainerWindow,
    Counters,
    GpuPacing,
    pace_scale,
)


def w(share: float, busy: float, slept: float = 0.0) -> ContainerWindow:
    return ContainerWindow(share=share, busy=busy, slept=slept)


def test_a_saturated_gpu_scales_every_share_by_what_it_delivers() -> None:
    pair = [w(0.25, 0.25, slept=0.7), w(0.75, 0.637)]
    assert pace_scale(pair, gpu_busy=1.0, previous=1.0) == 0.887


def test_the_scale_relaxes_when_nothing_calls_for_it() -> None:
    pair = [w(0.25, 0.25, slept=0.7), w(0.75, 0.637)]
    # The GPU has idle time: the 0.75 container is not short of the GPU, only of work.
    assert pace_scale(pair, gpu_busy=0.8, previous=0.6) == 0.6 + RELAX_STEP
    # Nobody is held back by its share.
    assert pace_scale([w(0.25, 0.2), w(0.75, 0.7)], 1.0, 0.6) == 0.6 + RELAX_STEP
    # One container alone, or one competing (the other idle).
    assert pace_scale([w(0.25, 0.25, 0.7)], 1.0, 0.95) == 1.0
    assert pace_scale([w(0.25, 0.25, 0.7), w(0.75, 0.01)], 1.0, 0.5) == 0.5 + RELAX_STEP
    # Everyone got its share.
    assert pace_scale([w(0.25, 0.25, 0.7), w(0.5, 0.5, 0.4)], 1.0, 0.9) == 1.0


def test_the_scale_never_falls_below_the_shims_floor() -> None:
    assert pace_scale([w(0.5, 0.05, 0.9), w(0.5, 0.05)], 1.0, 1.0) == MIN_SCALE


@given(
    st.lists(
        st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
        max_size=6,
    ),
    st.floats(0.0, 1.0),
    st.floats(MIN_SCALE, 1.0),
)
def test_the_scale_stays_in_bounds(
    figures: list[tuple[float, float, float]], gpu_busy: float, previous: float
) -> None:
    scale = pace_scale([w(*f) for f in figures], gpu_busy, previous)
    assert MIN_SCALE <= scale <= 1.0


def c(share: float, charged_ms: float, slept_ms: float) -> Counters:
    return Counters(share=share, charged_ns=int(charged_ms * 1e6), slept_ns=int(slept_ms * 1e6))


def test_pacing_takes_each_window_from_the_counters_since_the_last_step() -> None:
    pacing: GpuPacing[str] = GpuPacing()
    start = {"a": c(0.25, 0, 0), "b": c(0.75, 0, 0)}
    assert pacing.step(10.0, start, gpu_busy=1.0) == 1.0  # no window yet
    # Over one second: a used its 0.25 and slept 0.7; b got only 0.637.
    later = {"a": c(0.25, 250, 700), "b": c(0.75, 637, 0)}
    assert pacing.step(11.0, later, gpu_busy=1.0) == pytest.approx(0.887)
    # b is gone: one member left, the scale relaxes back.
    assert pacing.step(12.0, {"a": c(0.25, 500, 1400)}, 1.0) == pytest.approx(0.987)
    assert pacing.step(13.0, {}, 1.0) == 1.0
