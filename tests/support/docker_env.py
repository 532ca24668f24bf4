"""Is a Docker engine here? Tests that need one skip without it, unless FGPU_REQUIRE_DOCKER=1
(CI, after scripts/docker-up), where they fail: a broken setup must not pass as "skipped"."""

import functools
import os
import socket
from urllib.parse import urlsplit

import pytest

__all__ = ["engine_problem", "require_docker", "skip_or_fail"]


@functools.cache
def engine_problem() -> str | None:
    """Why no engine answers ``GET /_ping`` at DOCKER_HOST or the default socket, or None."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    url = urlsplit(host)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = url.path
        elif url.scheme in ("tcp", "http") and url.hostname and url.port:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (url.hostname, url.port)
        else:
            return f"DOCKER_HOST={host} is not a unix:// or tcp:// address this test can ping"
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status = sock.recv(64).split(b"\r\n", 1)[0]
    except OSError as e:
        return f'no Docker engine at {host} ({e}); run: eval "$(scripts/docker-up)"'
    if not status.startswith(b"HTTP/1.") or status.split()[1:2] != [b"200"]:
        return f"the engine at {host} answered {status!r} to /_ping"
    return None


def skip_or_fail(reason: str) -> None:
    if os.environ.get("FGPU_REQUIRE_DOCKER") == "1":
        pytest.fail(f"FGPU_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_docker() -> None:
    """Skip (or fail under FGPU_REQUIRE_DOCKER=1) when no engine answers."""
    problem = engine_problem()
    if problem is not None:
        skip_or_fail(problem)
