"""Local processes of the tiny model server (``services/model_server.py``) on free
loopback ports: the replicas of the serving tests and of bench/serve.py."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.adapters.nats_server import free_port

__all__ = ["model_servers"]

ROOT = Path(__file__).resolve().parents[2]
LISTEN_WITHIN_S = 10.0


@contextmanager
def model_servers(n: int, **env: str) -> Iterator[list[tuple[str, int]]]:
    """``n`` model servers (``env`` added to each one's environment), each listening when
    this yields their addresses; stopped on exit."""
    started: list[subprocess.Popen[bytes]] = []
    addresses = []
    try:
        for _ in range(n):
            port = free_port()
            settings = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port), **env}
            command = [sys.executable, "-m", "services.model_server"]
            started.append(subprocess.Popen(command, cwd=ROOT, env=settings))
            addresses.append(("127.0.0.1", port))
        for process, address in zip(started, addresses, strict=True):
            _listening(process, address)
        yield addresses
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(10)


def _listening(process: subprocess.Popen[bytes], address: tuple[str, int]) -> None:
    """Wait until the server accepts connections: polls a process we start, bounded."""
    deadline = time.monotonic() + LISTEN_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the model server on {address} exited ({process.returncode})")
        try:
            with socket.create_connection(address, timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"the model server on {address} did not listen in {LISTEN_WITHIN_S} s")
