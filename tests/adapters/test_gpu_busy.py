"""How busy a session kept each of its devices, as the read shape says it: the GPU time
charged between its last two usage samples over the time between them, taken in the one
query of a page (``queries.last_gpu_memory``)."""

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from events import GpuUsageSampled, encode
from events import subjects as subj
from projections.queries import busy_between, last_gpu_memory
from projections.store import ProjectionStore
from tests.support.projection_logs import T0, Raw, envelope, records_from

GIB = 1 << 30


def _sample(sid: str, gpu: int, at_s: int, charged_ns: int | None, used: int = GIB) -> Raw:
    e = GpuUsageSampled(
        **envelope(at_s, "agent:a1"),
        session_id=sid,
        agent_id="a1",
        gpu_index=gpu,
        mem_used=used,
        mem_peak=used,
        mem_limit=4 * GIB,
        launches=at_s,
        throttled_ns=0,
        oom_refusals=0,
        charged_ns=charged_ns,
    )
    return subj.usage("a1", sid), encode(e)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProjectionStore]:
    s = ProjectionStore(tmp_path / "p.duckdb")
    try:
        yield s
    finally:
        s.close()


def _busy(store: ProjectionStore, log: list[Raw], *sids: str) -> dict[str, list[object]]:
    store.apply(records_from(log))
    found = last_gpu_memory(store.cursor(), sids)
    return {sid: [r["busy"] for r in rows] for sid, rows in found.items()}


def test_busy_is_the_charged_time_between_the_last_two_samples(store: ProjectionStore) -> None:
    log = [
        _sample("s1", 0, 0, 0),
        _sample("s1", 0, 2, 1_800_000_000),  # 90 % over the first two seconds...
        _sample("s1", 0, 6, 2_800_000_000),  # ...25 % over the last four: this one
        _sample("s1", 1, 0, 0),
        _sample("s1", 1, 5, 500_000_000),  # the other device: 10 %
    ]
    store.apply(records_from(log))
    [last, other] = last_gpu_memory(store.cursor(), ["s1"])["s1"]
    assert (last["gpu_index"], last["busy"], last["charged_ns"]) == (0, 0.25, 2_800_000_000)
    assert (last["at"], last["mem_used"], last["mem_limit"]) == (
        T0 + timedelta(seconds=6),
        GIB,
        4 * GIB,
    )
    assert (other["gpu_index"], other["busy"]) == (1, 0.1)


def test_one_sample_or_an_uncounted_device_says_nothing_of_busy(store: ProjectionStore) -> None:
    log = [
        _sample("one", 0, 0, 7),
        _sample("whole", 0, 0, None),  # a whole device: the shim does not count it
        _sample("whole", 0, 3, None),
        _sample("older", 0, 0, None),  # an event from before the counter was carried
        _sample("older", 0, 3, 900_000_000),
    ]
    assert _busy(store, log, "one", "whole", "older") == {
        "one": [None],
        "whole": [None],
        "older": [None],
    }


def test_only_the_sessions_asked_for_are_read(store: ProjectionStore) -> None:
    log = [_sample("mine", 0, 0, 0), _sample("theirs", 0, 0, 0), _sample("theirs", 0, 1, 10)]
    assert _busy(store, log, "mine") == {"mine": [None]}
    assert last_gpu_memory(store.cursor(), []) == {}


@pytest.mark.parametrize(
    ("charged", "seconds", "busy"),
    [
        ((0, 500_000_000), 2, 0.25),
        ((900, 600), 2, 0.0),  # an estimate settled lower: the counter stepped back
        ((0, 3_000_000_000), 2, 1.0),  # overlapping kernels' estimates: the whole device
        ((0, 5), 0, None),  # no time between
        ((0, 5), -1, None),  # a clock stepped back
        ((None, 5), 2, None),
        ((0, None), 2, None),
    ],
)
def test_busy_between_two_samples(
    charged: tuple[int | None, int | None], seconds: int, busy: float | None
) -> None:
    before = {"charged_ns": charged[0], "at": T0}
    after = {"charged_ns": charged[1], "at": T0 + timedelta(seconds=seconds)}
    assert busy_between(before, after) == busy
