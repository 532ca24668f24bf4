"""The event catalogue: frozen, tagged, versioned msgspec Structs with no behaviour.

This package imports nothing else of the project; everything else may import it.
"""

from events.agent import AgentLost, AgentRegistered, GpuInfo
from events.base import Event
from events.codec import SCHEMA_VERSION, decode, encode, json_schema
from events.records import Malformed, RawBatch, Record, record_of, records_of
from events.session import (
    DestroyRejected,
    DevicePlacement,
    PayloadRejected,
    PolicySet,
    SessionAdmitted,
    SessionCancelled,
    SessionDestroyRequested,
    SessionErrored,
    SessionPreparing,
    SessionQueued,
    SessionRejected,
    SessionRequested,
    SessionRunning,
    SessionScheduled,
    SessionTerminated,
    SessionTerminating,
)
from events.slots import Slots
from events.union import AnyEvent
from events.usage import GpuOomRefused, GpuUsageSampled

__all__ = [
    "SCHEMA_VERSION",
    "AgentLost",
    "AgentRegistered",
    "AnyEvent",
    "DestroyRejected",
    "DevicePlacement",
    "Event",
    "GpuInfo",
    "GpuOomRefused",
    "GpuUsageSampled",
    "Malformed",
    "PayloadRejected",
    "PolicySet",
    "RawBatch",
    "Record",
    "SessionAdmitted",
    "SessionCancelled",
    "SessionDestroyRequested",
    "SessionErrored",
    "SessionPreparing",
    "SessionQueued",
    "SessionRejected",
    "SessionRequested",
    "SessionRunning",
    "SessionScheduled",
    "SessionTerminated",
    "SessionTerminating",
    "Slots",
    "decode",
    "encode",
    "json_schema",
    "record_of",
    "records_of",
]
