"""Cluster traces and the fragmentation protocol of Weng et al. (USENIX ATC '23).

The traces are Alibaba's ``cluster-trace-gpu-v2023`` (openb): a node list
(``sn, cpu_milli, memory_mib, gpu, model``) and a task list (``name, cpu_milli,
memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]``). A task of ``num_gpu`` 1 asks for
``gpu_milli`` thousandths of one GPU; of more, for that many whole GPUs on one node; of
0, for no GPU. ``gpu_spec`` (``V100M16|V100M32``) lists the models it may run on.

In fgpu's terms a node is an agent whose GPUs are each worth ``FGPU_PER_GPU`` quanta
(one quantum is a thousandth of a GPU, so every share of the trace is exact), and a task
a session of that many quanta (CPU only where it asks for no GPU). A task asking for no
memory or no CPU (the trace has one) asks for the least there is, 1 byte or 1 milli-core,
as a request must ask for some.

The protocol (``arrivals``): per seed, the tasks shuffled, then copies drawn uniformly with
replacement appended until the GPU asked for would pass ``OVERLOAD`` x the cluster's. Each
arrives once, is placed at once or fails for good, and never leaves. After each, arrived =
GPU asked for so far, failed ones included, and allocated = GPU held, both in percent of
the cluster's GPUs; ``unallocated`` at an arrived level is 100 - allocated when it is
first reached (``outcome``).
"""

import csv
import io
import random
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "FGPU_PER_GPU",
    "MARKS",
    "OVERLOAD",
    "Node",
    "Outcome",
    "Task",
    "Timing",
    "TraceError",
    "arrivals",
    "capacity",
    "outcome",
    "parse_nodes",
    "parse_tasks",
    "parse_timings",
]

FGPU_PER_GPU = 1000  # quanta per GPU: a thousandth of a GPU, the trace's unit
OVERLOAD = 13, 10  # copies are appended until the GPU asked for would pass 1.3 x capacity
MARKS = (90, 100, 130)  # arrived levels (percent of capacity) the paper reports


class TraceError(ValueError):
    """A trace file is not what the protocol reads; the message names the row."""


class Node(NamedTuple):
    name: str
    cpu: int  # milli-cores
    mem: int  # bytes
    gpus: int
    model: str


class Task(NamedTuple):
    name: str
    cpu: int  # milli-cores
    mem: int  # bytes
    fgpu: int  # quanta (FGPU_PER_GPU a GPU); 0: CPU only
    gpu_models: tuple[str, ...]  # empty: any


def _rows(text: str, need: Sequence[str], what: str) -> Iterable[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in need if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{what}: no column {', '.join(missing)}")
    yield from enumerate(reader, start=2)


def _int(row: dict[str, str], column: str, line: int, what: str) -> int:
    try:
        value = int(row[column])
    except (TypeError, ValueError) as e:
        raise TraceError(f"{what} line {line}: {column} is not an integer") from e
    if value < 0:
        raise TraceError(f"{what} line {line}: {column} is negative")
    return value


def parse_nodes(text: str) -> list[Node]:
    """The nodes of a node list's CSV text. Raises TraceError."""
    what = "node list"
    out = []
    for line, row in _rows(text, ("sn", "cpu_milli", "memory_mib", "gpu", "model"), what):
        cpu, mem = _int(row, "cpu_milli", line, what), _int(row, "memory_mib", line, what)
        gpus = _int(row, "gpu", line, what)
        out.append(Node(row["sn"], cpu, mem << 20, gpus, row["model"] or "unknown"))
    if not out:
        raise TraceError(f"{what}: no nodes")
    return out


def parse_tasks(text: str) -> list[Task]:
    """The tasks of a task list's CSV text. Raises TraceError."""
    what = "task list"
    out = []
    for line, row in _rows(text, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), what):
        count, milli = _int(row, "num_gpu", line, what), _int(row, "gpu_milli", line, what)
        if count == 1 and not 0 < milli <= FGPU_PER_GPU:
            raise TraceError(f"{what} line {line}: gpu_milli must be 1-{FGPU_PER_GPU}")
        fgpu = milli if count == 1 else count * FGPU_PER_GPU
        spec = row.get("gpu_spec") or ""
        models = tuple(m for m in spec.split("|") if m)
        cpu = max(_int(row, "cpu_milli", line, what), 1)
        mem = max(_int(row, "memory_mib", line, what) << 20, 1)
        out.append(Task(row["name"], cpu, mem, fgpu, models))
    if not out:
        raise TraceError(f"{what}: no tasks")
    return out


