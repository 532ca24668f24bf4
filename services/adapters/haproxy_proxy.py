"""The ``Proxy`` port on a real HAProxy (2.6, Debian's ``haproxy``), one process of ours.

HAProxy runs in master-worker mode (``-W``) on a free loopback port, its configuration,
token map, Lua and admin socket in a private directory. ``apply`` makes it serve exactly
a table: what the runtime API can set (a replica's slot address, weight and state; the
token map, replaced atomically) is set there, at once and without a reload; a change of
shape (a route added or removed or changed, more slots) writes the whole configuration and
reloads gracefully (SIGUSR2 to the master: a new worker takes the listening socket, the old
one finishes the requests it holds). The files always hold the whole current table, so a
reload, or a master found dead and started again, serves it at once.

Errors::

    ProxyUnavailable (services.ports.proxy)  retry: the admin socket did not answer, a
                                             command was refused, a reload did not take
    HaproxyError                             permanent: no haproxy binary, it cannot start
    ValueError                               a table HAProxy cannot be told (see render)
"""

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec
import structlog

from services.adapters import haproxy_admin as admin
from services.adapters.child_process import die_with_parent
from services.adapters.haproxy_config import (
    LUA_WAIT,
    Layout,
    Paths,
    Slots,
    assign_slots,
    backend_name,
    render,
    shape,
    token_map,
)
from services.adapters.loopback import accepts
from services.adapters.nats_server import free_port
from services.domain.serving.route_table import Backend, Route, RouteTable
from services.ports.proxy import BackendHealth, ProxyUnavailable, RouteStats

__all__ = ["HaproxyError", "HaproxyProxy", "find_haproxy", "haproxy_proxy"]

log = structlog.get_logger()

READY_WITHIN_S = 10.0
_HEALTHY = ("UP", "NOLB", "DRAIN")  # HAProxy's statuses of a server whose checks pass


class HaproxyError(RuntimeError):
    """HAProxy cannot be found or started (said in one line)."""


def find_haproxy() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if found is None:
        raise HaproxyError("haproxy not found: apt-get install haproxy (scripts/test-deps)")
    return found


