"""A ContainerRuntime with no engine: containers are records that start at once.

For benchmarks and simulations with thousands of agents, and as the fake behind actor
tests; never the default. It passes the same contract tests as DockerRuntime.

What a container does: a command that is a small shell script (``sh -c`` of ``echo``,
``sleep N``, ``exit N``, ``true``, ``false``, ``:``, ``trap``, ``wait``, joined by ``;``,
``&&``, ``&`` or newlines, ``$VAR`` from the spec's env), or one of those simple commands
run with no shell, is simulated: its echo lines appear in the logs at their time (and to
a follow of them, ``follow_logs``, as that time comes), it runs as long as its sleeps add
up to and exits with its status. Any other command (or none) runs for ``run_duration_s``
(None: until removed) and exits with ``exit_code``. ``remove`` of a running container makes
it exit 143 (SIGTERM).

With ``state_file`` the containers are kept in a JSON file, so a restarted agent finds the
containers it started, as it would on a real engine. Time is wall-clock for that reason.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shlex
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import msgspec

from events import ImageInfo
from services.domain.container_spec import ContainerSpec
from services.ports import (
    EXEC_OUTPUT_KEPT,
    ContainerError,
    ContainerInfo,
    ExecChannel,
    ExecResult,
    ImageNotFound,
    OutputFollow,
    PullProgress,
    RuntimeUnavailable,
)

__all__ = ["DEFAULT_IMAGES", "DummyRuntime"]

DEFAULT_IMAGES = ("fgpu/busybox:latest", "fgpu/python:bookworm")
_IMAGE_SIZE = 4 << 20  # bytes of every simulated image
_PULL_STEPS = 20  # progress reports of a simulated pull
_SIGTERM_EXIT = 143
_SHELLS = ("sh", "/bin/sh", "bash", "/bin/bash")
_ENV_PROGRAMS = ("env", "/usr/bin/env")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_SEPARATORS = frozenset({";", "&&", "&", "\n"})
_REDIRECT = re.compile(r">[>&]*")  # a redirection the lexer split off: not simulated


_LOOPBACK = "127.0.0.1"


class _Container(msgspec.Struct, kw_only=True):
    """One simulated container. Times are wall-clock seconds; offsets are from the start."""

    id: str
    name: str
    image: str
    labels: dict[str, str]
    lines: list[tuple[float, str]]  # (offset, text) of each output line
    env: dict[str, str] = msgspec.field(default_factory=dict)  # what an exec runs with
    duration_s: float | None  # None: runs until removed
    planned_exit: int
    started_at: float | None = None  # None: created, not started yet
    exit_code: int | None = None
    ended_at: float | None = None


class _Plan(msgspec.Struct, frozen=True):
    lines: list[tuple[float, str, bool]]  # (offset, text, written to stderr)
    duration_s: float | None
    exit_code: int


def _canonical(image: str) -> str:
    """``name`` means ``name:latest``, as on Docker."""
    last = image.rsplit("/", 1)[-1]
    return image if (":" in last or "@" in image) else f"{image}:latest"


def _statements(command: tuple[str, ...], env: dict[str, str]) -> list[list[str]] | None:
    """The simple commands of ``sh -c SCRIPT`` (``$VAR`` from ``env``), or ``command``
    itself run with no shell; None if it is more than we simulate."""
    if not command:
        return None
    if command[0] in _ENV_PROGRAMS:  # env NAME=VALUE ... PROGRAM ARGS: PROGRAM, with them
        rest = list(command[1:])
        env = dict(env)
        while rest and "=" in rest[0] and not rest[0].startswith("="):
            name, _, value = rest.pop(0).partition("=")
            env[name] = value
        return _statements(tuple(rest), env)
    if not (command[0] in _SHELLS and command[1:2] == ("-c",) and len(command) > 2):
        return [list(command)]  # no shell: nothing is split or expanded, as on Docker
    lexer = shlex.shlex(command[2], posix=True, punctuation_chars=";&|\n>")
    lexer.whitespace = " \t\r"
    lexer.wordchars += "${}"
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        return None

    def expand(word: str) -> str:
        return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)

    statements: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            statements.append([])
        else:
            statements[-1].append(expand(token))
    return [argv for argv in statements if argv]


def _plan(command: tuple[str, ...], env: dict[str, str]) -> _Plan | None:
    """What a small shell script does over time; None if it is more than we simulate."""
    statements = _statements(command, env)
    if statements is None:
        return None
    lines: list[tuple[float, str, bool]] = []
    offset, status = 0.0, 0
    for argv in statements:
        match argv:
            case ["echo", *words, ">&", "2"]:
                lines.append((offset, " ".join(words) + "\n", True))
                status = 0
            case ["echo", *words] if not any(_REDIRECT.fullmatch(w) for w in words):
                lines.append((offset, " ".join(words) + "\n", False))
                status = 0
            case ["sleep", "infinity"]:
                return _Plan(lines=lines, duration_s=None, exit_code=0)
            case ["sleep", seconds] if _is_number(seconds):
                offset += float(seconds)
                status = 0
            case ["exit"]:
                return _Plan(lines=lines, duration_s=offset, exit_code=status)
            case ["exit", code] if code.isdigit():
                return _Plan(lines=lines, duration_s=offset, exit_code=int(code) % 256)
            case ["true" | ":" | "wait"] | ["trap", *_]:
                status = 0
            case ["false"]:
                status = 1
            case _:
                return None
    return _Plan(lines=lines, duration_s=offset, exit_code=status)


def _digest(kind: str, ref: str) -> str:
    return "sha256:" + hashlib.sha256(f"{kind}:{ref}".encode()).hexdigest()


def _is_number(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


class _Following:
    """A dummy container's output followed (``DummyRuntime.follow_logs``)."""

    def __init__(self, runtime: DummyRuntime, container: _Container, tail: int) -> None:
        self._rt, self._c = runtime, container
        self._at: int | None = None  # lines given so far; None: not yet started
        self._tail = tail

    async def read(self) -> bytes | None:
        while True:
            shown, next_at = self._rt._written(self._c)
            if self._at is None and self._c.started_at is not None:
                self._at = max(0, len(shown) - self._tail)
            if self._at is not None and self._at < len(shown):
                text, self._at = "".join(shown[self._at :]), len(shown)
                return text.encode()
            gone = self._c.id not in self._rt._containers
            if gone or self._c.exit_code is not None:
                return None
            await self._rt._change(self._c, next_at)


