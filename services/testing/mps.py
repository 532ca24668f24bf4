"""MpsControl's fake: daemons that are only said to run."""

from collections.abc import Mapping

from services.ports.mps import MpsUnavailable

__all__ = ["FakeMps"]


class FakeMps:
    """The daemons of ``gpus`` (UUID -> pipe directory); ``refuse``: why a start fails."""

    def __init__(self, gpus: Mapping[str, str], refuse: str | None = None) -> None:
        self._gpus = dict(gpus)
        self.refuse = refuse
        self.running: set[str] = set()

    @property
    def pipe_dirs(self) -> dict[str, str]:
        return dict(self._gpus)

    def start(self) -> None:
        if self.refuse is not None:
            raise MpsUnavailable(self.refuse)
        self.running = set(self._gpus)

    def stop(self) -> None:
        self.running = set()
