"""The errors the ports raise, named by how the caller recovers.

::

    LogError                    (retryable: rebuild from the log, try again)
     +-- ConcurrencyConflict    (another writer was first: re-read, decide again)
     +-- StreamMissing          (no stream stores the log: an admin creates it)
     +-- BulkReadUnavailable    (the fast bulk path cannot serve: read in order instead)
     +-- HistoryMissing         (part of the past is archived out of the stream and no
                                 snapshot covers it: start from one, or read the archive)
     +-- SnapshotCorrupt        (a snapshot stored is not what was saved: do without it,
                                 replay the log; the next save replaces it)
     +-- OutcomeUnknown         (a write was sent and no answer came: it may be stored or
                                 not; send it again as it was, its ids dedupe it)
     +-- RequestsRefused        (ports.intake: the intake took none of the requests)
    ContainerError
     +-- ImageNotFound          (permanent for this session)
     +-- RuntimeUnavailable     (retryable: the engine is down or refused)
    AgentUnreachable            (no agent answered a request: it may be down)
    ConnectionsUnknown          (a server could not be asked which clients it holds:
                                 ask again)
    ServerUnavailable           (the log's server could not be started again: try later)
"""

__all__ = [
    "AgentUnreachable",
    "BulkReadUnavailable",
    "ConcurrencyConflict",
    "ConnectionsUnknown",
    "ContainerError",
    "HistoryMissing",
    "ImageNotFound",
    "LogError",
    "OutcomeUnknown",
    "RuntimeUnavailable",
    "ServerUnavailable",
    "SnapshotCorrupt",
    "StreamMissing",
]


class LogError(Exception):
    """The event log refused or failed an operation."""


class ConcurrencyConflict(LogError):
    """Another writer appended to the subject since we read it: re-read, decide again."""


class StreamMissing(LogError):
    """The server holds no stream for the log: it was never created, or was deleted.

    Clients never create it (``fgpu stream create`` is an administrator's step).
    """


class BulkReadUnavailable(LogError):
    """The bulk reader cannot serve this connection or server (TLS, credentials it does
    not speak, an answer of a form it does not know): read with ``EventLog.read``."""


class HistoryMissing(LogError):
    """A state rebuilt from the stream lacks records that were archived out of it (and no
    snapshot covers them): it is not the log's state. Start from a snapshot that covers
    them, or read the archive with the stream (``projections.archive.ArchivedLog``)."""


class SnapshotCorrupt(LogError):
    """The store holds a snapshot whose bytes are not what was saved: chunks missing, not
    matching its digest or its size, a meta naming none. Found by checking, never by
    waiting; the caller does without it (a full replay) and the next save replaces it."""


class OutcomeUnknown(LogError):
    """A write left and no answer came (none in time, or the connection was lost): it may
    have been stored, or not. Sent again as it was (the same events, the same ids), it is
    stored once: the stream dedupes the ids."""


class ContainerError(Exception):
    """The container runtime failed an operation."""


class ImageNotFound(ContainerError):
    """The image does not exist on this engine."""


class RuntimeUnavailable(ContainerError):
    """The engine cannot be reached or refused the call; trying later may work."""


class AgentUnreachable(Exception):
    """No agent answered a request in time, or the transport failed."""


class ConnectionsUnknown(Exception):
    """The servers could not be asked which client connections they hold (one did not
    answer, or the system account is away): ask again later."""


class ServerUnavailable(Exception):
    """The log's server could not be started again (its port taken, it exited at once):
    try again later."""
