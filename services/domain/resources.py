"""Exact resource amounts: parsing user input, formatting, and slot arithmetic.

fGPU is held in quanta of 0.01 (``events.slots.FGPU_QUANTUM_PER_UNIT``); CPU in
milli-cores; memory in bytes. Parsing goes through Decimal, so "0.1" + "0.2" fGPU is
exactly 30 quanta, and anything finer than the quantum is refused rather than rounded.
"""

import re
from decimal import Decimal, Inexact, InvalidOperation, localcontext

from events.slots import AMOUNT_LIMIT, FGPU_QUANTUM_PER_UNIT, Slots

__all__ = [
    "MAX_AMOUNT",
    "UNLIMITED",
    "InvalidAmount",
    "add",
    "fits",
    "format_cpu",
    "format_fgpu",
    "format_mem",
    "parse_cpu",
    "parse_fgpu",
    "parse_mem",
    "sub",
]


class InvalidAmount(ValueError):
    """A resource amount given by a user is not acceptable; the message says why."""


# Far above any real amount, far below what Decimal arithmetic cannot hold exactly.
_LARGEST = Decimal(10) ** 18
# The largest amount of any resource a request or a policy may name, in its unit (1 PiB
# of memory, about a trillion cores): far above any machine, far below what sums of many
# overflow.
MAX_AMOUNT = 1 << 50
# An amount at or above this stands for no limit (a policy that caps fGPU but not memory
# holds it for memory); formatted as "unlimited". Above every amount a user can give.
UNLIMITED = AMOUNT_LIMIT


def _decimal(text: str, what: str, *, zero: bool = False) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation as e:
        raise InvalidAmount(f"{what} must be a number, got {text!r}") from e
    if not value.is_finite():
        raise InvalidAmount(f"{what} must be a finite number, got {text!r}")
    if value < 0 or (value == 0 and not zero):
        raise InvalidAmount(f"{what} must be greater than zero, got {text!r}")
    if value > _LARGEST:
        raise InvalidAmount(f"{what} is too large, got {text!r}")
    return value


def _exact(value: Decimal, scale: int, what: str, text: str, step: str) -> int:
    """``value * scale`` as an integer, refusing anything a rounding would change."""
    with localcontext() as ctx:
        ctx.prec = 80
        ctx.traps[Inexact] = True
        try:
            scaled = value * scale
        except Inexact as e:  # more digits than any real amount: never round them away
            raise InvalidAmount(f"{what} must be a multiple of {step}, got {text!r}") from e
    if scaled != scaled.to_integral_value():
        raise InvalidAmount(f"{what} must be a multiple of {step}, got {text!r}")
    if scaled > MAX_AMOUNT:
        raise InvalidAmount(f"{what} is more than any cluster holds, got {text!r}")
    return int(scaled)


def parse_fgpu(text: str, *, zero: bool = False) -> int:
    """Quanta of fGPU in ``text`` ("0.5" -> 50), greater than zero unless ``zero`` (then
    "0", "0.00" -> 0). Raises InvalidAmount."""
    value = _decimal(text, "fGPU", zero=zero)
    return _exact(value, FGPU_QUANTUM_PER_UNIT, "fGPU", text, "0.01")


def parse_cpu(text: str) -> int:
    """Milli-cores in ``text`` ("1" -> 1000, "0.5" -> 500, "250m" -> 250)."""
    t = text.strip()
    if t.endswith("m"):
        return _exact(_decimal(t[:-1], "cpu"), 1, "cpu", text, "1m")
    return _exact(_decimal(t, "cpu"), 1000, "cpu", text, "0.001")


_MEM = re.compile(r"^\s*([0-9.]+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_MEM_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_mem(text: str) -> int:
    """Bytes in ``text`` ("1g" -> 2**30, "512m", "1.5GiB", "1048576"); units are binary."""
    m = _MEM.match(text)
    if not m:
        raise InvalidAmount(f"mem must look like 512m, 1g or a byte count, got {text!r}")
    unit = _MEM_UNITS[m.group(2).lower()]
    return _exact(_decimal(m.group(1), "mem"), unit, "mem", text, "1 byte")


def format_fgpu(quanta: int) -> str:
    """ "0.5" for 50 quanta, "2" for 200; "unlimited" from UNLIMITED on."""
    if quanta >= UNLIMITED:
        return "unlimited"
    value = Decimal(quanta) / FGPU_QUANTUM_PER_UNIT
    return f"{value.normalize():f}"


def format_cpu(millis: int) -> str:
    if millis >= UNLIMITED:
        return "unlimited"
    value = Decimal(millis) / 1000
    return f"{value.normalize():f}"


def format_mem(n: int) -> str:
    if n >= UNLIMITED:
        return "unlimited"
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            value = Decimal(n) / size
            return f"{value.quantize(Decimal('0.01')).normalize():f}{unit}"
    return f"{n}B"


def format_slots(slots: Slots) -> str:
    """ "0.5 fGPU, 1 cpu, 2G mem" """
    fgpu, cpu, mem = format_fgpu(slots.fgpu), format_cpu(slots.cpu), format_mem(slots.mem)
    return f"{fgpu} fGPU, {cpu} cpu, {mem} mem"


def add(a: Slots, b: Slots) -> Slots:
    return Slots(cpu=a.cpu + b.cpu, mem=a.mem + b.mem, fgpu=a.fgpu + b.fgpu)


def sub(a: Slots, b: Slots) -> Slots:
    return Slots(cpu=a.cpu - b.cpu, mem=a.mem - b.mem, fgpu=a.fgpu - b.fgpu)


def fits(need: Slots, free: Slots) -> bool:
    """Whether ``need`` fits in ``free`` on every slot."""
    return need.cpu <= free.cpu and need.mem <= free.mem and need.fgpu <= free.fgpu
