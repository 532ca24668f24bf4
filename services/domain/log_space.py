"""The log's room: the low-space watermark, the state of a store's disk, and what each
state says. Pure: the watcher beside a server measures (``services.actors.store_watch``),
the quota actor refuses new sessions by ``refusal``, the CLI and the read API say
``reason``.

A disk is low once what is free on it is under the watermark: by default 5% of the disk
or 1 GiB, whichever is smaller (``--low-space 5%,1g``). Below it the cluster admits no new
session, so that what runs can go on writing its events (each session writes some) before
the disk is full; at the disk's end the server stores nothing, and answers nothing. A disk
is full once the server failed to write for want of room: that lasts until the server is
restarted on it with room again (nats-server keeps a write error for good), which is only
done above the watermark.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from events import LogHealth, SpaceState
from services.domain.resources import InvalidAmount, parse_mem

__all__ = ["DEFAULT_LOW_SPACE", "Watermark", "reason", "refusal", "space_state"]

DEFAULT_LOW_SPACE = "5%,1g"


@dataclass(frozen=True)
class Watermark:
    """Under the smallest of ``percent`` of the disk and ``amount`` bytes (those given) a
    disk is low."""

    percent: Decimal | None = None
    amount: int | None = None

    @classmethod
    def parse(cls, spec: str) -> "Watermark":
        """``5%``, ``1g``, or both, comma-separated (the smaller holds). Raises ValueError
        with what is wrong."""
        percent: Decimal | None = None
        amount: int | None = None
        for part in (p.strip() for p in spec.split(",")):
            if part.endswith("%"):
                try:
                    percent = Decimal(part[:-1])
                except InvalidOperation:
                    percent = Decimal(-1)
                if not percent.is_finite() or not 0 <= percent <= 100:
                    raise ValueError(f"--low-space {spec!r}: a share is 0% to 100%")
            else:
                try:
                    amount = parse_mem(part)
                except InvalidAmount:
                    raise ValueError(
                        f"--low-space {spec!r}: give a share of the disk (5%), an amount "
                        "(1g), or both (5%,1g)"
                    ) from None
        if percent is None and amount is None:
            raise ValueError(f"--low-space {spec!r}: give 5%, 1g or 5%,1g")
        return cls(percent, amount)

    def of(self, total: int) -> int:
        """The watermark in bytes on a disk of ``total`` bytes."""
        found = [] if self.amount is None else [self.amount]
        if self.percent is not None:
            found.append(int(Decimal(total) * self.percent / 100))
        return min(found)


def space_state(free: int, watermark: int, *, unwritable: bool) -> SpaceState:
    """FULL if the server could not write (``unwritable``), else LOW under the watermark,
    else OK."""
    if unwritable:
        return SpaceState.FULL
    return SpaceState.LOW if free < watermark else SpaceState.OK


def reason(state: SpaceState, free: int, path: str, watermark: int) -> str:
    """``state`` in one line, as the CLI and the read API say it (empty when OK)."""
    if state is SpaceState.FULL:
        return f"the log's disk is full: {free} bytes free at {path}"
    if state is SpaceState.LOW:
        return (
            f"the log's disk is low: {free} bytes free at {path}, under its watermark of "
            f"{watermark} bytes"
        )
    return ""


def refusal(health: Iterable[LogHealth]) -> str | None:
    """Why no new session is admitted while the log's disks stand so (the latest record
    of each server's), or None: all have room."""
    for h in health:
        if h.state is not SpaceState.OK:
            said = h.reason or reason(h.state, h.free_bytes, h.path, h.watermark_bytes)
            return f"{said}: no new sessions until there is room"
    return None
