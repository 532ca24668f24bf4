"""Session fixtures: the shim (built with its Makefile), the fake libraries and their drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.shim_kit import (
    Kit,
    NvmlKit,
    build_fake,
    build_fake_nvml,
    build_harness,
    build_nvml_client,
    build_shim,
)


@pytest.fixture(scope="session")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    """Everything built once per session in a private directory."""
    base = tmp_path_factory.mktemp("shim")
    return Kit(
        shim_lib=build_shim(base / "shim"),
        fake=build_fake(base / "fake"),
        harness=build_harness(base / "harness"),
    )


@pytest.fixture(scope="session")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> NvmlKit:
    """The fake NVML and the nvidia-smi-like client, built once per session."""
    base = tmp_path_factory.mktemp("nvml")
    return NvmlKit(fake=build_fake_nvml(base / "fake"), client=build_nvml_client(base / "client"))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A fresh fake GPU (shared state file) for one test."""
    return tmp_path / "fake-gpu"
