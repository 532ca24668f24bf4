"""Where an asyncio connection left open was made: every ``asyncio.StreamWriter`` notes
the stack that made it, and one collected while its transport is still open says that
stack in its ResourceWarning.

On in every test run (``tests/conftest.py``): the suite's ``filterwarnings = error`` fails
a run that leaks one, but in whichever later test the collector happens to run, and
asyncio's own warning says neither the test nor the code (with the loop closed, not even
the connection). A note is a short stack taken when a connection is made, a few tens of
microseconds, which the tests' connections (a NATS client's, the bulk reader's) can bear.

Replaces asyncio's ``__del__`` for writers made while it is on, to the same effect (close
if the loop still runs, then warn) with the origin added; ``off()`` puts asyncio's back.
"""

from __future__ import annotations

import asyncio
import traceback
import warnings
from typing import Any

__all__ = ["FRAMES", "off", "on"]

FRAMES = 14  # enough to get from asyncio's and nats-py's frames into the project's
_ORIGINAL: dict[str, Any] = {}


def on() -> None:
    """Note each new StreamWriter's origin; idempotent."""
    if _ORIGINAL:
        return
    cls = asyncio.StreamWriter
    _ORIGINAL.update(init=cls.__init__, delete=cls.__del__)

    def init(self: asyncio.StreamWriter, *args: Any, **kwargs: Any) -> None:
        _ORIGINAL["init"](self, *args, **kwargs)
        self._fgpu_made_at = "".join(traceback.format_stack(limit=FRAMES)[:-1])  # type: ignore[attr-defined]

    def delete(self: asyncio.StreamWriter) -> None:
        if self.transport.is_closing():
            return
        loop_closed = self._loop.is_closed()  # type: ignore[attr-defined]
        if not loop_closed:
            self.close()
        made = getattr(self, "_fgpu_made_at", "(made before stream_origins.on())")
        state = "its loop closed" if loop_closed else "closed now"
        warnings.warn(f"unclosed {self!r} ({state}), made at:\n{made}", ResourceWarning, 1)

    cls.__init__ = init  # type: ignore[method-assign]
    cls.__del__ = delete  # type: ignore[attr-defined]


def off() -> None:
    """asyncio's own StreamWriter again (writers made meanwhile keep their notes)."""
    if not _ORIGINAL:
        return
    asyncio.StreamWriter.__init__ = _ORIGINAL["init"]  # type: ignore[method-assign]
    asyncio.StreamWriter.__del__ = _ORIGINAL["delete"]  # type: ignore[attr-defined]
    _ORIGINAL.clear()
