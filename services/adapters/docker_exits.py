"""Container exits from one stream of the engine's events, for every wait at once.

The engine's own wait (``POST /containers/{id}/wait``) holds an HTTP connection for the
container's whole life: an agent with as many containers as its client has connections
(aiohttp's default pool: 100) had none left to create, start or stop another. Here one
``GET /events`` stream, filtered to the containers' ``die`` and ``destroy``, tells every
waiter; a look at the container (its inspect) tells what happened before.

No exit is missed, whatever the stream does:

- A waiter is registered before it looks at its container: an exit before the look, the
  look sees; one after it, the stream tells (or the next sweep). A ``die`` heard while the
  look is under way is kept until the look answers: the stream replays the last second's
  events, so it may be the die of a container since removed, which the look then says is
  gone (the engine's wait of a removed container fails; so does this one).
- The engine answers an events request before it subscribes it. The stream asks for the
  events ``since`` a second before the engine's clock read just before (``ExitEngine.clock``),
  which the engine replays from the buffer of its last 256 events: none falls between.
- After every (re)connection, and every ``sweep_s`` while connected, a sweep looks at every
  container waited on (one listing, an inspect of each not running): exits while the stream
  was down (the engine restarted) and any the engine dropped (it drops an event that a
  subscriber 1,024 events behind has not taken within 100 ms) are found there.
- A container gone (removed, or lost by the engine) fails its waiters with ContainerError,
  as the engine's wait of an unknown container does.

The engine's side (``ExitEngine``) is the runtime's; a fake stands in for it in tests.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, NamedTuple, Protocol

import anyio
import structlog

from services.ports import ContainerError, RuntimeUnavailable

__all__ = ["EventStream", "ExitEngine", "ExitWatch", "Look"]

log = structlog.get_logger()

_FULL_ID = re.compile(r"[0-9a-f]{64}")
_REPLAY_S = 1  # how far before the engine's clock the stream asks its events from
_RETRY_FIRST_S, _RETRY_MAX_S = 0.2, 5.0  # reconnection backoff, doubled each failure


class Look(NamedTuple):
    """A container as its inspect shows it. ``exit_code`` means something only when it does
    not run (0 for one created and never started, as the engine's wait answers)."""

    id: str
    running: bool
    exit_code: int


class EventStream(Protocol):
    async def next(self) -> Mapping[str, Any] | None:
        """The next event; None once the engine has ended the stream."""
        ...


class ExitEngine(Protocol):
    """What an ExitWatch asks of the engine. Each call raises RuntimeUnavailable when the
    engine does not answer, ContainerError when it refuses."""

    async def clock(self) -> int | None:
        """The engine's own time, in whole seconds since the epoch; None if it does not
        say (the stream then replays nothing and the sweeps alone cover the gap)."""
        ...

    def events(self, since: int | None) -> AbstractAsyncContextManager[EventStream]:
        """Its containers' ``die`` and ``destroy`` events from ``since`` (those it still
        holds), then as they happen, for the block."""
        ...

    async def look(self, ref: str) -> Look | None:
        """The container ``ref`` (an id or a name) names; None if there is none."""
        ...

    async def running(self) -> dict[str, bool]:
        """Every container the engine has, by full id: whether it runs."""
        ...


class _Waiter:
    """One call's wait for one container: settled once, with an exit code or an error."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.code: int | None = None
        self.error: ContainerError | None = None
        self.looked = False  # its look at the container has answered (or could not)
        self.heard: int | None = None  # a die's code heard before that

    def settle(self, code: int | None = None, error: ContainerError | None = None) -> None:
        if self.done.is_set():
            return
        self.code, self.error = code, error
        self.done.set()

    def outcome(self) -> int:
        if self.error is not None:
            raise self.error
        assert self.code is not None
        return self.code


class ExitWatch:
    """Every wait of one runtime, answered from one stream of the engine's events.

    ``run`` follows the stream (one task for the runtime's life); ``wait`` may be called
    from any task meanwhile.
    """

    def __init__(self, engine: ExitEngine, *, sweep_s: float = 60.0) -> None:
        self._engine = engine
        self._sweep_s = sweep_s
        self._waiters: dict[str, list[_Waiter]] = {}  # by the container's full id
        self._stream_scope: anyio.CancelScope | None = None  # the stream followed now

    async def wait(self, ref: str) -> int:
        """The exit code of the container ``ref`` names, at once if it does not run.

        Raises ContainerError if there is no such container or it goes before its exit is
        seen; RuntimeUnavailable if the engine does not answer when ``ref`` is a name (a
        full id is waited on through the engine's absence), or if the watch stops.
        """
        full = ref
        if not _FULL_ID.fullmatch(ref):
            found = await self._engine.look(ref)
            if found is None:
                raise ContainerError(f"wait {ref}: no such container")
            full = found.id
        waiter = _Waiter()
        self._waiters.setdefault(full, []).append(waiter)
        try:
            with contextlib.suppress(RuntimeUnavailable):  # the sweep once it is back tells
                self._settle(waiter, ref, await self._engine.look(full))
            waiter.looked = True
            if waiter.heard is not None:
                waiter.settle(code=waiter.heard)
            await waiter.done.wait()
            return waiter.outcome()
        finally:
            waiters = self._waiters[full]
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[full]

    async def run(self) -> None:
        """Follow the engine's events until cancelled, connecting again (after a capped
        backoff) whenever the stream ends or fails. Never raises but cancellation; the
        waiters left when it stops fail with RuntimeUnavailable."""
        failures = 0
        try:
            while True:
                opened = False
                try:
                    with anyio.CancelScope() as self._stream_scope:
                        async with self._engine.events(await self._since()) as stream:
                            opened = True
                            await self._follow(stream)
                except Exception as e:  # whatever broke the stream, the next one starts over
                    if failures == 0:
                        log.warning("docker.events_interrupted", error=f"{type(e).__name__}: {e}")
                failures = 0 if opened else failures + 1
                await anyio.sleep(min(_RETRY_FIRST_S * 2**failures, _RETRY_MAX_S))
        finally:
            gone = RuntimeUnavailable("the runtime's watch of exits has stopped")
            for waiters in self._waiters.values():
                for w in waiters:
                    w.settle(error=gone)

    def reconnect(self) -> None:
        """End the stream followed now; the next one opens after the usual pause. For a
        client that closes its connections under the stream: aiohttp then tells its reader
        nothing, not even an end."""
        if self._stream_scope is not None:
            self._stream_scope.cancel()

    async def _since(self) -> int | None:
        now = await self._engine.clock()
        return None if now is None else now - _REPLAY_S

    async def _follow(self, stream: EventStream) -> None:
        """Tell the stream's events to the waiters until it ends, sweeping meanwhile."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sweeps)
            while (event := await stream.next()) is not None:
                self._tell(event)
            tg.cancel_scope.cancel()

    async def _sweeps(self) -> None:
        while True:
            await self.sweep()
            await anyio.sleep(self._sweep_s)

    async def sweep(self) -> None:
        """Look at every container waited on that does not run, and settle its waiters."""
        if not self._waiters:
            return
        running = await self._engine.running()
        for full in list(self._waiters):
            if running.get(full) or full not in self._waiters:
                continue
            look = await self._engine.look(full)
            for w in self._waiters.get(full, ()):
                self._settle(w, full, look)

    def _tell(self, event: Mapping[str, Any]) -> None:
        if event.get("Type") != "container":
            return
        actor = event.get("Actor") or {}
        waiters = self._waiters.get(str(actor.get("ID", "")), ())
        action = event.get("Action")
        if action == "die":
            code = (actor.get("Attributes") or {}).get("exitCode")
            if isinstance(code, str) and code.lstrip("-").isdigit():
                for w in waiters:
                    if w.looked:
                        w.settle(code=int(code))
                    else:
                        w.heard = int(code)
            # else: no code said; the next sweep reads it from the container
        elif action == "destroy":
            for w in waiters:
                w.settle(error=ContainerError(f"wait {actor.get('ID')}: removed"))

    @staticmethod
    def _settle(waiter: _Waiter, ref: str, look: Look | None) -> None:
        if look is None:
            waiter.settle(error=ContainerError(f"wait {ref}: no such container"))
        elif not look.running:
            waiter.settle(code=look.exit_code)
