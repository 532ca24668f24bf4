"""The records the fold keeps of the cluster: sessions, agents and their devices, quota held.

Plain mutable records, owned by the fold (``services.domain.fold.state``); everyone else
reads. A leaf: the indexes the fold keeps of them (``services.domain.fold``) and the
aggregate that holds records and indexes together (``services.domain.fold.cluster``)
import these, never the other way.
"""

from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from events import (
    DevicePlacement,
    GpuInfo,
    ImageInfo,
    SessionType,
    Slots,
    VfolderMount,
)
from services.domain.resources import sub
from services.domain.status import SessionStatus

__all__ = ["AgentView", "GpuView", "OwnerUsage", "SessionView", "Transition"]


class Transition(msgspec.Struct, frozen=True, gc=False):
    """A session reached ``status`` through event ``event_id`` at sequence ``seq``.

    Immutable values only, so the garbage collector need not track it (gc=False); a
    session keeps one per status it went through. Encoded like the dataclass it was.
    """

    status: SessionStatus
    at: datetime
    seq: int
    event_id: str


@dataclass(slots=True)
class SessionView:
    session_id: str
    owner: str
    image: str
    command: tuple[str, ...]
    slots: Slots
    priority: int
    name: str | None
    request_id: str
    correlation_id: str
    arrival_seq: int
    requested_at: datetime
    status: SessionStatus = SessionStatus.REQUESTED
    agent_id: str | None = None
    devices: tuple[DevicePlacement, ...] = ()
    container_id: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    quota_held: bool = False
    invalid: str | None = None  # why the request can never be accepted as written
    waiting: str | None = None  # why the scheduler could not place it yet
    history: list[Transition] = field(default_factory=list)
    # Whose it is, as the tenancy stood when it was asked for: the user of its access key
    # (None: a service, an unknown key, or no tenancy), its project (``domain/project``)
    # and domain. Quota held at each level is counted against these, so it is given back
    # to the same ones whatever changes later.
    user: str | None = None
    project: str = "default/default"
    domain: str = "default"
    gpu_models: tuple[str, ...] = ()  # the models it may run on, any of them; empty: any
    cpu_only: bool = False  # it asks for no GPU (its slots hold no fGPU)
    group: str = "default"  # the resource group it runs in
    lifetime_s: int | None = None  # as asked; None: the group's default
    session_type: SessionType = SessionType.BATCH
    # When it last showed activity (running, a kernel launched, GPU memory in use, CPU
    # used): for idle timeouts. Not shown by the projections, so changing it marks nothing.
    active_at: datetime | None = None
    launches: dict[int, int] = field(default_factory=dict)  # per device, the latest total
    cpu_ns: int = 0  # the latest total reported
    # While PULLING: bytes of its image pulled so far, of how many (0: not known yet).
    pulled: int = 0
    pull_total: int = 0
    mounts: tuple[VfolderMount, ...] = ()  # the virtual folders it asked to mount
    storage_hosts: tuple[str, ...] = ()  # of those folders, as admitted: agents must mount them
    host: str | None = None  # an inference session's address on the serving network
    env: tuple[tuple[str, str], ...] = ()  # its own environment variables, as asked
    # Variables whose values are the owner's secrets: (variable, secret name), never a value.
    secret_env: tuple[tuple[str, str], ...] = ()


class _Shares:
    """A device's shares and what they leave free, kept out of GpuView's fields.

    A slot of a base class is not a dataclass field, so encoding a GpuView (the
    projections' snapshots) stays as it was; ``__post_init__`` sets ``free`` on every path
    that builds one, decoding included (msgspec calls it). A plain attribute rather than
    a property because the fit index and the allocator read it for every device they
    consider.
    """

    __slots__ = ("free",)
    free: int  # capacity minus the sum of shares
    capacity: int  # GpuView's fields
    shares: dict[str, int]

    def __post_init__(self) -> None:
        self.free = self.capacity - sum(self.shares.values())

    def give(self, session_id: str, quanta: int) -> None:
        self.shares[session_id] = self.shares.get(session_id, 0) + quanta
        self.free -= quanta

    def take_back(self, session_id: str) -> None:
        self.free += self.shares.pop(session_id, 0)


@dataclass(slots=True)
class GpuView(_Shares):
    """One device of an agent.

    Change ``shares`` only through ``give`` and ``take_back``, and never ``capacity``:
    ``free`` follows from both.
    """

    info: GpuInfo
    capacity: int  # fGPU quanta this device is worth
    shares: dict[str, int] = field(default_factory=dict)  # session id -> quanta

    @property
    def allocated(self) -> int:
        """The sum of ``shares``."""
        return self.capacity - self.free


@dataclass(slots=True)
class AgentView:
    agent_id: str
    capacity: Slots
    fgpu_per_gpu: int
    gpus: dict[int, GpuView]
    images: frozenset[str]
    runtime: str
    allocated: Slots = Slots()
    sessions: dict[str, None] = field(default_factory=dict)  # sessions holding an allocation
    lost: bool = False
    lost_at: datetime | None = None  # when it was declared lost (the event's time)
    registered_seq: int = 0  # the log sequence of its latest registration
    heard_seq: int = 0  # of the latest agent.heard a scheduler wrote of it
    group: str = "default"  # the resource group it serves
    image_details: tuple[ImageInfo, ...] = ()  # ``images`` with ids, digests, sizes
    registry: str | None = None  # where it pulls the images it lacks (None: nowhere)
    storage_hosts: tuple[str, ...] | None = None  # whose folders it mounts (None: every)

    @property
    def free(self) -> Slots:
        return sub(self.capacity, self.allocated)


@dataclass(slots=True)
class OwnerUsage:
    sessions: int = 0
    slots: Slots = Slots()
