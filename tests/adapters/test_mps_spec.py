"""A session on an MPS GPU: the client's limits from its slice, in NVIDIA's variables, its
GPU daemon's pipe directory and the host's IPC in its container; none elsewhere."""

from datetime import UTC, datetime

from events import DevicePlacement, GpuInfo, Slots
from services.adapters.docker_runtime import container_config
from services.domain.container_spec import session_spec
from services.domain.gpu_slice import SHARE_FULL_PPM, slices
from services.domain.mps import MPS_PIPE_IN_CONTAINER, mps_client, shim_slice
from services.domain.records import SessionView

GIB = 1 << 30
GPUS = {
    i: GpuInfo(index=i, uuid=f"GPU-{i}", model="H100", mem=80 * GIB, sm_count=132) for i in range(3)
}
PIPES = {0: "/state/mps/a/0/pipe", 2: "/state/mps/a/2/pipe"}  # MPS on GPUs 0 and 2


def _session(*devices: DevicePlacement) -> SessionView:
    return SessionView(
        session_id="s1",
        owner="alice",
        image="cuda",
        command=(),
        slots=Slots(cpu=1000, mem=GIB, fgpu=sum(d.fgpu for d in devices)),
        priority=0,
        name=None,
        request_id="r",
        correlation_id="c",
        arrival_seq=1,
        requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        devices=devices,
    )


def test_a_quarter_of_an_mps_gpu_is_a_25_percent_client_with_its_memory_pinned() -> None:
    v = _session(DevicePlacement(gpu_index=2, fgpu=25))  # 1 GPU = 1 fGPU: 0.25 fGPU
    parts = slices(v.devices, GPUS, 100)
    client = mps_client(parts, PIPES)
    assert client is not None
    spec = session_spec(v, "a", shim_slice(parts, client), request_devices=True, mps=client)
    assert spec.env["CUDA_MPS_PIPE_DIRECTORY"] == MPS_PIPE_IN_CONTAINER
    assert spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert spec.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={20 * 1024}M"  # 20 GiB
    # The shim keeps the memory limit, and leaves the SMs to MPS.
    assert spec.env["FGPU_MEM_LIMIT"] == str(20 * GIB)
    assert spec.env["FGPU_SM_SHARE_PPM"] == str(SHARE_FULL_PPM)
    host = container_config(spec)["HostConfig"]
    assert host["IpcMode"] == "host"
    mounts = {m["Target"]: m for m in host["Mounts"]}
    assert mounts[MPS_PIPE_IN_CONTAINER] == {
        "Type": "bind",
        "Source": "/state/mps/a/2/pipe",  # GPU 2's daemon, not GPU 0's
        "Target": MPS_PIPE_IN_CONTAINER,
        "ReadOnly": False,
    }


def test_limits_round_down_and_a_tiny_share_still_gets_one_percent() -> None:
    third = slices((DevicePlacement(gpu_index=0, fgpu=100),), GPUS, 300)  # 1 GPU = 3 fGPU
    client = mps_client(third, PIPES)
    assert client is not None
    assert client.thread_percentage == 33
    assert client.pinned_mem_mib == 80 * 1024 // 3  # 27306 MiB, not 27307
    tiny = slices((DevicePlacement(gpu_index=0, fgpu=1),), GPUS, 1000)  # 0.1 %
    client = mps_client(tiny, PIPES)
    assert client is not None and client.thread_percentage == 1
    whole = mps_client(slices((DevicePlacement(gpu_index=0, fgpu=100),), GPUS, 100), PIPES)
    assert whole is not None and whole.thread_percentage == 100


def test_a_session_on_a_gpu_without_mps_is_no_client() -> None:
    v = _session(DevicePlacement(gpu_index=1, fgpu=50))
    parts = slices(v.devices, GPUS, 100)
    assert mps_client(parts, PIPES) is None
    spec = session_spec(v, "a", shim_slice(parts, None), request_devices=True, mps=None)
    assert not any(k.startswith("CUDA_MPS_") for k in spec.env)
    assert spec.env["FGPU_SM_SHARE_PPM"] == "500000"  # the shim paces it, as without MPS
    host = container_config(spec)["HostConfig"]
    assert "IpcMode" not in host and "Mounts" not in host


def test_a_session_on_two_gpus_is_no_client_even_if_both_have_mps() -> None:
    # One process reaches one daemon; one daemon has one GPU.
    v = _session(DevicePlacement(gpu_index=0, fgpu=50), DevicePlacement(gpu_index=2, fgpu=50))
    assert mps_client(slices(v.devices, GPUS, 100), PIPES) is None
