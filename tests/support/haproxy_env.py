"""Is HAProxy here? Its tests skip without it, unless FGPU_REQUIRE_HAPROXY=1 (CI, after
scripts/test-deps installs it), where a missing HAProxy is a failure, not a skip. And
which HAProxy processes run (``haproxy_pids``), to tell one left behind."""

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["haproxy_pids", "require_haproxy"]


def require_haproxy() -> None:
    if shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin"):
        return
    why = "no haproxy: scripts/test-deps installs it (Debian's haproxy)"
    if os.environ.get("FGPU_REQUIRE_HAPROXY") == "1":
        pytest.fail(why + " (FGPU_REQUIRE_HAPROXY=1)", pytrace=False)
    pytest.skip(why + " (set FGPU_REQUIRE_HAPROXY=1 to make this a failure)")


def haproxy_pids(under: int | None = None) -> set[int]:
    """The running haproxy processes; with ``under``, only that process's descendants
    (other tests, on another worker or another stack, run haproxies of their own)."""
    parents = {}
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit():
                stat = (d / "stat").read_text()
                # comm may hold spaces: the fields after its closing parenthesis are fixed
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                parents[int(d.name)] = (comm, int(stat[stat.rindex(")") + 2 :].split()[1]))
        except (OSError, ValueError):
            continue
    pids = {pid for pid, (comm, _) in parents.items() if comm == "haproxy"}
    if under is None:
        return pids
    return {pid for pid in pids if _descends(pid, under, parents)}


def _descends(pid: int, ancestor: int, parents: dict[int, tuple[str, int]]) -> bool:
    while pid in parents and pid > 1:
        pid = parents[pid][1]
        if pid == ancestor:
            return True
    return False
