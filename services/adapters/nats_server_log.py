"""What the nats-server writes to its log that it says nowhere else: permission
violations, and writes that failed for want of room.

The server refuses a publish or a subscription its client's permissions do not allow,
tells the client, and logs one line; it sends no system event for it. So whoever runs
beside the server (``fgpu up``, or the gatekeeper given ``--server-log``) follows the
log file and hands each violation on, to be written to the access audit. Likewise a
write its store failed for want of room: the server answers the publish nothing at all,
keeps failing every write until it starts again, and says so only here (the watcher
beside it, ``fgpu up``'s, follows it: ``nats_supervisor``). A line of another form is
ignored: the server's log is not ours to parse beyond these.

Lines look like (nats-server 2.10 to 2.15)::

    [pid] date time [ERR] 127.0.0.1:50866 - cid:18 - "v2.16.0:python3" - "FGPU/user:user:ana"
        - Publish Violation - Subject "fgpu.sched"
    [pid] date time [ERR] Filestore [FGPU] Critical write error: write
        /store/jetstream/FGPU/streams/FGPU/msgs/1.blk: no space left on device
"""

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

__all__ = [
    "Violation",
    "follow_lines",
    "follow_violations",
    "parse_violation",
    "parse_write_failure",
]

_LINE = re.compile(
    r"\[ERR\] (?P<client>\S+) - cid:(?P<cid>\d+) - .*?"
    r'"(?P<account>[^"/]*)/(?P<who>[^"]*)" - '
    r'(?P<kind>Publish|Subscription) Violation - Subject "(?P<subject>[^"]*)"'
)
_NO_ROOM = "no space left on device"  # ENOSPC, as Go says it
_POLL_S = 0.2


@dataclass(frozen=True)
class Violation:
    client_id: int  # the server's connection id (cid)
    client: str  # host:port
    identity: str  # the name the server knows the user by
    kind: str  # publish or subscription
    subject: str


def parse_violation(line: str) -> Violation | None:
    """The violation ``line`` reports, or None for a line of another kind."""
    m = _LINE.search(line)
    if m is None:
        return None
    identity = m["who"].removeprefix("user:")
    return Violation(int(m["cid"]), m["client"], identity, m["kind"].lower(), m["subject"])


def parse_write_failure(line: str) -> str | None:
    """What the server said, if ``line`` reports a write it failed for want of room."""
    if "[ERR]" not in line or _NO_ROOM not in line:
        return None
    return line.split("[ERR] ", 1)[1].strip()


async def follow_violations(path: str | Path, told: Callable[[Violation], Awaitable[None]]) -> None:
    """Call ``told`` with each violation the server logs to ``path`` from now on, for
    ever (as ``follow_lines``)."""

    async def line(text: str) -> None:
        found = parse_violation(text)
        if found is not None:
            await told(found)

    await follow_lines(path, line)


async def follow_lines(path: str | Path, told: Callable[[str], Awaitable[None]]) -> None:
    """Call ``told`` with each line the server logs to ``path`` from now on, for ever; a
    file not there yet is waited for, and one started anew (shorter) is read from its
    start."""
    file = anyio.Path(path)
    offset = (await file.stat()).st_size if await file.exists() else 0
    rest = b""
    while True:
        await anyio.sleep(_POLL_S)
        if not await file.exists():
            continue
        size = (await file.stat()).st_size
        if size < offset:
            offset, rest = 0, b""
        if size == offset:
            continue
        async with await file.open("rb") as f:
            await f.seek(offset)
            chunk = await f.read(size - offset)
        offset += len(chunk)
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            await told(line.decode(errors="replace"))
