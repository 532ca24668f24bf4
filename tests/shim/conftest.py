"""Session fixture: the shim (built with its Makefile), the fake driver and the harness."""

from __future__ import annotations

from pathlib import Path

import pytest
from shim_kit import Kit, build_fake, build_harness, build_shim


@pytest.fixture(scope="session")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    """Everything built once per session in a private directory."""
    base = tmp_path_factory.mktemp("shim")
    return Kit(
        shim_lib=build_shim(base / "shim"),
        fake=build_fake(base / "fake"),
        harness=build_harness(base / "harness"),
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A fresh fake GPU (shared state file) for one test."""
    return tmp_path / "fake-gpu"
