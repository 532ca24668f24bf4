"""What an actor's start pays for history: the ids of ended sessions and answered destroy
requests its snapshot carries, as strings (fold version 8) against ``IdSet`` digests.

At 1M events of bench/rebuild.py's history an actor snapshot holds about 140,000 ended
session ids and 70,000 answered destroy requests (``--ended``, ``--answered``). Each is
encoded both ways; figures: the bytes, the best of five decodes into what the fold holds
(a dict of the ids, or two ``IdSet``), and the memory that holds afterwards (tracemalloc).
The baseline is the strings, in the same run.

Prints one JSON line. Usage: python bench/ended_ids.py [--ended 140000] [--answered 70000]
"""

import argparse
import gc
import json
import secrets
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.domain.fold.id_set import IdSet

_STUB = object()  # what fold version 8 mapped each ended id to
_strings = msgspec.msgpack.Decoder(tuple[list[str], dict[str, None]])
_digests = msgspec.msgpack.Decoder(tuple[bytes, bytes])


def _best_s(load: Callable[[], object]) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        load()
        times.append(time.perf_counter() - t0)
    return min(times)


def _held_mb(load: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        kept = load()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return held / 1e6


def main(args: argparse.Namespace) -> dict[str, object]:
    ended = ["s" + secrets.token_hex(6) for _ in range(args.ended)]  # as services.client's
    answered = [secrets.token_hex(16) for _ in range(args.answered)]
    as_strings = msgspec.msgpack.encode([ended, dict.fromkeys(answered)])
    as_digests = msgspec.msgpack.encode([IdSet(ended).to_bytes(), IdSet(answered).to_bytes()])

    def load_strings() -> object:
        ids, answers = _strings.decode(as_strings)
        return dict.fromkeys(ids, _STUB), dict(answers)

    def load_digests() -> object:
        ids, answers = _digests.decode(as_digests)
        return IdSet.from_bytes(ids), IdSet.from_bytes(answers)

    strings_s, digests_s = _best_s(load_strings), _best_s(load_digests)
    strings_mb, digests_mb = _held_mb(load_strings), _held_mb(load_digests)
    return {
        "bench": "ended_ids",
        "ended": args.ended,
        "answered": args.answered,
        "bytes": {"strings": len(as_strings), "digests": len(as_digests)},
        "decode_ms": {"strings": round(strings_s * 1e3, 1), "digests": round(digests_s * 1e3, 2)},
        "held_mb": {"strings": round(strings_mb, 1), "digests": round(digests_mb, 1)},
        "ratio_decode_digests_to_strings": round(digests_s / strings_s, 4),
        "ratio_held_digests_to_strings": round(digests_mb / strings_mb, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ended", type=int, default=140_000)
    parser.add_argument("--answered", type=int, default=70_000)
    print(json.dumps(main(parser.parse_args())))
