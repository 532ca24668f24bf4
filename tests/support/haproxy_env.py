"""Is HAProxy here? Its tests skip without it, unless FGPU_REQUIRE_HAPROXY=1 (CI, after
scripts/test-deps installs it), where a missing HAProxy is a failure, not a skip."""

import os
import shutil

import pytest

__all__ = ["require_haproxy"]


def require_haproxy() -> None:
    if shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin"):
        return
    why = "no haproxy: scripts/test-deps installs it (Debian's haproxy)"
    if os.environ.get("FGPU_REQUIRE_HAPROXY") == "1":
        pytest.fail(why + " (FGPU_REQUIRE_HAPROXY=1)", pytrace=False)
    pytest.skip(why + " (set FGPU_REQUIRE_HAPROXY=1 to make this a failure)")
