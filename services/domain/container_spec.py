"""The container a session gets: limits, labels, and the fGPU shim's configuration."""

from events import GpuInfo
from services.domain.gpu_slice import slices
from services.domain.resources import format_fgpu
from services.domain.state import SessionView
from services.ports import ContainerSpec

__all__ = ["LABEL_AGENT", "LABEL_OWNER", "LABEL_SESSION", "container_name", "session_spec"]

LABEL_SESSION = "fgpu.session"
LABEL_AGENT = "fgpu.agent"
LABEL_OWNER = "fgpu.owner"


def container_name(agent_id: str, session_id: str) -> str:
    return f"fgpu-{agent_id}-{session_id}"


def session_spec(
    v: SessionView,
    agent_id: str,
    gpus: dict[int, GpuInfo],
    fgpu_per_gpu: int,
    *,
    request_devices: bool,
) -> ContainerSpec:
    """The spec for ``v``'s container on ``agent_id``.

    The environment tells the shim its slice, per visible device in order:
    FGPU_DEVICE_MEMORY_LIMITS (bytes) and FGPU_DEVICE_SM_SHARES (0-1). With
    ``request_devices`` false (mock GPUs) the engine is not asked for any device.
    """
    parts = slices(v.devices, gpus, fgpu_per_gpu)
    uuids = tuple(p.gpu.uuid for p in parts)
    env = {
        "FGPU_SESSION_ID": v.session_id,
        "FGPU_OWNER": v.owner,
        "FGPU_AMOUNT": format_fgpu(v.slots.fgpu),
        "FGPU_DEVICE_MEMORY_LIMITS": ",".join(str(p.mem_limit) for p in parts),
        "FGPU_DEVICE_SM_SHARES": ",".join(f"{p.sm_share.normalize():f}" for p in parts),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(parts))),
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
    }
    return ContainerSpec(
        name=container_name(agent_id, v.session_id),
        image=v.image,
        command=v.command,
        env=env,
        labels={LABEL_SESSION: v.session_id, LABEL_AGENT: agent_id, LABEL_OWNER: v.owner},
        cpu_millis=v.slots.cpu,
        mem_bytes=v.slots.mem,
        gpu_uuids=uuids if request_devices else (),
    )