class DummyRuntime:
    """A ContainerRuntime without an engine (see the module docstring).

    ``images``: the tags that "exist"; others raise ImageNotFound. ``registry``: the tags a
    ``pull`` finds (as a registry holds them), each told in ``_PULL_STEPS`` steps of
    progress; a pulled tag then exists. ``start_delay_s``: how long ``run`` takes;
    ``pull_delay_s``: how long a ``pull`` takes (spread over its steps).
    ``available = False`` makes every call raise RuntimeUnavailable, for testing how
    callers ride out an engine outage.
    """

    def __init__(
        self,
        *,
        images: Iterable[str] = DEFAULT_IMAGES,
        registry: Iterable[str] = (),
        start_delay_s: float = 0.0,
        pull_delay_s: float = 0.0,
        run_duration_s: float | None = None,
        exit_code: int = 0,
        state_file: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._images = {_canonical(i) for i in images}
        self._registry = frozenset(_canonical(i) for i in registry)
        self._pulled: set[str] = set()  # came from the registry: they have a digest
        self._start_delay_s = start_delay_s
        self._pull_delay_s = pull_delay_s
        self._default = _Plan(lines=[], duration_s=run_duration_s, exit_code=exit_code)
        self._state_file = Path(state_file) if state_file is not None else None
        self._clock = clock
        self._containers: dict[str, _Container] = {}  # by id
        self._by_name: dict[str, str] = {}  # name -> id
        self._exited: dict[str, anyio.Event] = {}  # by id; made by the first waiter
        self._loaded = self._state_file is None
        self._file_lock = anyio.Lock()  # one load, then one save at a time
        self.available = True

    # ---- the port ---------------------------------------------------------------------

    async def images(self) -> list[str]:
        await self._ready()
        return sorted(self._images)

    async def image_details(self) -> list[ImageInfo]:
        """Ids and digests made from the tag: two tags are two images here."""
        await self._ready()
        return [
            ImageInfo(
                ref=ref,
                id=_digest("id", ref),
                digest=_digest("manifest", ref) if ref in self._pulled else None,
                size=_IMAGE_SIZE,
            )
            for ref in sorted(self._images)
        ]

    async def pull(self, image: str, progress: PullProgress) -> None:
        await self._ready()
        ref = _canonical(image)
        if ref not in self._registry:
            raise ImageNotFound(f"pull {image}: manifest unknown")
        for step in range(_PULL_STEPS + 1):
            if step and self._pull_delay_s > 0:
                await anyio.sleep(self._pull_delay_s / _PULL_STEPS)
            await progress(_IMAGE_SIZE * step // _PULL_STEPS, _IMAGE_SIZE)
        self._images.add(ref)
        self._pulled.add(ref)

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        await self._ready()
        existing = self._by_name.get(spec.name)
        if existing is not None:
            return self._info(self._containers[existing])
        if _canonical(spec.image) not in self._images:
            raise ImageNotFound(f"image {spec.image!r} is not on this engine")
        plan = _plan(spec.command, spec.env) or self._default
        if spec.tty and not spec.command:  # the image's shell, waiting on its terminal
            plan = _Plan(lines=[], duration_s=None, exit_code=0)
        container = _Container(
            id=secrets.token_hex(32),
            name=spec.name,
            image=spec.image,
            labels=dict(spec.labels),
            lines=[(offset, text) for offset, text, _ in plan.lines],
            env=dict(spec.env),
            duration_s=plan.duration_s,
            planned_exit=plan.exit_code,
        )
        # The name is taken before the start delay, so a concurrent run() finds it.
        self._containers[container.id] = container
        self._by_name[spec.name] = container.id
        if self._start_delay_s > 0:
            await anyio.sleep(self._start_delay_s)
        if container.id in self._containers:  # not removed during the delay
            container.started_at = self._clock()
            self._wake(container.id)  # waiters now have a deadline to wait for
            await self._save()
        return self._info(container)

    async def list(self, labels: dict[str, str]) -> list[ContainerInfo]:
        await self._ready()
        items = labels.items()
        return [self._info(c) for c in self._containers.values() if items <= c.labels.items()]

    async def wait(self, container_id: str) -> int:
        await self._ready()
        container = self._get(container_id)
        while True:
            code = self._refresh(container)
            if code is not None:
                return code
            exited = self._exited.setdefault(container.id, anyio.Event())
            deadline = self._deadline(container)
            # Woken by start or remove, or at the end of the simulated run; then look again.
            with anyio.move_on_after(
                None if deadline is None else max(0.0, deadline - self._clock())
            ):
                await exited.wait()

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        await self._ready()
        container = self._find(container_id)
        if container is None:
            return
        if self._refresh(container) is None:
            container.exit_code = _SIGTERM_EXIT
            container.ended_at = self._clock()
        del self._containers[container.id]
        del self._by_name[container.name]
        self._wake(container.id)
        await self._save()

    async def cpu_ns(self, container_id: str) -> int | None:
        """A dummy container only sleeps and echoes: it uses no CPU."""
        await self._ready()
        container = self._find(container_id)
        return 0 if container is not None and container.started_at is not None else None

    async def logs(self, container_id: str, *, tail: int = 200) -> str:
        await self._ready()
        container = self._get(container_id)
        self._refresh(container)
        if container.started_at is None or tail <= 0:
            return ""
        end = container.ended_at if container.ended_at is not None else self._clock()
        shown = [text for offset, text in container.lines if container.started_at + offset <= end]
        return "".join(shown[-tail:])

    @asynccontextmanager
    async def follow_logs(
        self, container_id: str, *, tail: int = 200
    ) -> AsyncIterator[OutputFollow]:
        """The echoes of the simulated run as their times come, from the last ``tail``
        already written; its reads end once the container has exited or is removed."""
        await self._ready()
        yield _Following(self, self._get(container_id), tail)

    async def exec(
        self, container_id: str, argv: Sequence[str], *, keep: int = EXEC_OUTPUT_KEPT
    ) -> ExecResult:
        """A small shell script (as for ``run``; ``echo ... >&2`` writes to stderr) or one
        simple command, simulated with the container's environment: it takes as long as
        its sleeps (wall-clock), writes its echoes and exits with its status. Anything else
        is a command not found (127), as in a shell."""
        await self._ready()
        container = self._get(container_id)
        if container.started_at is None or self._refresh(container) is not None:
            raise ContainerError(f"container {container_id} is not running")
        plan = _plan(tuple(argv), container.env)
        if plan is None:
            missing = f"dummy runtime: {argv[0] if argv else ''}: not simulated\n".encode()
            return ExecResult(exit_code=127, stderr=missing[:keep], stderr_bytes=len(missing))
        if plan.duration_s is None:
            await anyio.sleep_forever()
        elif plan.duration_s > 0:
            await anyio.sleep(plan.duration_s)
        out = "".join(text for _, text, to_err in plan.lines if not to_err).encode()
        err = "".join(text for _, text, to_err in plan.lines if to_err).encode()
        return ExecResult(
            exit_code=plan.exit_code,
            stdout=out[:keep],
            stderr=err[:keep],
            stdout_bytes=len(out),
            stderr_bytes=len(err),
        )

    @asynccontextmanager
    async def open_exec(
        self,
        container_id: str,
        argv: Sequence[str],
        *,
        tty: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ExecChannel]:
        """None opens: a simulated container runs no program to talk to."""
        raise ContainerError("the dummy runtime opens no terminal or port")
        yield  # pragma: no cover - a generator, for the context manager

    # ---- helpers ----------------------------------------------------------------------

    def _find(self, ref: str) -> _Container | None:
        """By id or name, as Docker accepts either."""
        container = self._containers.get(ref)
        if container is None and ref in self._by_name:
            container = self._containers[self._by_name[ref]]
        return container

    def _get(self, ref: str) -> _Container:
        container = self._find(ref)
        if container is None:
            raise ContainerError(f"no such container: {ref}")
        return container

    def _written(self, container: _Container) -> tuple[Sequence[str], float | None]:
        """The lines the container has written by now, and when the next is due (None:
        none is, or it has ended)."""
        self._refresh(container)
        if container.started_at is None:
            return [], None
        end = container.ended_at if container.ended_at is not None else self._clock()
        due = [container.started_at + offset for offset, _ in container.lines]
        shown = [text for at, (_, text) in zip(due, container.lines, strict=True) if at <= end]
        later = [at for at in due if at > end] if container.ended_at is None else []
        return shown, min(later, default=None)

    async def _change(self, container: _Container, until: float | None) -> None:
        """Return once the container has started, exited or gone, or at ``until``."""
        deadline = self._deadline(container)
        times = [t for t in (until, deadline) if t is not None]
        exited = self._exited.setdefault(container.id, anyio.Event())
        with anyio.move_on_after(max(0.0, min(times) - self._clock()) if times else None):
            await exited.wait()

    def _wake(self, container_id: str) -> None:
        """Make every waiter on the container look at it again."""
        event = self._exited.pop(container_id, None)
        if event is not None:
            event.set()

    @staticmethod
    def _deadline(container: _Container) -> float | None:
        if container.started_at is None or container.duration_s is None:
            return None
        return container.started_at + container.duration_s

    def _refresh(self, container: _Container) -> int | None:
        """Settle a run whose simulated time is up; the exit code, None while running."""
        if container.exit_code is None:
            deadline = self._deadline(container)
            if deadline is not None and self._clock() >= deadline:
                container.exit_code = container.planned_exit
                container.ended_at = deadline
        return container.exit_code

    def _info(self, container: _Container) -> ContainerInfo:
        code = self._refresh(container)
        return ContainerInfo(
            id=container.id,
            name=container.name,
            labels=dict(container.labels),
            running=container.started_at is not None and code is None,
            exit_code=code,
            host=_LOOPBACK,  # nothing listens: an address of the right shape for tests
        )

    async def _ready(self) -> None:
        """Refuse when unavailable; load the state file on first use."""
        if not self.available:
            raise RuntimeUnavailable("the dummy engine is marked unavailable")
        if self._loaded or self._state_file is None:
            return
        async with self._file_lock:
            if self._loaded:  # another call loaded it while we waited for the lock
                return
            path = anyio.Path(self._state_file)
            try:
                raw = await path.read_bytes() if await path.exists() else b"[]"
                stored = msgspec.json.decode(raw, type=list[_Container])
            except (OSError, msgspec.DecodeError) as e:
                raise ContainerError(f"cannot read dummy state {self._state_file}: {e}") from e
            for container in stored:
                self._containers[container.id] = container
                self._by_name[container.name] = container.id
            self._loaded = True

    async def _save(self) -> None:
        """Write every container to the state file, atomically (write, then rename)."""
        if self._state_file is None:
            return
        async with self._file_lock:
            # Encoded under the lock, so the last writer writes the newest state.
            data = msgspec.json.encode(list(self._containers.values()))
            tmp = anyio.Path(f"{self._state_file}.tmp")
            try:
                await tmp.write_bytes(data)
                await tmp.rename(self._state_file)
            except OSError as e:
                raise ContainerError(f"cannot write dummy state {self._state_file}: {e}") from e
