"""The ports actors depend on. Adapters at the edge implement them; fakes implement them too.

Nothing here imports an adapter library (nats, aiodocker, duckdb, pynvml).
"""

from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

import msgspec

from events import AnyEvent, GpuInfo, decode
from events import subjects as subj

__all__ = [
    "MAX_BATCH",
    "Clock",
    "ConcurrencyConflict",
    "ContainerError",
    "ContainerInfo",
    "ContainerRuntime",
    "ContainerSpec",
    "DeviceUsageSample",
    "EventLog",
    "GpuProbe",
    "ImageNotFound",
    "LogError",
    "Malformed",
    "Mount",
    "OomRefusal",
    "RawBatch",
    "Record",
    "RuntimeUnavailable",
    "SliceRegions",
    "check_batch",
    "record_of",
    "records_of",
]


# ---- errors -------------------------------------------------------------------------------
# LogError
#  +-- ConcurrencyConflict   (retryable: re-read the log, decide again)
# ContainerError
#  +-- ImageNotFound          (permanent for this session)
#  +-- RuntimeUnavailable     (retryable: the engine is down or refused)


class LogError(Exception):
    """The event log refused or failed an operation."""


class ConcurrencyConflict(LogError):
    """Another writer appended to the subject since we read it: re-read, decide again."""


class ContainerError(Exception):
    """The container runtime failed an operation."""


class ImageNotFound(ContainerError):
    """The image does not exist on this engine."""


class RuntimeUnavailable(ContainerError):
    """The engine cannot be reached or refused the call; trying later may work."""


# ---- the event log ------------------------------------------------------------------------


