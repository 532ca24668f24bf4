"""The ports actors depend on: Protocols that adapters at the edge implement, and fakes too.

One module a concern: ``errors`` (the tree every port raises from), ``log`` (the event log
and its optional bulk read), ``bus`` (heartbeats and requests to agents, off the log),
``containers``, ``regions`` (the shim's shared regions), ``gpu_watch`` (what the GPU
driver counts of each process, and whose container it is), ``host`` (GPUs, the clock),
``snapshots`` (where an actor keeps the state it starts from), ``store`` (the disk under
a log's server, and the server, for the watcher beside it), ``secrets`` (what opens a
secret's sealed value: the agents' side of the cluster's secrets key).
Nothing here imports an adapter library (nats, aiodocker, duckdb, pynvml).
"""

from services.ports.archive import ArchivedSegment, ArchiveStore
from services.ports.bus import (
    AgentHandler,
    AgentReply,
    AgentRequest,
    AgentRequests,
    AppRequest,
    ChannelReply,
    ExecReply,
    ExecRequest,
    FollowRequest,
    Heartbeats,
    LogsReply,
    LogsRequest,
    Pipe,
    RequestFailed,
    ServicesReply,
    ServicesRequest,
    ShellRequest,
)
from services.ports.containers import (
    EXEC_OUTPUT_KEPT,
    ContainerInfo,
    ContainerRuntime,
    ExecChannel,
    ExecResult,
    OutputFollow,
    PullProgress,
)
from services.ports.domains import DomainFeed, ReaderConsumers
from services.ports.errors import (
    AgentUnreachable,
    BulkReadUnavailable,
    ConcurrencyConflict,
    ConnectionsUnknown,
    ContainerError,
    HistoryMissing,
    ImageNotFound,
    LogError,
    OutcomeUnknown,
    RuntimeUnavailable,
    ServerUnavailable,
    SnapshotCorrupt,
    StreamMissing,
)
from services.ports.gate import Connection, Grant, Kicker
from services.ports.gpu_watch import (
    GpuProcess,
    GpuProcessWatch,
    GpuUtilSample,
    GpuWatchUnavailable,
    ProcessContainers,
)
from services.ports.host import Clock, GpuProbe
from services.ports.intake import Handed, IntakeQueue, RequestSender, RequestsRefused
from services.ports.log import (
    MAX_BATCH,
    BulkLog,
    EventLog,
    RetainingLog,
    Retention,
    check_batch,
)
from services.ports.mps import MpsControl, MpsUnavailable
from services.ports.output import KeptOutput, OutputStore
from services.ports.regions import DeviceUsageSample, OomRefusal, SliceRegions
from services.ports.secrets import SecretOpener, SecretUnreadable
from services.ports.snapshots import SnapshotStore
from services.ports.store import DiskUsage, LogServer, StoreDisk
from services.ports.vfolders import Entry, FileState, FolderError, FolderStore, OpenFile, Upload

__all__ = [
    "EXEC_OUTPUT_KEPT",
    "MAX_BATCH",
    "AgentHandler",
    "AgentReply",
    "AgentRequest",
    "AgentRequests",
    "AgentUnreachable",
    "AppRequest",
    "ArchiveStore",
    "ArchivedSegment",
    "BulkLog",
    "BulkReadUnavailable",
    "ChannelReply",
    "Clock",
    "ConcurrencyConflict",
    "Connection",
    "ConnectionsUnknown",
    "ContainerError",
    "ContainerInfo",
    "ContainerRuntime",
    "DeviceUsageSample",
    "DiskUsage",
    "DomainFeed",
    "Entry",
    "EventLog",
    "ExecChannel",
    "ExecReply",
    "ExecRequest",
    "ExecResult",
    "FileState",
    "FolderError",
    "FolderStore",
    "FollowRequest",
    "GpuProbe",
    "GpuProcess",
    "GpuProcessWatch",
    "GpuUtilSample",
    "GpuWatchUnavailable",
    "Grant",
    "Handed",
    "Heartbeats",
    "HistoryMissing",
    "ImageNotFound",
    "IntakeQueue",
    "KeptOutput",
    "Kicker",
    "LogError",
    "LogServer",
    "LogsReply",
    "LogsRequest",
    "MpsControl",
    "MpsUnavailable",
    "OomRefusal",
    "OpenFile",
    "OutcomeUnknown",
    "OutputFollow",
    "OutputStore",
    "Pipe",
    "ProcessContainers",
    "PullProgress",
    "ReaderConsumers",
    "RequestFailed",
    "RequestSender",
    "RequestsRefused",
    "RetainingLog",
    "Retention",
    "RuntimeUnavailable",
    "SecretOpener",
    "SecretUnreadable",
    "ServerUnavailable",
    "ServicesReply",
    "ServicesRequest",
    "ShellRequest",
    "SliceRegions",
    "SnapshotCorrupt",
    "SnapshotStore",
    "StoreDisk",
    "StreamMissing",
    "Upload",
    "check_batch",
]
