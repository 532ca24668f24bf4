"""A GPU session's container spec, as a host with real GPUs would send it to Docker.

No GPU here: the spec and the Engine API body are built and checked all the same.
"""

from datetime import UTC, datetime

from events import DevicePlacement, GpuInfo, Slots
from services.adapters.docker_runtime import container_config
from services.domain.container_spec import env_from_list, session_spec
from services.domain.gpu_slice import SHARE_FULL_PPM, DeviceSlice, container_order, slices
from services.domain.mps import MPS_PIPE_IN_CONTAINER, mps_client, shim_slice
from services.domain.records import SessionView

GIB = 1 << 30
GPUS = {
    i: GpuInfo(index=i, uuid=f"GPU-{i}", model="H100", mem=80 * GIB, sm_count=132) for i in range(4)
}


def _session(devices: tuple[DevicePlacement, ...], fgpu: int) -> SessionView:
    return SessionView(
        session_id="s1",
        owner="alice",
        image="pytorch/pytorch:2.3",
        command=("python", "train.py"),
        slots=Slots(cpu=4000, mem=32 * GIB, fgpu=fgpu),
        priority=0,
        name=None,
        request_id="r",
        correlation_id="c",
        arrival_seq=1,
        requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        devices=devices,
    )


def _half(v: SessionView) -> list[DeviceSlice]:
    """``v``'s slice where 1 GPU = 2 fGPU."""
    return slices(v.devices, GPUS, 200)


def test_two_and_a_half_gpus_become_device_requests_limits_and_the_shim() -> None:
    # 1 GPU = 2 fGPU (200 quanta); 5 fGPU = 2.5 GPUs: devices 2 and 0 whole, half of 3.
    v = _session(
        (
            DevicePlacement(gpu_index=2, fgpu=200),
            DevicePlacement(gpu_index=0, fgpu=200),
            DevicePlacement(gpu_index=3, fgpu=100),
        ),
        fgpu=500,
    )
    spec = session_spec(
        v, "node1", slices(v.devices, GPUS, 200), request_devices=True,
        shim_lib_dir="/opt/fgpu-shim", region_path="/run/fgpu/regions/s1.region",
        region_group=4242,
    )  # fmt: skip
    # In PCI order (the host's), whatever the placement's: the shim's limits are by
    # the container's device index, which NVML and CUDA (PCI_BUS_ID) number that way.
    assert spec.gpu_uuids == ("GPU-0", "GPU-2", "GPU-3")
    assert spec.env["FGPU_MEM_LIMIT"] == f"{80 * GIB},{80 * GIB},{40 * GIB}"
    assert spec.env["FGPU_SM_SHARE_PPM"] == "1000000,1000000,500000"
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    assert spec.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-0,GPU-2,GPU-3"
    assert spec.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    body = container_config(spec)
    host = body["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-0", "GPU-2", "GPU-3"], "Capabilities": [["gpu"]]}
    ]
    assert host["NanoCpus"] == 4_000_000_000 and host["Memory"] == 32 * GIB
    mounts = {m["Target"]: m for m in host["Mounts"]}
    assert mounts["/opt/fgpu/lib"]["Source"] == "/opt/fgpu-shim"
    assert mounts["/opt/fgpu/lib"]["ReadOnly"] is True
    assert mounts["/run/fgpu/region"]["ReadOnly"] is False
    # The slice (limits, shares) beside it, read-only: no process inside can raise it.
    assert mounts["/run/fgpu/region.slice"]["Source"] == "/run/fgpu/regions/s1.region.slice"
    assert mounts["/run/fgpu/region.slice"]["ReadOnly"] is True
    # So is the agent's scale of its shares.
    assert mounts["/run/fgpu/region.pace"]["Source"] == "/run/fgpu/regions/s1.region.pace"
    assert mounts["/run/fgpu/region.pace"]["ReadOnly"] is True
    assert host["GroupAdd"] == ["4242"]  # the group that may write the counters
    assert body["Labels"] == {"fgpu.session": "s1", "fgpu.agent": "node1", "fgpu.owner": "alice"}


