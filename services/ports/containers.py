"""The container engine, as the agent uses it."""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import msgspec

from events import ImageInfo
from services.domain.container_spec import ContainerSpec

__all__ = [
    "EXEC_OUTPUT_KEPT",
    "ContainerInfo",
    "ContainerRuntime",
    "ExecChannel",
    "ExecResult",
    "OutputFollow",
    "PullProgress",
]

# Told, while an image is pulled, the bytes come so far and of how many (0: not known yet).
PullProgress = Callable[[int, int], Awaitable[None]]

EXEC_OUTPUT_KEPT = 256 << 10  # bytes of each stream an exec keeps, unless told otherwise


class ContainerInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    labels: dict[str, str]
    running: bool
    exit_code: int | None = None
    # Where a proxy on the engine's host reaches the container's ports (its address on
    # the serving network); None: nowhere (no network, as every session but inference).
    host: str | None = None


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a command run in a container did: its exit code, and the first bytes of what
    it wrote to each stream. ``*_bytes`` count all it wrote, so a count above the length
    kept says the output was cut."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def truncated(self) -> bool:
        return self.stdout_bytes > len(self.stdout) or self.stderr_bytes > len(self.stderr)


class ExecChannel(Protocol):
    """A program running in a container with its input open: what it writes (its
    terminal's output; without a terminal, its stdout alone), what it reads."""

    async def read(self) -> bytes | None:
        """The next bytes it wrote; None once its output has ended."""
        ...

    async def write(self, data: bytes) -> None:
        """Give it ``data`` to read."""
        ...

    async def resize(self, rows: int, cols: int) -> None:
        """Its terminal's new size (nothing without a terminal)."""
        ...

    async def exit_code(self) -> int | None:
        """Once its output has ended: its exit code; None if the engine records none."""
        ...


class OutputFollow(Protocol):
    """A container's output as it is written (its streams together, as ``logs`` gives it).
    Nothing is read ahead of the reader: what is not read yet waits in the engine, so a
    follow that nobody reads holds no more than one read's worth here."""

    async def read(self) -> bytes | None:
        """The next bytes written; None once the output has ended (the container has
        exited or is gone)."""
        ...


class ContainerRuntime(Protocol):
    """A container engine, as the agent uses it."""

    async def images(self) -> list[str]:
        """Tags of the images present locally."""
        ...

    async def image_details(self) -> list[ImageInfo]:
        """Each tag of the images present locally, with the image's id, the registry's
        digest for it (None if it never came from or went to a registry) and its size."""
        ...

    async def pull(self, image: str, progress: PullProgress) -> None:
        """Pull ``image`` from the registry its reference names, telling ``progress`` how
        far it got as it goes (not after every byte: as the engine reports).

        Raises ImageNotFound if the registry has no such image, ContainerError if the
        pull failed otherwise (no such registry, refused), RuntimeUnavailable if the
        engine does not answer.
        """
        ...

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        """Create and start the container; if one named ``spec.name`` exists, return it.

        Raises ImageNotFound or RuntimeUnavailable.
        """
        ...

    async def list(self, labels: dict[str, str]) -> list[ContainerInfo]:
        """Containers (running or not) carrying all of ``labels``."""
        ...

    async def wait(self, container_id: str) -> int:
        """Block until the container exits; its exit code."""
        ...

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        """Stop (SIGTERM, then SIGKILL after the timeout) and remove; no error if gone."""
        ...

    async def logs(self, container_id: str, *, tail: int = 200) -> str:
        """The last ``tail`` lines of the container's output."""
        ...

    def follow_logs(
        self, container_id: str, *, tail: int = 200
    ) -> AbstractAsyncContextManager[OutputFollow]:
        """The last ``tail`` lines of the container's output, then what it writes as it
        writes it, for the block; its reads end once the container has exited. A follow
        lasts as long as the container decides: it takes no connection that the engine's
        other calls wait for.

        Raises ContainerError if the container is unknown, or RuntimeUnavailable.
        """
        ...

    async def cpu_ns(self, container_id: str) -> int | None:
        """The CPU time the container has used since it started, in nanoseconds; None if
        the engine cannot say (not running). Raises RuntimeUnavailable."""
        ...

    async def exec(
        self, container_id: str, argv: Sequence[str], *, keep: int = EXEC_OUTPUT_KEPT
    ) -> ExecResult:
        """Run ``argv`` in the running container (no shell, no terminal, no input; the
        container's environment) until it exits, keeping the first ``keep`` bytes of each
        of its streams. A command that cannot be found is an exit code (126, 127), as in a
        shell. Cancelled, it stops waiting; the command may go on in the container.

        Raises ContainerError if the container is unknown or not running, or
        RuntimeUnavailable.
        """
        ...

    def open_exec(
        self,
        container_id: str,
        argv: Sequence[str],
        *,
        tty: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[ExecChannel]:
        """Start ``argv`` in the running container (with a terminal if ``tty``; ``env`` on
        top of the container's) with its input open, for the block. Leaving the block
        closes its input and output; the program may run on until it notices.

        Raises ContainerError if the container is unknown or not running, or
        RuntimeUnavailable; ContainerError too from a runtime that opens none.
        """
        ...