class Malformed(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message on the log whose payload is not a valid event.

    It and Record hold immutable values only (events are ``gc=False`` too), so they can be
    in no reference cycle and the garbage collector need not track them: a replay makes
    one per message, and each tracked one brings the next collection nearer
    (``bench/fold.py``, ``rebuild_decode_and_prepare_us``).
    """

    error: str
    payload: bytes


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message of the log: its global order ``seq``, its subject and its event."""

    seq: int
    subject: str
    event: AnyEvent | Malformed


class RawBatch(NamedTuple):
    """Stored messages as a bulk reader hands them out, in order, undecoded.

    ``payloads`` are canonical: each is ``events.encode`` of the event it decodes to, or
    the stored bytes where it is no event, so that a store can keep them as they are (the
    reader, in a process of its own, re-encodes them where the store's GIL is precious).
    ``body`` holds the same payloads end to end, payload i from ``offsets[i]`` to
    ``offsets[i + 1]`` (``len(seqs) + 1`` native int64s), to be taken in bulk.
    """

    seqs: list[int]
    subjects: list[str]
    payloads: list[bytes]
    body: bytes
    offsets: bytes


MAX_BATCH = 1000  # events in one atomic batch: the server's limit (nats.conf)
_MALFORMED_KEPT = 4096  # bytes of a payload that is no event kept in its record


def record_of(seq: int, subject: str, payload: bytes) -> Record:
    """Decode one stored message; a payload that is not a valid event becomes Malformed."""
    try:
        event: AnyEvent | Malformed = decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        event = Malformed(error=str(e), payload=payload[:_MALFORMED_KEPT])
    return Record(seq=seq, subject=subject, event=event)


def records_of(
    seqs: Sequence[int], subjects: Sequence[str], payloads: Sequence[bytes]
) -> list[Record]:
    """``record_of`` of each stored message, in order.

    Decodes in one comprehension, and only where a payload fails message by message: a
    bulk replay's records cost a decode each and little more.
    """
    try:
        return [
            Record(seq=seq, subject=subject, event=decode(payload))
            for seq, subject, payload in zip(seqs, subjects, payloads, strict=True)
        ]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [record_of(*m) for m in zip(seqs, subjects, payloads, strict=True)]


def check_batch(items: Sequence[tuple[str, AnyEvent]], expect_subject: str) -> None:
    """Raise ValueError for a batch ``EventLog.append_batch`` refuses: empty, larger than
    MAX_BATCH, or with no event on ``expect_subject``."""
    if not items:
        raise ValueError("an empty batch")
    if len(items) > MAX_BATCH:
        raise ValueError(f"a batch holds at most {MAX_BATCH} events, got {len(items)}")
    if all(subject != expect_subject for subject, _ in items):
        raise ValueError(f"no event of the batch is on {expect_subject}")


class EventLog(Protocol):
    """The append-only log every state change goes through."""

    async def append(
        self,
        subject: str,
        event: AnyEvent,
        *,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        """Append one event; return its sequence.

        The event id dedupes: appending the same event twice stores it once and returns
        the first sequence. With ``expected_last_subject_seq`` the append succeeds only if
        the subject's last sequence is that (0: no message yet), else ConcurrencyConflict.
        """
        ...

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        """Append ``items`` atomically, all or none; return the last one's sequence.

        Succeeds only if ``expect_subject``'s last sequence is ``expected_last_subject_seq``
        when the batch is stored, else ConcurrencyConflict and nothing is stored.
        """
        ...

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        """Append independent events, pipelined, each deduped by its id; not atomic."""
        ...

    async def last_seq(self) -> int:
        """The sequence of the newest message (0 when empty)."""
        ...

    def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of records after ``after`` up to ``until`` (default: the end now), in order."""
        ...

    def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of records after ``after``, then new ones as they come, forever.

        ``subject``, a NATS subject or pattern (``*`` one token, a final ``>`` the rest),
        narrows it to the records on matching subjects: each of them, in order, none
        left out; a batch is never empty. The default is every subject of the stream.
        """
        ...

    def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        """Batches of new records forever, through a durable cursor named ``durable``.

        Records at or below ``after`` are skipped; a batch is acknowledged when the next
        one is asked for, so a crash redelivers at most the batch in hand.
        """
        ...


# ---- containers ---------------------------------------------------------------------------


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


class ContainerInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    labels: dict[str, str]
    running: bool
    exit_code: int | None = None


class ContainerRuntime(Protocol):
    """A container engine, as the agent uses it."""

    async def images(self) -> list[str]:
        """Tags of the images present locally."""
        ...

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        """Create and start the container; if one named ``spec.name`` exists, return it.

        Raises ImageNotFound or RuntimeUnavailable.
        """
        ...

    async def list(self, labels: dict[str, str]) -> list[ContainerInfo]:
        """Containers (running or not) carrying all of ``labels``."""
        ...

    async def wait(self, container_id: str) -> int:
        """Block until the container exits; its exit code."""
        ...

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        """Stop (SIGTERM, then SIGKILL after the timeout) and remove; no error if gone."""
        ...

    async def logs(self, container_id: str, *, tail: int = 200) -> str:
        """The last ``tail`` lines of the container's output."""
        ...


# ---- the fGPU shim's shared regions ---------------------------------------------------------


class DeviceUsageSample(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one device of a container's slice (index in the container's order)."""

    index: int
    mem_used: int
    mem_peak: int
    mem_limit: int
    launches: int
    throttled_ns: int
    refusals: int


class OomRefusal(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    pid: int
    requested: int
    mem_used: int


class SliceRegions(Protocol):
    """The shared regions through which the shim in each container enforces and reports.

    One region per session, a file on the host that the container maps. Reads are
    lock-free memory reads: cheap enough to call from the event loop.
    """

    def create(self, key: str, mem_limits: Sequence[int], sm_shares_ppm: Sequence[int]) -> str:
        """Create the region of ``key`` with its slice per device; its host path."""
        ...

    def sample(self, key: str) -> list[DeviceUsageSample]:
        """The counters of each device; [] if the region is gone."""
        ...

    def drain_ooms(self, key: str) -> list[OomRefusal]:
        """Out-of-memory refusals recorded since the last call."""
        ...

    def reclaim(self, key: str) -> int:
        """Give back the bytes of the container's processes that died; how many."""
        ...

    def remove(self, key: str) -> None:
        """Delete the region (the session ended); no error if gone."""
        ...


# ---- GPUs and time ------------------------------------------------------------------------


class GpuProbe(Protocol):
    def gpus(self) -> list[GpuInfo]:
        """The GPUs of this host."""
        ...


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...
