"""Messages between the storage service and its folder helper, over a Unix stream socket.

A message is a 4-byte big-endian length and that many bytes of JSON (an object), sent in
one ``sendmsg`` with the open descriptors that go with it (``SCM_RIGHTS``), which arrive
with its first bytes. Descriptors received are close-on-exec: a program the receiver
starts later never inherits one. Standard library only: the helper imports this before
it drops its privileges.
"""

import contextlib
import json
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_MESSAGE", "WireError", "receive", "send"]

MAX_MESSAGE = 64 << 20  # a listing of a very large directory fits; anything past it is a bug
_MAX_FDS = 4  # no message carries more
_HEAD = struct.Struct("!I")


class WireError(Exception):
    """A message that could not be read: cut short, too long, not JSON, or its
    descriptors lost (the other side is gone or broken)."""


def send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Send ``message`` with ``fds`` (the sender keeps its own). Raises OSError."""
    body = json.dumps(message).encode()
    data = _HEAD.pack(len(body)) + body
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and the descriptors that came with it (the caller owns them);
    None if the other side closed before a message began. Raises WireError, OSError."""
    fds: list[int] = []
    try:
        head = _exactly(sock, _HEAD.size, fds)
        if head is None:
            return None
        (length,) = _HEAD.unpack(head)
        if length > MAX_MESSAGE:
            raise WireError(f"a message of {length} bytes")
        body = _exactly(sock, length, fds) if length else b""
        if body is None:
            raise WireError("the other side closed within a message")
        try:
            message = json.loads(body)
        except ValueError as e:
            raise WireError(f"a message that is not JSON: {e}") from e
        if not isinstance(message, dict):
            raise WireError("a message that is not an object")
        return message, fds
    except BaseException:
        for fd in fds:
            _close(fd)
        raise


def _exactly(sock: socket.socket, n: int, fds: list[int]) -> bytes | None:
    """``n`` bytes (None: closed before the first), descriptors appended to ``fds``."""
    got = b""
    while len(got) < n:
        data, more, flags, _ = socket.recv_fds(
            sock, n - len(got), _MAX_FDS, socket.MSG_CMSG_CLOEXEC
        )
        fds.extend(more)
        if flags & socket.MSG_CTRUNC:
            raise WireError("descriptors were lost on the way")
        if not data:
            if not got:
                return None
            raise WireError("the other side closed within a message")
        got += data
    return got


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
