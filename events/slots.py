"""Resource amounts, exact: integers of a fixed quantum, never floats."""

from typing import Annotated

import msgspec

__all__ = ["AMOUNT_LIMIT", "FGPU_QUANTUM_PER_UNIT", "Slots"]

# One fGPU is 100 quanta: 0.01 fGPU is the smallest amount a session can ask for.
FGPU_QUANTUM_PER_UNIT = 100
# No amount on the log is larger in magnitude: a payload holding one is no event (decoding
# refuses it), so every amount, and the sum of a few, fits a reader's 64-bit integers.
AMOUNT_LIMIT = 1 << 62
_Amount = Annotated[int, msgspec.Meta(ge=-AMOUNT_LIMIT, le=AMOUNT_LIMIT)]


class Slots(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A bundle of resources: ``cpu`` in milli-cores, ``mem`` in bytes, ``fgpu`` in quanta.

    ``fgpu=250`` is 2.5 fGPU. Each field is an integer of magnitude at most
    ``AMOUNT_LIMIT`` (decoding refuses any other). A request's amounts must be
    non-negative, which validation says (``invalid_request``: the session is rejected
    with its reason), not decoding: v1 logs hold what they hold, and a state's arithmetic
    (a difference of two bundles) may go below zero in a snapshot.
    """

    cpu: _Amount = 0
    mem: _Amount = 0
    fgpu: _Amount = 0
