"""ProcessContainers over ``/proc/<pid>/cgroup``: a container's processes are in its cgroup,
whose path names the container's id (64 hex digits), whichever the engine and its cgroup
driver: ``/docker/<id>`` (cgroupfs), ``/system.slice/docker-<id>.scope`` (systemd),
``cri-containerd-<id>.scope``, ``libpod-<id>.scope``.

NVML gives host pids: the agent must see the host's processes (its own pid namespace the
host's, or ``/proc`` of the host at ``proc``) for the pids to mean anything here.
"""

import re
from pathlib import Path

__all__ = ["CgroupContainers"]

_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


class CgroupContainers:
    """The containers of host processes, by their cgroups under ``proc``."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = Path(proc)

    def containers_of(self, pid: int) -> tuple[str, ...]:
        try:
            text = (self.proc / str(pid) / "cgroup").read_text()
        except OSError:  # gone, or never was
            return ()
        ids: list[str] = []
        for line in text.splitlines():
            # hierarchy-id:controllers:path; every hierarchy names the same containers
            for found in _ID.findall(line.split(":", 2)[-1]):
                if found not in ids:
                    ids.append(found)
        return tuple(ids)
