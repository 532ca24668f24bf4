"""Channels into a session (a terminal, an app port): what travels on them, what an image
declares, and what runs in the container. Pure.

A channel is two core NATS subjects (``events.subjects.channel``): the requester sends
on ``up``, the agent on ``down``. Each message is one frame (below, msgpack). Bytes go in
``Data`` frames of at most ``CHUNK_BYTES``; the receiver acknowledges each once it has
handed it on (``Ack``), and a sender stops while ``WINDOW_BYTES`` are unacknowledged, so
a slow reader slows the writer instead of filling the server's buffers. Either side
sends ``Ping`` every ``PING_S`` when it has nothing else to say, and gives up on a
channel it has heard nothing on for ``IDLE_S``. ``End`` closes it (with the program's
exit code, from the agent).

An image declares its services with labels ``fgpu.service.<name>=<protocol>:<port>``
(``fgpu.service.jupyter=http:8888``); ``fgpu session app ID jupyter`` resolves the name
through them, ``fgpu session app ID 8888`` names the port itself.
"""

import msgspec

from events import subjects as subj

__all__ = [
    "CHUNK_BYTES",
    "IDLE_S",
    "MAX_TAIL",
    "OUTPUT_ENDED",
    "PING_S",
    "SERVICE_LABEL",
    "WINDOW_BYTES",
    "Ack",
    "Data",
    "End",
    "Eof",
    "Frame",
    "Ping",
    "Program",
    "Resize",
    "Service",
    "app_program",
    "app_target",
    "channel_problem",
    "decode_frame",
    "encode_frame",
    "logs_program",
    "relay_argv",
    "services_of",
    "shell_program",
]

CHUNK_BYTES = 32 << 10  # one Data frame: well under the server's 1 MiB message limit
WINDOW_BYTES = 1 << 20  # sent and not yet acknowledged, at most
PING_S = 10.0
IDLE_S = 60.0  # six pings missed: the other side is gone
SERVICE_LABEL = "fgpu.service."


class Data(msgspec.Struct, frozen=True, tag="data"):
    data: bytes


class Ack(msgspec.Struct, frozen=True, tag="ack"):
    """``n`` more bytes of Data were handed on: the sender may send that many more."""

    n: int


class Resize(msgspec.Struct, frozen=True, tag="resize"):
    rows: int
    cols: int


class Ping(msgspec.Struct, frozen=True, tag="ping"):
    pass


class Eof(msgspec.Struct, frozen=True, tag="eof"):
    """The sender has no more bytes to send; it still reads."""


class End(msgspec.Struct, frozen=True, tag="end"):
    """The channel is closed: the program exited (``exit_code``), or ``reason``."""

    exit_code: int | None = None
    reason: str = ""


Frame = Data | Ack | Resize | Ping | Eof | End
_frames = msgspec.msgpack.Decoder(Frame)
_encode = msgspec.msgpack.Encoder().encode


def encode_frame(frame: Frame) -> bytes:
    return _encode(frame)


def decode_frame(data: bytes) -> Frame | None:
    """The frame ``data`` holds; None if it holds none this side knows."""
    try:
        frame: Frame = _frames.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return frame


class Service(msgspec.Struct, frozen=True):
    name: str
    protocol: str
    port: int


def services_of(labels: dict[str, str]) -> dict[str, Service]:
    """The services an image declares in its labels, by name; a label that does not read
    ``<protocol>:<port>`` with a port of 1-65535 declares none."""
    found = {}
    for key, value in labels.items():
        if not key.startswith(SERVICE_LABEL):
            continue
        name = key.removeprefix(SERVICE_LABEL)
        protocol, _, port = value.partition(":")
        if name and port.isdigit() and 0 < int(port) < 1 << 16:
            found[name] = Service(name, protocol, int(port))
    return found


def app_target(labels: dict[str, str], target: str) -> Service | str:
    """The port ``target`` names in a container with ``labels``: a declared service's, or
    a port number's own; or why it names none."""
    services = services_of(labels)
    if target in services:
        return services[target]
    if target.isdigit() and 0 < int(target) < 1 << 16:
        by_port = {s.port: s for s in services.values()}
        return by_port.get(int(target), Service("", "tcp", int(target)))
    known = ", ".join(sorted(services)) or "none"
    return f"no service {target!r} in the session's image (it declares: {known})"


def channel_problem(channel: str) -> str | None:
    """Why ``channel`` cannot name a channel, or None."""
    if not subj.is_token(channel):
        return f"channel {channel!r} must be 1-64 letters, digits, - or _"
    return None


class Program(msgspec.Struct, frozen=True, kw_only=True):
    """What a channel runs in the container, and what its opening event says of it."""

    kind: str  # "shell", "app" or "logs" (the container's output followed: no program)
    argv: tuple[str, ...]
    target: str  # the shell's command, the port, or the lines of output before following
    service: str | None = None  # the image's name for the port
    tty: tuple[int, int] | None = None  # rows, cols: a terminal of that size
    env: dict[str, str] = msgspec.field(default_factory=dict)


def shell_program(rows: int, cols: int, term: str) -> Program:
    """A login shell in a terminal of ``rows`` x ``cols``: bash where the image has it,
    else sh."""
    script = "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l"
    return Program(
        kind="shell",
        argv=("sh", "-c", script),
        target=script,
        tty=(rows, cols),
        env={"TERM": term},
    )


OUTPUT_ENDED = "the session's output ended"  # why a follow closed: its container ended
MAX_TAIL = 10_000  # lines of output a follow starts from, at most (as many as are kept)


def logs_program(tail: int) -> Program:
    """The container's output followed, from its last ``tail`` lines: nothing runs in the
    container (the engine's log is read), and nothing the asker sends reaches it."""
    return Program(kind="logs", argv=(), target=str(tail))


def app_program(service: Service) -> Program:
    """One TCP connection to ``service``'s port (see ``relay_argv``)."""
    return Program(
        kind="app",
        argv=relay_argv(service.port),
        target=str(service.port),
        service=service.name or None,
    )


# A stand-in for nc in images with Python and without nc: stdin to the port and back.
_PY_RELAY = """import socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while b := sys.stdin.buffer.read1(65536):
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while b := s.recv(65536):
    sys.stdout.buffer.write(b)
    sys.stdout.buffer.flush()
"""


def relay_argv(port: int) -> tuple[str, ...]:
    """What carries one TCP connection to ``port`` inside the container, from its stdin
    and back to its stdout.

    Run in the container (an exec), because sessions have no network (``NetworkMode:
    none``): their ports are on the container's own loopback, which nothing outside its
    network namespace reaches. An exec enters that namespace through the engine's API
    the agent already uses, needs no privilege on the host (entering the namespace
    ourselves would need root and the container's pid, and only on the engine's host),
    and works the same with another runtime. What it needs of the image: ``nc`` (busybox
    and most images), or Python.
    """
    script = 'command -v nc >/dev/null 2>&1 && exec nc 127.0.0.1 "$0"; exec python3 -c "$1" "$0"'
    return ("sh", "-c", script, str(port), _PY_RELAY)
