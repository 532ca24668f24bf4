"""The nats-server this process started (``fgpu up``'s), watched and started again: the
``LogServer`` and ``StoreDisk`` of the watcher beside it (``services.actors.store_watch``).

``SupervisedServer`` follows the server's log for the writes it failed for want of room
(``nats_server_log.parse_write_failure``; a line of the process that runs now, each line
naming its pid) and starts it again as it was started (``NatsServer.respawn``): the same
store, the same port, the same configuration file (its auth part with it), from this
thread, so that it still dies with this process. The store's lock is this process's,
held on an open descriptor for its life (``store_lock``): a server started again takes
nothing from anyone. Errors::

    ServerUnavailable   the server could not be started again (its port taken, it
                        exited at once, it did not listen in time)
"""

import os
import subprocess

import anyio
from anyio.abc import TaskStatus

from services.adapters.loopback import accepts
from services.adapters.nats_server import LISTEN_WITHIN_S, NatsServer, NatsServerError
from services.adapters.nats_server_log import follow_lines, parse_write_failure
from services.ports import DiskUsage, ServerUnavailable

__all__ = ["StoreDirDisk", "SupervisedServer"]

_STOP_WITHIN_S = 10  # then it is killed
_POLL_S = 0.05


class StoreDirDisk:
    """StoreDisk: the filesystem holding ``path``, as an unprivileged writer sees it (the
    blocks a filesystem keeps for root are no room for the log)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def usage(self) -> DiskUsage:
        st = os.statvfs(self.path)
        return DiskUsage(free=st.f_bavail * st.f_frsize, total=st.f_blocks * st.f_frsize)


class SupervisedServer:
    """LogServer over ``server``; ``follow`` (a task) reads its log."""

    def __init__(self, server: NatsServer) -> None:
        self.server = server
        self._error: str | None = None
        self._failed = anyio.Event()

    async def follow(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read the server's log for write failures, for ever."""
        task_status.started()
        await follow_lines(self.server.log_path, self._line)

    async def _line(self, text: str) -> None:
        said = parse_write_failure(text)
        # A line of a process stopped since says nothing of the one that runs.
        if said is not None and text.startswith(f"[{self.server.process.pid}]"):
            self._error = self._error or said
            self._failed.set()

    def write_error(self) -> str | None:
        return self._error

    async def write_failed(self) -> str:
        """What the server said, once it has failed to write for want of room (now, or
        since it last started)."""
        await self._failed.wait()
        return self._error or ""

    def running(self) -> bool:
        return self.server.process.poll() is None

    async def restart(self) -> None:
        await self._stopped()
        try:
            self.server.respawn()
        except NatsServerError as e:
            raise ServerUnavailable(str(e)) from e
        self._error, self._failed = None, anyio.Event()
        await self._listening()

    async def _stopped(self) -> None:
        process = self.server.process
        if process.poll() is None:
            process.terminate()
            try:
                await anyio.to_thread.run_sync(process.wait, _STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                process.kill()
                await anyio.to_thread.run_sync(process.wait)

    async def _listening(self) -> None:
        with anyio.move_on_after(LISTEN_WITHIN_S):
            while True:
                exited = self.server.exited()
                if exited is not None:
                    raise ServerUnavailable(str(exited))
                if await accepts(self.server.port):
                    return
                await anyio.sleep(_POLL_S)
        raise ServerUnavailable(
            f"nats-server did not listen on port {self.server.port} within {LISTEN_WITHIN_S} s"
        )
