"""Which test leaves a resource unclosed: with ``FGPU_LEAK_HUNT=FILE`` set, every test's
teardown is followed by a ``gc.collect()`` under recorded warnings, and each
``ResourceWarning`` (or unraisable exception) it yields is appended to FILE with the test's
id and, where tracemalloc runs (``PYTHONTRACEMALLOC=20``), where the object was made.

Off by default: a collection per test costs time, and the suite's ``filterwarnings=error``
already fails a run that leaks (in whichever later test the collector happens to run).
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["leak_hunt"]


def _where(source: object) -> str:
    """The allocation traceback of the leaked object, when tracemalloc saw it made."""
    if source is None or not tracemalloc.is_tracing():
        return ""
    trace = tracemalloc.get_object_traceback(source)
    return "" if trace is None else "\n".join(trace.format())


@pytest.fixture(autouse=True)
def leak_hunt(request: pytest.FixtureRequest) -> Iterator[None]:
    report = os.environ.get("FGPU_LEAK_HUNT")
    if not report:
        yield
        return
    # Collected before the test too: what a wider-scoped fixture's teardown (a module's
    # stack) left is reported as "before" the next test, not blamed on it.
    _collect(request.node.nodeid + " (before)", report)
    yield
    _collect(request.node.nodeid, report)


def _collect(label: str, report: str) -> None:
    found: list[str] = []
    unraisable: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            gc.collect()
    finally:
        sys.unraisablehook = hook
    for w in seen:
        if issubclass(w.category, ResourceWarning):
            found.append(f"{w.message}\n{_where(w.source)}")
    for u in unraisable:
        found.append(f"unraisable {u.exc_value!r} in {u.object!r}")
    if found:
        with Path(report).open("a") as f:
            for line in found:
                f.write(f"== {label}\n{line}\n")
