"""container_config: the create body DockerRuntime sends, checked without an engine.

The GPU path matters most here, since no test host has an NVIDIA runtime.
"""

from __future__ import annotations

import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from services.adapters.docker_runtime import container_config
from services.domain.container_spec import ContainerSpec, Mount

GPU_A = "GPU-6f1e7f2a-1111-2222-3333-444455556666"
GPU_B = "GPU-0a9b8c7d-aaaa-bbbb-cccc-ddddeeeeffff"


_BASE = ContainerSpec(name="fgpu-s1-a1", image="fgpu/python:bookworm")


def _spec(**fields: object) -> ContainerSpec:
    return msgspec.structs.replace(_BASE, **fields)


def test_a_bare_spec_gets_no_network_no_limits_and_an_init() -> None:
    config = container_config(_spec())
    assert config["Image"] == "fgpu/python:bookworm"
    assert "Cmd" not in config  # the image's CMD
    assert config["Labels"] == {}
    assert config["Env"] == []
    host = config["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["Init"] is True
    for key in ("NanoCpus", "Memory", "MemorySwap", "Mounts", "Binds", "DeviceRequests"):
        assert key not in host


def test_command_env_and_labels() -> None:
    config = container_config(
        _spec(
            command=("python3", "-c", "print(1)"),
            env={"B": "2", "A": "x=y"},
            labels={"fgpu.session": "s1", "fgpu.agent": "a1"},
        )
    )
    assert config["Cmd"] == ["python3", "-c", "print(1)"]
    assert config["Env"] == ["A=x=y", "B=2"]
    assert config["Labels"] == {"fgpu.session": "s1", "fgpu.agent": "a1"}


def test_cpu_and_memory_limits() -> None:
    host = container_config(_spec(cpu_millis=1500, mem_bytes=8 * 2**30))["HostConfig"]
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == 8 * 2**30
    assert host["MemorySwap"] == 8 * 2**30  # no swap beyond the limit


def test_mounts_are_bind_mounts_read_only_unless_asked() -> None:
    mounts = (
        Mount(source="/srv/models", target="/models"),
        Mount(source="/srv/out/s1", target="/out", read_only=False),
    )
    assert container_config(_spec(mounts=mounts))["HostConfig"]["Mounts"] == [
        {"Type": "bind", "Source": "/srv/models", "Target": "/models", "ReadOnly": True},
        {"Type": "bind", "Source": "/srv/out/s1", "Target": "/out", "ReadOnly": False},
    ]


def test_gpus_are_nvidia_device_requests_by_uuid() -> None:
    host = container_config(_spec(gpu_uuids=(GPU_B, GPU_A)))["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": [GPU_B, GPU_A], "Capabilities": [["gpu"]]}
    ]
    # DeviceIDs and Count exclude each other in the Engine API.
    assert "Count" not in host["DeviceRequests"][0]


def test_network_mode_and_init_can_be_chosen() -> None:
    host = container_config(_spec(), network_mode="host", init=False)["HostConfig"]
    assert (host["NetworkMode"], host["Init"]) == ("host", False)


def test_the_config_does_not_share_the_spec_dicts() -> None:
    spec = _spec(labels={"a": "1"})
    container_config(spec)["Labels"]["b"] = "2"
    assert spec.labels == {"a": "1"}


@given(
    cpu_millis=st.integers(min_value=0, max_value=512_000),
    mem_bytes=st.integers(min_value=0, max_value=2**44),
    gpus=st.lists(st.uuids().map(lambda u: f"GPU-{u}"), max_size=8, unique=True),
    env=st.dictionaries(st.text("ABCXYZ_", min_size=1), st.text(max_size=20), max_size=5),
)
def test_any_spec_gives_exact_json_ready_amounts(
    cpu_millis: int, mem_bytes: int, gpus: list[str], env: dict[str, str]
) -> None:
    spec = _spec(cpu_millis=cpu_millis, mem_bytes=mem_bytes, gpu_uuids=tuple(gpus), env=env)
    config = json.loads(json.dumps(container_config(spec)))
    host = config["HostConfig"]
    assert host.get("NanoCpus", 0) == cpu_millis * 1_000_000
    assert isinstance(host.get("NanoCpus", 0), int)
    assert host.get("Memory", 0) == mem_bytes
    assert [r["DeviceIDs"] for r in host.get("DeviceRequests", [])] == ([gpus] if gpus else [])
    assert sorted(config["Env"]) == sorted(f"{k}={v}" for k, v in env.items())
