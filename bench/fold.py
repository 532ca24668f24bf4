"""Fold benchmark: the per-event cost of decoding a payload and of folding its record.

Builds the synthetic history of ``bench/rebuild.py`` in memory (no server), then in the
same run times:

1. ``events.codec.decode`` of every payload (typed msgspec decode of the event union);
2. ``services.domain.fold.state.evolve`` over every decoded record (seq 1..N, with its
   subject), from an empty state;
3. baseline: a bare ``msgspec.json.decode`` of every payload to dicts (untyped);
4. what a rebuild's folding thread does: ``ProjectionStore.decode`` and ``prepare`` (fold,
   then the changed rows as Arrow tables) of the payloads in the rebuild's batches, into a
   store in memory (nothing written).

Each figure is the best of ``--repeat`` runs, in microseconds per event. Prints one JSON
line. Usage: python bench/fold.py [--events 300000] [--repeat 3]
"""

import argparse
import gc
import json
import time
from array import array
from collections.abc import Callable
from itertools import accumulate

import msgspec
from rebuild import synthetic_log  # bench/rebuild.py, beside this file

from events import AnyEvent, RawBatch, Record, decode
from projections.projector import REBUILD_BATCH
from projections.store import ProjectionStore
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import evolve


def _best(repeat: int, run: Callable[[], object]) -> float:
    """The fewest seconds ``run`` took in ``repeat`` tries (what it builds is dropped)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_prepare(repeat: int, log: list[tuple[str, bytes]]) -> float:
    """The fewest seconds a fresh store took to decode and prepare ``log``, batched as a
    rebuild reads it (the store's opening not counted)."""
    chunks = []
    for start in range(0, len(log), REBUILD_BATCH):
        part = log[start : start + REBUILD_BATCH]
        payloads = [p for _, p in part]  # canonical already: written by events.encode
        offsets = array("q", accumulate(map(len, payloads), initial=0)).tobytes()
        seqs = list(range(start + 1, start + len(part) + 1))
        subjects = [s for s, _ in part]
        chunks.append(RawBatch(seqs, subjects, payloads, b"".join(payloads), offsets))
    best = float("inf")
    for _ in range(repeat):
        store = ProjectionStore(":memory:")
        try:
            gc.collect()
            t0 = time.perf_counter()
            for raw in chunks:
                store.prepare(store.decode(raw.seqs, raw.subjects, raw.payloads), raw)
            best = min(best, time.perf_counter() - t0)
        finally:
            store.close()
    return best


def main(args: argparse.Namespace) -> dict[str, object]:
    log = list(synthetic_log(args.events))
    n = len(log)
    payloads = [p for _, p in log]

    def typed() -> list[AnyEvent]:
        return [decode(p) for p in payloads]

    def untyped() -> list[object]:
        plain = msgspec.json.decode
        return [plain(p) for p in payloads]

    records = [
        Record(seq=i, subject=subject, event=e)
        for i, (subject, e) in enumerate(zip((s for s, _ in log), typed(), strict=True), 1)
    ]

    def folded() -> ClusterState:
        s = ClusterState()
        for r in records:
            evolve(s, r)
        return s

    decode_s = _best(args.repeat, typed)
    evolve_s = _best(args.repeat, folded)
    untyped_s = _best(args.repeat, untyped)
    prepare_s = _best_prepare(args.repeat, log)
    return {
        "bench": "fold",
        "events": n,
        "decode_us": round(decode_s / n * 1e6, 3),
        "evolve_us": round(evolve_s / n * 1e6, 3),
        "untyped_decode_us": round(untyped_s / n * 1e6, 3),
        "ratio_decode_to_untyped": round(decode_s / untyped_s, 3),
        "rebuild_decode_and_prepare_us": round(prepare_s / n * 1e6, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    print(json.dumps(main(parser.parse_args())))