def test_a_third_of_a_gpu_rounds_the_slice_down_never_up() -> None:
    v = _session((DevicePlacement(gpu_index=1, fgpu=100),), fgpu=100)  # 1 GPU = 3 fGPU
    spec = session_spec(v, "node1", slices(v.devices, GPUS, 300), request_devices=False)
    assert spec.env["FGPU_MEM_LIMIT"] == str(80 * GIB // 3)
    assert spec.env["FGPU_SM_SHARE_PPM"] == "333333"
    assert spec.gpu_uuids == () and spec.mounts == ()  # mock GPUs, no shim: nothing asked


CUDA_IMAGE_ENV = {
    "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
}


def _env(body: dict[str, object]) -> dict[str, str]:
    entries = body["Env"]
    assert isinstance(entries, list)
    return env_from_list(entries)


def test_the_shim_goes_in_front_of_the_images_library_path() -> None:
    # CUDA images set LD_LIBRARY_PATH; a container's Env replaces the image's value.
    v = _session((DevicePlacement(gpu_index=0, fgpu=100),), fgpu=100)
    spec = session_spec(v, "node1", _half(v), request_devices=True, shim_lib_dir="/opt/s")
    assert "LD_LIBRARY_PATH" not in spec.env
    env = _env(container_config(spec, image_env=CUDA_IMAGE_ENV))
    assert env["LD_LIBRARY_PATH"] == "/opt/fgpu/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
    assert "PATH" not in env  # the image keeps what the spec does not name
    alone = _env(container_config(spec, image_env={"PATH": "/bin"}))
    assert alone["LD_LIBRARY_PATH"] == "/opt/fgpu/lib"
    assert _env(container_config(spec))["LD_LIBRARY_PATH"] == "/opt/fgpu/lib"


def test_without_the_shim_the_images_library_path_is_left_alone() -> None:
    v = _session((DevicePlacement(gpu_index=0, fgpu=100),), fgpu=100)
    spec = session_spec(v, "node1", _half(v), request_devices=False)
    assert spec.env_prepend == {}
    assert "LD_LIBRARY_PATH" not in _env(container_config(spec, image_env=CUDA_IMAGE_ENV))


def test_env_from_list_splits_at_the_first_equals_sign() -> None:
    assert env_from_list(["A=1", "B=x=y", "C=", "junk"]) == {"A": "1", "B": "x=y", "C": ""}
    assert env_from_list(None) == {}


def test_each_device_gets_its_own_limit_in_the_containers_order() -> None:
    """A session placed whole on device 2 and half on device 1 sees device 1 first (PCI
    order, as NVML and CUDA number them in the container): its limits follow that order,
    not the placement's, so no device enforces another's."""
    v = _session(
        (DevicePlacement(gpu_index=2, fgpu=200), DevicePlacement(gpu_index=1, fgpu=100)),
        fgpu=300,
    )
    spec = session_spec(v, "node1", _half(v), request_devices=True)
    assert spec.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-1,GPU-2"
    assert spec.env["FGPU_MEM_LIMIT"] == f"{40 * GIB},{80 * GIB}"
    assert spec.env["FGPU_SM_SHARE_PPM"] == "500000,1000000"
    assert [d.gpu_index for d in container_order(v.devices)] == [1, 2]


# ---- a session on an MPS GPU: the client's limits from its slice; none elsewhere -------

PIPES = {0: "/state/mps/a/0/pipe", 2: "/state/mps/a/2/pipe"}  # MPS on GPUs 0 and 2


def test_a_quarter_of_an_mps_gpu_is_a_25_percent_client_with_its_memory_pinned() -> None:
    v = _session((DevicePlacement(gpu_index=2, fgpu=25),), 25)  # 1 GPU = 1 fGPU: 0.25 fGPU
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
    v = _session((DevicePlacement(gpu_index=1, fgpu=50),), 50)
    parts = slices(v.devices, GPUS, 100)
    assert mps_client(parts, PIPES) is None
    spec = session_spec(v, "a", shim_slice(parts, None), request_devices=True, mps=None)
    assert not any(k.startswith("CUDA_MPS_") for k in spec.env)
    assert spec.env["FGPU_SM_SHARE_PPM"] == "500000"  # the shim paces it, as without MPS
    host = container_config(spec)["HostConfig"]
    assert "IpcMode" not in host and "Mounts" not in host


def test_a_session_on_two_gpus_is_no_client_even_if_both_have_mps() -> None:
    # One process reaches one daemon; one daemon has one GPU.
    v = _session(
        (DevicePlacement(gpu_index=0, fgpu=50), DevicePlacement(gpu_index=2, fgpu=50)), 100
    )
    assert mps_client(slices(v.devices, GPUS, 100), PIPES) is None
