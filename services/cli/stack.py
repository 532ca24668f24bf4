"""What ``up.json`` says of the running ``fgpu up``, for the other commands to find it."""

import json
from dataclasses import dataclass

from services.cli.home import write_private
from services.cli.options import state_file

__all__ = ["StackInfo"]


@dataclass
class StackInfo:
    """What ``up.json`` says of the running ``fgpu up``: where it serves, and which
    process it is (its pid and, so that a pid reused by another process is not taken
    for it, when that started: ``store_lock.Process``)."""

    nats_url: str
    store_dir: str
    agent_id: str | None
    pid: int
    api_url: str | None = None
    started: int | None = None
    serve_url: str | None = None  # the endpoints' proxy (None: none runs)

    def save(self) -> None:
        write_private(state_file(), json.dumps(self.__dict__))