class HaproxyProxy:
    """One HAProxy serving route tables; made by ``haproxy_proxy``."""

    def __init__(self, directory: Path, port: int, binary: str) -> None:
        self._dir = directory
        self._port = port
        self._binary = binary
        self._paths = Paths(
            admin_socket=str(directory / "admin.sock"),
            token_map=str(directory / "tokens.map"),
            lua=str(directory / "wait.lua"),
        )
        self._config = directory / "haproxy.cfg"
        self._layout = Layout(routes=(), slots={})
        self._lock = anyio.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._counted: dict[str, int] = {}  # requests counted by workers before a reload
        self.reloads = 0

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)

    @property
    def directory(self) -> Path:
        """Its private directory: configuration, token map, admin socket, log."""
        return self._dir

    @property
    def pid(self) -> int | None:
        """The master's process id, while one was started."""
        return None if self._process is None else self._process.pid

    async def apply(self, table: RouteTable) -> None:
        """Serve exactly ``table``. Raises ProxyUnavailable (retry), ValueError (a table
        HAProxy cannot be told: nothing of it is applied)."""
        async with self._lock:
            new = _layout(self._layout, await _resolved(table))
            text = render(new, self._paths, self._port)  # ValueError before any change
            if self._process is None or self._process.poll() is not None:
                log.warning("haproxy.restart", directory=str(self._dir))
                try:
                    await self._start(new, text)
                except HaproxyError as e:  # its old worker may hold the port a moment longer
                    raise ProxyUnavailable(str(e)) from e
            elif shape(new) != shape(self._layout):
                await self._reload(new, text)
            else:
                await anyio.to_thread.run_sync(self._write, new, text)
                await self._set_at_run_time(self._layout, new)
            self._layout = new

    async def health(self) -> Mapping[str, BackendHealth]:
        """Each placed replica's health by HAProxy's checks; a replica not checked yet is
        absent. Raises ProxyUnavailable."""
        layout = self._layout
        rows = admin.stat_rows(await admin.command(self._paths.admin_socket, "show stat -1 4 -1"))
        by_backend = {backend_name(r): layout.slots[r.endpoint_id] for r in layout.routes}
        out: dict[str, BackendHealth] = {}
        for row in rows:
            slots = by_backend.get(row["pxname"])
            placed = _slot(slots, row["svname"]) if slots is not None else None
            if placed is None or row["status"].startswith(("MAINT", "no check")):
                continue
            check = row["check_status"].removeprefix("* ")
            if check in ("", "INI"):
                continue
            healthy = row["status"].split()[0] in _HEALTHY
            detail = " ".join(x for x in (check, row["check_code"], row["check_desc"]) if x)
            out[placed.session_id] = BackendHealth(
                session_id=placed.session_id, healthy=healthy, detail=detail
            )
        return out

    async def stats(self) -> Mapping[str, RouteStats]:
        """Each route's traffic since this proxy started (counts carried across reloads).
        HAProxy keeps no latency distribution, so ``p95_ms`` is None. Raises
        ProxyUnavailable."""
        rows = await self._backend_rows()
        out = {}
        for r in self._layout.routes:
            row = rows.get(backend_name(r), {})
            out[r.endpoint_id] = RouteStats(
                requests_total=self._counted.get(r.endpoint_id, 0) + int(row.get("req_tot") or 0),
                in_flight=int(row.get("scur") or 0),
                queued=int(row.get("qcur") or 0),
            )
        return out

    async def _backend_rows(self) -> dict[str, dict[str, str]]:
        text = await admin.command(self._paths.admin_socket, "show stat -1 2 -1")
        return {row["pxname"]: row for row in admin.stat_rows(text)}

    async def _set_at_run_time(self, old: Layout, new: Layout) -> None:
        """Bring the running worker from ``old`` to ``new``, two layouts of one shape."""
        sock = self._paths.admin_socket
        for route in new.routes:
            name = backend_name(route)
            before, after = old.slots[route.endpoint_id], new.slots[route.endpoint_id]
            for i, (was, now) in enumerate(zip(before, after, strict=True)):
                for line in _slot_commands(f"{name}/s{i}", was, now):
                    await admin.setting(sock, line)
        if token_map(old.routes) != token_map(new.routes):
            await self._replace_tokens(new.routes)

    async def _replace_tokens(self, routes: tuple[Route, ...]) -> None:
        """Swap the whole token set at once: a revoked token is refused from the commit
        on, and no valid one is refused in between."""
        sock, path = self._paths.admin_socket, self._paths.token_map
        said = await admin.command(sock, f"prepare map {path}")
        version = said.strip().rsplit(" ", 1)[-1]
        if not version.isdigit():
            raise ProxyUnavailable(f"haproxy's prepare map said {said.strip()!r}")
        for key in token_map(routes):
            await admin.setting(sock, f"add map @{version} {path} {key} 1")
        await admin.setting(sock, f"commit map @{version} {path}")

    async def _reload(self, new: Layout, text: str) -> None:
        """Load ``text`` in a new worker; the old one finishes what it holds."""
        assert self._process is not None
        await self._validate(text)
        worker = await self._worker_pid()
        rows = await self._backend_rows()
        for r in self._layout.routes:
            row = rows.get(backend_name(r), {})
            self._counted[r.endpoint_id] = self._counted.get(r.endpoint_id, 0) + int(
                row.get("req_tot") or 0
            )
        await anyio.to_thread.run_sync(self._write, new, text)
        self._process.send_signal(signal.SIGUSR2)
        await self._answering(lambda pid: pid != worker)
        self.reloads += 1

    async def _start(self, layout: Layout, text: str) -> None:
        await anyio.to_thread.run_sync(self._prepare, layout, text)
        self._spawn()  # on this (the event loop's) thread: see _spawn
        self._counted.clear()
        await self._answering(lambda pid: True)
        await self._listening()

    async def _listening(self) -> None:
        """Wait until the public port takes connections: a started proxy is one a
        request reaches, not only one whose admin socket answers. Bounded by
        ``READY_WITHIN_S``; raises ProxyUnavailable."""
        with anyio.move_on_after(READY_WITHIN_S):
            while not await accepts(self._port):  # noqa: ASYNC110 (another process's port)
                await anyio.sleep(0.02)
            return
        raise ProxyUnavailable(f"haproxy took no connection on {self._port} in {READY_WITHIN_S} s")

    def _prepare(self, layout: Layout, text: str) -> None:
        self._write(layout, text)
        _private_write(Path(self._paths.lua), LUA_WAIT)

    def _spawn(self) -> None:
        """Start the master from the calling thread, the event loop's, to which the kernel
        ties it (``die_with_parent``): a process of ours killed outright leaves no HAProxy
        on its port, serving a table nobody updates. A pool's worker thread would not do:
        its end would stop HAProxy."""
        with open(self._dir / "haproxy.log", "ab") as out:  # the child keeps its own copy
            self._process = subprocess.Popen(
                [self._binary, "-W", "-f", str(self._config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                preexec_fn=die_with_parent(),
            )

    def _write(self, layout: Layout, text: str) -> None:
        _private_write(self._config, text)
        _private_write(
            Path(self._paths.token_map), "".join(f"{k} 1\n" for k in token_map(layout.routes))
        )

    async def _validate(self, text: str) -> None:
        candidate = self._dir / "candidate.cfg"
        await anyio.to_thread.run_sync(_private_write, candidate, text)
        checked = await anyio.run_process(
            [self._binary, "-c", "-q", "-f", str(candidate)], check=False
        )
        if checked.returncode != 0:
            said = (checked.stderr or checked.stdout).decode(errors="replace").strip()
            raise ProxyUnavailable(f"haproxy refused its configuration: {said.splitlines()[-1:]}")

    async def _worker_pid(self) -> int:
        info = await admin.command(self._paths.admin_socket, "show info")
        for line in info.splitlines():
            if line.startswith("Pid:"):
                return int(line.split(":", 1)[1])
        raise ProxyUnavailable(f"haproxy's show info has no Pid: {info[:200]!r}")

    async def _answering(self, wanted: Callable[[int], bool]) -> None:
        """Wait until a worker that ``wanted`` accepts answers on the admin socket. Polls a
        process we do not control, bounded by ``READY_WITHIN_S``. Raises HaproxyError if
        the master exits, ProxyUnavailable if no such worker answers in time."""
        assert self._process is not None
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = await anyio.Path(self._dir / "haproxy.log").read_text(errors="replace")
                last = said.strip().splitlines()[-1:] or ["no output"]
                raise HaproxyError(f"haproxy exited: {last[0]}")
            try:
                if wanted(await self._worker_pid()):
                    return
            except ProxyUnavailable:
                pass
            await anyio.sleep(0.02)
        raise ProxyUnavailable(f"haproxy did not answer within {READY_WITHIN_S} s")

    async def _stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            await anyio.to_thread.run_sync(self._process.wait)


@asynccontextmanager
async def haproxy_proxy(
    directory: str | None = None, port: int | None = None
) -> AsyncIterator[HaproxyProxy]:
    """A running HAProxy serving an empty table on 127.0.0.1 (``port``, else a free one),
    its files under ``directory`` (else a private temporary one, removed on exit);
    stopped on exit.
    Raises HaproxyError."""
    binary = find_haproxy()
    base = await anyio.to_thread.run_sync(_private_dir, directory)
    proxy = HaproxyProxy(base, port or free_port(), binary)
    empty = Layout(routes=(), slots={})
    try:
        await proxy._start(empty, render(empty, proxy._paths, proxy._port))
        yield proxy
    finally:
        with anyio.CancelScope(shield=True):
            await proxy._stop()
            if directory is None:  # ours alone: nothing in it outlives the process
                await anyio.to_thread.run_sync(shutil.rmtree, base, True)


def _layout(before: Layout, table: RouteTable) -> Layout:
    slots = {
        r.endpoint_id: assign_slots(before.slots.get(r.endpoint_id), r.backends)
        for r in table.routes
    }
    return Layout(routes=table.routes, slots=slots)


def _slot(slots: Slots, server: str) -> Backend | None:
    index = server.removeprefix("s")
    if server == index or not index.isdigit() or int(index) >= len(slots):
        return None
    return slots[int(index)]


def _slot_commands(server: str, was: Backend | None, now: Backend | None) -> list[str]:
    """The runtime commands that bring one slot from ``was`` to ``now``. A slot given to
    another replica goes through maintenance first: no request reaches the new address
    under the old replica's name. Maintenance lets the requests in flight finish. A
    replica new to a slot out of rotation (warming: how the serving actor brings every
    new replica) has its health forced down: the slot's last check was of the old
    replica, and it must pass one of its own before it reads as healthy (else a replica
    not yet listening would be told healthy, come into rotation, and refuse requests:
    one held for a cold start among them). One placed straight in rotation is the
    table's word."""
    if now is None:
        return [] if was is None else [f"set server {server} state maint"]
    if was is not None and (was.session_id, was.host, was.port) == (
        now.session_id,
        now.host,
        now.port,
    ):
        return [] if was.weight == now.weight else [f"set server {server} weight {now.weight}"]
    placed = [
        f"set server {server} state maint",
        f"set server {server} addr {now.host} port {now.port}",
        f"set server {server} weight {now.weight}",
        f"set server {server} state ready",  # up or down as the slot's last check said
    ]
    # after ready: ignored in maintenance
    return placed + ([f"set server {server} health down"] if now.weight == 0 else [])


async def _resolved(table: RouteTable) -> RouteTable:
    """``table`` with each backend's host as an IP address: the runtime API takes no
    names. Raises ProxyUnavailable for a name that does not resolve (yet)."""
    routes = []
    for r in table.routes:
        backends = []
        for b in r.backends:
            try:
                ipaddress.ip_address(b.host)
                backends.append(b)
                continue
            except ValueError:
                pass
            try:
                found = await anyio.getaddrinfo(b.host, b.port, type=socket.SOCK_STREAM)
            except OSError as e:
                raise ProxyUnavailable(f"replica {b.session_id}: {b.host}: {e}") from e
            backends.append(
                Backend(
                    session_id=b.session_id, host=str(found[0][4][0]), port=b.port, weight=b.weight
                )
            )
        routes.append(msgspec.structs.replace(r, backends=tuple(backends)))
    return RouteTable(routes=tuple(routes))


def _private_dir(directory: str | None) -> Path:
    base = Path(directory or tempfile.mkdtemp(prefix="fgpu-haproxy-"))
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


def _private_write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
