"""The container a session gets: limits, labels, and the fGPU shim's configuration."""

import re
from collections.abc import Mapping, Sequence

import msgspec

from events import SessionType
from services.domain.gpu_slice import DeviceSlice
from services.domain.mps import MPS_PIPE_IN_CONTAINER, MpsClient
from services.domain.records import SessionView

__all__ = [
    "LABEL_AGENT",
    "LABEL_LOG",
    "LABEL_OWNER",
    "LABEL_SESSION",
    "MAX_ENV",
    "PACE_IN_CONTAINER",
    "PACE_SUFFIX",
    "REGION_IN_CONTAINER",
    "SHIM_IN_CONTAINER",
    "SLICE_IN_CONTAINER",
    "SLICE_SUFFIX",
    "ContainerSpec",
    "Mount",
    "container_env",
    "container_name",
    "env_from_list",
    "env_problem",
    "serving_network",
    "session_spec",
    "with_secrets",
]

LABEL_SESSION = "fgpu.session"
LABEL_AGENT = "fgpu.agent"
LABEL_OWNER = "fgpu.owner"
LABEL_LOG = "fgpu.log"  # the identity of the log the session is on
SHIM_IN_CONTAINER = "/opt/fgpu/lib"  # the shim as libcuda.so.1 and libnvidia-ml.so.1
REGION_IN_CONTAINER = "/run/fgpu/region"
# The shim finds a region's slice (limits, shares) beside it, at the region's path and this
# suffix (gpu_shim/src/fgpu_region.h, FGPU_SLICE_SUFFIX): in the container as on the host.
SLICE_SUFFIX = ".slice"
SLICE_IN_CONTAINER = REGION_IN_CONTAINER + SLICE_SUFFIX
# And its pace file (FGPU_PACE_SUFFIX): the agent's scale of the shares, read only inside.
PACE_SUFFIX = ".pace"
PACE_IN_CONTAINER = REGION_IN_CONTAINER + PACE_SUFFIX


