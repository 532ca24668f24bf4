"""Resource amounts, exact: integers of a fixed quantum, never floats."""

import msgspec

__all__ = ["FGPU_QUANTUM_PER_UNIT", "Slots"]

# One fGPU is 100 quanta: 0.01 fGPU is the smallest amount a session can ask for.
FGPU_QUANTUM_PER_UNIT = 100


class Slots(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A bundle of resources: ``cpu`` in milli-cores, ``mem`` in bytes, ``fgpu`` in quanta.

    ``fgpu=250`` is 2.5 fGPU. All fields are non-negative integers.
    """

    cpu: int = 0
    mem: int = 0
    fgpu: int = 0
