"""The container engine, as the agent uses it."""

from typing import Protocol

import msgspec

from services.domain.container_spec import ContainerSpec

__all__ = ["ContainerInfo", "ContainerRuntime"]


class ContainerInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    labels: dict[str, str]
    running: bool
    exit_code: int | None = None


class ContainerRuntime(Protocol):
    """A container engine, as the agent uses it."""

    async def images(self) -> list[str]:
        """Tags of the images present locally."""
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