class Mount(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    target: str
    read_only: bool = True


class ContainerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent asks the engine for. ``name`` is unique per session and agent."""

    name: str
    image: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    cpu_millis: int = 0
    mem_bytes: int = 0
    gpu_uuids: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    # Search paths put in front of the image's own value of the variable (CUDA images set
    # LD_LIBRARY_PATH): the runtime reads the image's environment to join them.
    env_prepend: dict[str, str] = msgspec.field(default_factory=dict)
    # A terminal and an open input, as ``docker run -it``: the image's shell then waits
    # on it, so an interactive session with no command stays alive.
    tty: bool = False
    # Supplementary groups (numeric gids) of every process of the container, whatever
    # user the image runs as: the group that may write the shim region's counters.
    groups: tuple[int, ...] = ()
    # The host's IPC namespace (its shared memory): an MPS client's channel to the MPS
    # server, which runs on the host, goes through it besides the pipe directory.
    ipc_host: bool = False
    # The serving network the container joins (an inference replica's: an internal bridge
    # of its owner's, made by the runtime if missing, which proxies on the host reach by
    # the container's address); None: the runtime's own mode (no network).
    network: str | None = None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_ENV = 64  # variables a session may set


def with_secrets(spec: ContainerSpec, values: Mapping[str, str]) -> ContainerSpec:
    """``spec`` with a session's opened secrets in its environment, under its own clear
    variables (none shares a name with them: validation refuses it) and fgpu's."""
    if not values:
        return spec
    return msgspec.structs.replace(spec, env={**values, **spec.env})


def env_problem(env: Sequence[tuple[str, str]]) -> str | None:
    """Why ``env`` may not be a session's own environment, or None: at most ``MAX_ENV``
    variables, each named once with letters, digits and '_' (not first a digit), each
    value at most 4 KiB."""
    names = [k for k, _ in env]
    if len(env) > MAX_ENV or any(len(v) > 4096 for _, v in env):
        return f"at most {MAX_ENV} environment variables, each value at most 4096 characters"
    if any(_ENV_NAME.fullmatch(k) is None for k in names) or len(set(names)) != len(names):
        return "environment names: letters, digits and '_' (not first a digit), each once"
    return None


def serving_network(owner: str) -> str:
    """The serving network of ``owner``'s replicas: one per access key, so a replica
    shares a bridge only with replicas of its own owner (``docs/serving.md``)."""
    return f"fgpu-serve-{owner}"


def container_env(spec: ContainerSpec, image_env: dict[str, str]) -> dict[str, str]:
    """The environment ``spec`` asks for, its ``env_prepend`` paths joined in front of the
    value the image sets (``image_env``, the image's own environment), else standing alone.
    """
    env = dict(spec.env)
    for name, first in spec.env_prepend.items():
        rest = env.get(name) or image_env.get(name)
        env[name] = f"{first}:{rest}" if rest else first
    return env


def env_from_list(entries: list[str] | None) -> dict[str, str]:
    """An engine's ``NAME=value`` list (an image's ``Config.Env``) as a dict."""
    return dict(e.split("=", 1) for e in entries or () if "=" in e)


def container_name(agent_id: str, session_id: str) -> str:
    return f"fgpu-{agent_id}-{session_id}"


def region_mounts(region_path: str) -> list[Mount]:
    """A session's region in its container: the counters read-write (its processes keep
    one budget there), the slice and the agent's pace file beside them read-only."""
    return [
        Mount(source=region_path, target=REGION_IN_CONTAINER, read_only=False),
        Mount(source=region_path + SLICE_SUFFIX, target=SLICE_IN_CONTAINER, read_only=True),
        Mount(source=region_path + PACE_SUFFIX, target=PACE_IN_CONTAINER, read_only=True),
    ]


def session_spec(
    v: SessionView,
    agent_id: str,
    parts: Sequence[DeviceSlice],
    *,
    request_devices: bool,
    shim_lib_dir: str | None = None,
    region_path: str | None = None,
    region_group: int | None = None,
    log_identity: str | None = None,
    vfolders: tuple[Mount, ...] = (),
    mps: MpsClient | None = None,
) -> ContainerSpec:
    """The spec for ``v``'s container on ``agent_id``, holding the slice ``parts``
    (``gpu_slice.slices`` of ``v``'s devices: the agent computes it once, for this spec
    and for the session's region alike).

    The environment tells the shim its slice, per visible device in order (the shim's own
    variables, see gpu_shim/README.md): FGPU_MEM_LIMIT (bytes) and FGPU_SM_SHARE_PPM
    (parts per million of the SMs' time, as ``DeviceSlice.sm_share_ppm``).
    With ``shim_lib_dir`` the shim is mounted first on the library path (in front of the
    image's own ``LD_LIBRARY_PATH``, see ``ContainerSpec.env_prepend``); with
    ``region_path`` the session's shared region (``region_mounts``: no process inside can
    raise its limits or shares); ``region_group`` is the group that may write the
    counters, given to the container's processes. With ``request_devices`` false (mock
    GPUs) the engine is asked for no device.
    ``log_identity`` (``EventLog.identity``) labels the container with the log whose
    session it is: an agent never removes a container of another log.
    With ``mps`` (``mps.mps_client`` of ``parts``) the processes are clients of their
    GPU's MPS daemon: its pipe directory mounted at ``MPS_PIPE_IN_CONTAINER``, the host's
    IPC namespace, and the client's limits in NVIDIA's variables (``MpsClient.env``); the
    caller gives ``parts`` as the shim enforces them (``mps.shim_slice``).
    """
    uuids = tuple(p.gpu.uuid for p in parts)
    # The session's own environment first: fgpu's variables below are never overridden.
    env = {
        **dict(v.env),
        "FGPU_SESSION_ID": v.session_id,
        "FGPU_OWNER": v.owner,
        "FGPU_MEM_LIMIT": ",".join(str(p.mem_limit) for p in parts),
        "FGPU_SM_SHARE_PPM": ",".join(str(p.sm_share_ppm) for p in parts),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(parts))),
        # The shim's per-device limits are in PCI order (NVML's, and ``container_order``):
        # CUDA's default puts the fastest device first instead.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
    }
    mounts = []
    prepend = {}
    if shim_lib_dir is not None:
        mounts.append(Mount(source=shim_lib_dir, target=SHIM_IN_CONTAINER, read_only=True))
        prepend["LD_LIBRARY_PATH"] = SHIM_IN_CONTAINER
    if region_path is not None:
        mounts += region_mounts(region_path)
        env["FGPU_REGION"] = REGION_IN_CONTAINER
    if mps is not None:
        mounts.append(Mount(source=mps.pipe_dir, target=MPS_PIPE_IN_CONTAINER, read_only=False))
        env.update(mps.env())
    mounts += vfolders
    return ContainerSpec(
        name=container_name(agent_id, v.session_id),
        image=v.image,
        command=v.command,
        env=env,
        labels={
            LABEL_SESSION: v.session_id,
            LABEL_AGENT: agent_id,
            LABEL_OWNER: v.owner,
            **({LABEL_LOG: log_identity} if log_identity is not None else {}),
        },
        cpu_millis=v.slots.cpu,
        mem_bytes=v.slots.mem,
        gpu_uuids=uuids if request_devices else (),
        mounts=tuple(mounts),
        env_prepend=prepend,
        tty=v.session_type is SessionType.INTERACTIVE,
        groups=(region_group,) if region_path is not None and region_group is not None else (),
        ipc_host=mps is not None,
        network=serving_network(v.owner) if v.session_type is SessionType.INFERENCE else None,
    )