class Timing(NamedTuple):
    """When a task of the trace came and how long it held its share, in whole seconds
    from the trace's start: it arrived at ``creation_time``, and held its share from
    ``scheduled_time`` to ``deletion_time``. ``waited_s``: from creation to scheduling
    in the recorded cluster; None for a task that was never scheduled there, which is
    taken to hold its share, if placed, for as long as it existed."""

    arrival_s: int
    duration_s: int
    waited_s: int | None


_TIMES = ("creation_time", "deletion_time", "scheduled_time")


def parse_timings(text: str) -> list[Timing]:
    """The timing of each task of a task list's CSV text, in its rows' order (as
    ``parse_tasks``). Raises TraceError, also for a list without the time columns."""
    what = "task list"
    out = []
    for line, row in _rows(text, _TIMES, what):
        created = _int(row, "creation_time", line, what)
        deleted = _int(row, "deletion_time", line, what)
        scheduled = _int(row, "scheduled_time", line, what) if row["scheduled_time"] else None
        started = created if scheduled is None else scheduled
        if not created <= started <= deleted:
            raise TraceError(
                f"{what} line {line}: times must run creation <= scheduled <= deletion"
            )
        out.append(
            Timing(created, deleted - started, None if scheduled is None else started - created)
        )
    return out


def capacity(nodes: Sequence[Node]) -> int:
    """The cluster's GPUs, in quanta."""
    return sum(n.gpus for n in nodes) * FGPU_PER_GPU


def arrivals(tasks: Sequence[Task], nodes: Sequence[Node], seed: int) -> list[Task]:
    """The protocol's arrival order for ``seed``: the tasks shuffled, then copies drawn
    with replacement until the next would take the GPU asked for past the overload."""
    rng = random.Random(seed)
    order = list(tasks)
    rng.shuffle(order)
    limit = capacity(nodes) * OVERLOAD[0]
    asked = sum(t.fgpu for t in order)
    while True:
        t = rng.choice(tasks)
        if (asked + t.fgpu) * OVERLOAD[1] > limit:
            return order
        asked += t.fgpu
        order.append(t)


class Outcome(NamedTuple):
    """``unallocated_gpu_pct``: unallocated % when arrived first reaches each of MARKS
    (keyed ``"90"``, ``"100"``, ``"130"``; the last point for a level never reached), and
    ``curve``: (arrived %, unallocated %) when arrived first reaches each whole percent."""

    unallocated_gpu_pct: dict[str, float]
    curve: list[tuple[int, float]]


def outcome(arrived: Sequence[Task], placed: Sequence[bool], cap: int) -> Outcome:
    """What the protocol reports of a replay: ``placed[i]`` says whether ``arrived[i]``
    was placed; ``cap`` is the cluster's GPUs in quanta."""
    marks: dict[str, float] = {}
    points: list[tuple[int, float]] = []
    asked = held = 0
    unallocated = 100.0
    for t, ok in zip(arrived, placed, strict=True):
        asked += t.fgpu
        held += t.fgpu if ok else 0
        unallocated = 100 - 100 * held / cap
        level = asked * 100 // cap  # the whole percent arrived, exactly
        if not points or level > points[-1][0]:
            points.append((level, unallocated))
        for mark in MARKS:
            if str(mark) not in marks and asked * 100 >= mark * cap:
                marks[str(mark)] = unallocated
    for mark in MARKS:
        marks.setdefault(str(mark), unallocated)
    return Outcome(marks, points)
