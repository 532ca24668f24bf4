"""Events of the agent aggregate (subject ``fgpu.agent.<agent_id>``)."""

import msgspec

from events.base import Event
from events.slots import Slots

__all__ = [
    "AgentFenced",
    "AgentHeard",
    "AgentImagesReported",
    "AgentLost",
    "AgentRegistered",
    "GpuInfo",
    "ImageInfo",
]


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One physical GPU as the agent sees it (from NVML or declared as a mock)."""

    index: int
    uuid: str
    model: str
    mem: int
    sm_count: int


class ImageInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One tag of an image an agent holds.

    ``ref`` is ``name:tag`` as the engine lists it; ``id`` the engine's image id (the
    digest of its configuration, ``sha256:...``), the same for two tags of one image;
    ``digest`` the registry's manifest digest (``sha256:...``) when the image came from a
    registry or went to one, else None; ``size`` its bytes on disk.
    """

    ref: str
    id: str
    digest: str | None = None
    size: int = 0


class AgentRegistered(Event, frozen=True, kw_only=True, tag="agent.registered.v1"):
    """An agent announces itself and its whole capacity; a later one replaces the earlier.

    ``fgpu_per_gpu`` is the administrator's ratio in quanta: 200 means one physical GPU is
    2 fGPU, so one fGPU is half of its memory and half of its SMs' time. ``images`` are the
    images the agent can start without a download; ``image_details`` the same with their
    ids, digests and sizes (empty in registrations from before it). ``registry``: the
    registry (``host:port``) the agent pulls missing images from, None if it pulls nothing
    (docs/images.md). ``group``: the resource group it serves (``default`` for agents from
    before groups); only that group's sessions go there. ``storage_hosts``: the storage
    hosts whose virtual folders it mounts; None: every one (and an agent from before this
    said nothing); empty: none, so no session that mounts a folder goes there.
    """

    agent_id: str
    capacity: Slots
    gpus: tuple[GpuInfo, ...]
    fgpu_per_gpu: int
    images: tuple[str, ...] = ()
    runtime: str = "docker"
    group: str = "default"
    image_details: tuple[ImageInfo, ...] = ()
    registry: str | None = None
    storage_hosts: tuple[str, ...] | None = None


class AgentImagesReported(Event, frozen=True, kw_only=True, tag="agent.images-reported.v1"):
    """The images an agent holds changed since it registered (it pulled one): ``images``
    is the whole set now, replacing what its registration said."""

    agent_id: str
    images: tuple[ImageInfo, ...]


class AgentLost(Event, frozen=True, kw_only=True, tag="agent.lost.v1"):
    """The scheduler stopped hearing an agent's heartbeats; nothing new is placed there.

    Sessions on it keep their allocation for a grace: their containers may well still run,
    and the agent re-adopts and reports them when it comes back. Those it never started
    are placed again at once (``session.unplaced``), those it had started end after the
    grace (``session.lost``).
    """

    agent_id: str
    reason: str


class AgentHeard(Event, frozen=True, kw_only=True, tag="agent.heard.v1"):
    """A scheduler that started after this agent registered has heard from it (a
    heartbeat): it counts as alive again, and sessions may be placed on it. Until then an
    agent known only from before the scheduler's start gets nothing."""

    agent_id: str


class AgentFenced(Event, frozen=True, kw_only=True, tag="agent.fenced.v1"):
    """An agent back from the dead stopped and removed the containers of sessions that
    ended while it was away (``session_ids``): nothing of theirs runs on any more."""

    agent_id: str
    session_ids: tuple[str, ...]
