"""The log's health: how much room the disk under a server's store has left.

Written on ``fgpu.health.<server>`` by the watcher that runs beside the server (``fgpu
up``'s, as the archiver's service key), when what it finds changes: room under the
low-space watermark (the quota actor then admits no new session), room again, and once
the server writes again after its disk was full, since when it could not (a full disk
stores nothing, this record included, so it is said once it can be).
"""

from datetime import datetime
from enum import StrEnum

from events.base import Event

__all__ = ["LogHealth", "SpaceState"]


class SpaceState(StrEnum):
    OK = "ok"  # room above the watermark
    LOW = "low"  # room under the watermark: no new sessions are admitted
    FULL = "full"  # the server could not write: no room at all


class LogHealth(Event, frozen=True, kw_only=True, tag="log.health.v1"):
    """What the disk under ``server``'s store (``path``) had free (``free_bytes`` of
    ``total_bytes``) against its low-space watermark (``watermark_bytes``), and so
    ``state``; ``reason`` says it in one line (empty when ok). ``unwritable_since``: the
    server could write nothing from then until this record (its disk was full), or None."""

    server: str
    path: str
    state: SpaceState
    free_bytes: int
    total_bytes: int
    watermark_bytes: int
    reason: str = ""
    unwritable_since: datetime | None = None
