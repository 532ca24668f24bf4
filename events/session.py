"""Events of a session's life, of quota policy and of refused input.

Who writes what, and on which subject, is in ``events.subjects`` and ``docs/events.md``.
"""

from enum import StrEnum

import msgspec

from events.base import Event
from events.slots import Slots
from events.vfolder import VfolderMount

__all__ = [
    "DestroyRejected",
    "DevicePlacement",
    "PayloadRejected",
    "PolicySet",
    "SessionAdmitted",
    "SessionCancelled",
    "SessionDestroyRequested",
    "SessionErrored",
    "SessionLost",
    "SessionPreparing",
    "SessionPulling",
    "SessionQueued",
    "SessionRejected",
    "SessionRequested",
    "SessionRunning",
    "SessionScheduled",
    "SessionTerminated",
    "SessionTerminating",
    "SessionType",
    "SessionUnplaced",
]


class SessionType(StrEnum):
    """What a session is for: a batch session runs its command and ends with it; an
    interactive one is kept alive (a terminal, services) until stopped, its lifetime
    ends, or it is idle for its group's idle timeout."""

    BATCH = "batch"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"  # a replica of a serving endpoint, asked for by the serving actor


class SessionRequested(Event, frozen=True, kw_only=True, tag="session.requested.v1"):
    """A user asks for a session. ``owner`` is the access key; ``priority`` 0-100 (higher
    first); ``project`` one of its user's projects (None: the user's default project; on
    a cluster without tenancy, and for requests from before it, the ``default`` one).

    ``gpu_models``: the GPU models the session may run on, any of them (a device's
    ``GpuInfo.model``); empty, as in every request from before the field, means any.
    ``cpu_only``: the session asks for no GPU at all and ``slots.fgpu`` must be 0; without
    it fGPU must be more than zero, so a forgotten amount is never taken for a CPU session.

    ``group``: the resource group to run in (None, as in every request from before groups:
    the ``default`` group). ``lifetime_s``: how long it may run, in whole seconds (None:
    the group's default lifetime); more than the group's maximum is refused at admission.
    ``session_type``: None (as in every request from before it) means batch when it has a
    command, interactive when it has none.
    ``mounts``: virtual folders mounted at ``/home/work/<name>``, checked at admission
    (none in every request from before the field).
    ``env``: environment variables of its container, by name (none in older requests);
    fgpu's own (``FGPU_*``, CUDA's) are set over them.
    ``secret_env``: environment variables whose values are the owner's secrets, as
    (variable, secret name): the name travels, never the value; admission refuses a
    secret the owner does not have, and the agent opens the latest at the start.
    """

    session_id: str
    owner: str
    image: str
    command: tuple[str, ...] = ()
    slots: Slots
    priority: int = 0
    name: str | None = None
    project: str | None = None
    gpu_models: tuple[str, ...] = ()
    cpu_only: bool = False
    group: str | None = None
    lifetime_s: int | None = None
    session_type: SessionType | None = None
    mounts: tuple[VfolderMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()


class SessionDestroyRequested(Event, frozen=True, kw_only=True, tag="session.destroy-requested.v1"):
    """A user asks to end a session. ``requester`` need not own it: the scheduler checks."""

    session_id: str
    requester: str


class SessionAdmitted(Event, frozen=True, kw_only=True, tag="session.admitted.v1"):
    """The quota actor found the request within its owner's policy; it now waits to be placed.

    ``image``: the image the session runs, when it is not the one asked for (the request
    named an alias of its domain, resolved here); None: the one asked for.
    ``storage_hosts``: the storage hosts of the virtual folders it mounts, sorted (only an
    agent that mounts them all may take it); empty: it mounts none.
    """

    session_id: str
    owner: str
    image: str | None = None
    storage_hosts: tuple[str, ...] = ()


class SessionRejected(Event, frozen=True, kw_only=True, tag="session.rejected.v1"):
    """The request is refused for good; ``reason`` is shown to the user as is."""

    session_id: str
    owner: str
    code: str
    reason: str


class DevicePlacement(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False
):
    """A share of one GPU given to a session: ``fgpu`` quanta of device ``gpu_index``."""

    gpu_index: int
    fgpu: int


class SessionScheduled(Event, frozen=True, kw_only=True, tag="session.scheduled.v1"):
    """The scheduler placed the session: from now on it holds ``slots`` on ``agent_id``."""

    session_id: str
    owner: str
    agent_id: str
    slots: Slots
    devices: tuple[DevicePlacement, ...]


class SessionQueued(Event, frozen=True, kw_only=True, tag="session.queued.v1"):
    """The scheduler could not place the admitted session now; it waits, holding no device.

    Written once per session, the first time it does not fit, so users and the audit see
    why it waits. It stays PENDING and is placed as soon as capacity frees.
    """

    session_id: str
    reason: str


class SessionCancelled(Event, frozen=True, kw_only=True, tag="session.cancelled.v1"):
    """A session that never started was withdrawn (destroyed while pending)."""

    session_id: str
    owner: str
    reason: str


class SessionTerminating(Event, frozen=True, kw_only=True, tag="session.terminating.v1"):
    """The scheduler asks the session's agent to stop it."""

    session_id: str
    agent_id: str
    reason: str


class SessionPreparing(Event, frozen=True, kw_only=True, tag="session.preparing.v1"):
    """The agent started creating the session's container."""

    session_id: str
    agent_id: str


class SessionPulling(Event, frozen=True, kw_only=True, tag="session.pulling.v1"):
    """The agent lacks the session's image and pulls it from its registry: ``current`` of
    ``total`` bytes so far (``total`` 0: not known yet). The first makes the session
    PULLING; later ones, throttled, only say how far it got."""

    session_id: str
    agent_id: str
    image: str
    current: int = 0
    total: int = 0


class SessionRunning(Event, frozen=True, kw_only=True, tag="session.running.v1"):
    """The session's container runs. ``host``: the container's own address on the
    serving network, where a proxy on the agent's host reaches its ports (inference
    sessions only; None for every other session, and in older logs)."""

    session_id: str
    agent_id: str
    container_id: str
    host: str | None = None


class SessionTerminated(Event, frozen=True, kw_only=True, tag="session.terminated.v1"):
    """The container is gone; its resources are free. ``exit_code`` is None if unknown."""

    session_id: str
    agent_id: str
    exit_code: int | None
    reason: str


class SessionErrored(Event, frozen=True, kw_only=True, tag="session.errored.v1"):
    """The session could not be started; its resources are free."""

    session_id: str
    agent_id: str
    reason: str


class SessionUnplaced(Event, frozen=True, kw_only=True, tag="session.unplaced.v1"):
    """The scheduler took back a placement its agent never acted on (the agent was lost
    before it started the session): the session is PENDING again, in its place in the
    queue, holding no device; it is placed anew."""

    session_id: str
    owner: str
    agent_id: str
    reason: str


class SessionLost(Event, frozen=True, kw_only=True, tag="session.lost.v1"):
    """The scheduler ended a session its agent had started, the agent having been lost for
    longer than the grace: ERROR, its shares and quota free. If the agent comes back, it
    removes the container (``agent.fenced``)."""

    session_id: str
    owner: str
    agent_id: str
    reason: str


class DestroyRejected(Event, frozen=True, kw_only=True, tag="session.destroy-rejected.v1"):
    """A destroy request was refused (unknown session, someone else's, already ended)."""

    session_id: str
    requester: str
    reason: str


class PolicySet(Event, frozen=True, kw_only=True, tag="policy.set.v1"):
    """An administrator sets an access key's resource policy; None means no limit."""

    owner: str
    max_concurrent_sessions: int | None = None
    max_slots: Slots | None = None


class PayloadRejected(Event, frozen=True, kw_only=True, tag="payload.rejected.v1"):
    """A message on the log could not be decoded or was invalid; it changed nothing.

    Written by the quota actor, the first reader of user input, so a bad payload leaves
    a trace instead of vanishing or crashing an actor.
    """

    stream_seq: int
    subject: str
    error: str
