"""Encoding and decoding of the log's payloads, with upcasting of past versions."""

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from events.union import EVENT_TYPES, AnyEvent

__all__ = ["SCHEMA_VERSION", "decode", "decode_many", "encode", "encode_many", "json_schema"]

# Bumped when an event gets a new tag; past tags stay decodable through UPCASTERS.
SCHEMA_VERSION = 1

# tag of a past version -> function turning its raw dict into the current version's dict.
# Empty while every event is at version 1; see docs/events.md "Evolution".
UPCASTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)
_many_decoder = msgspec.json.Decoder(list[AnyEvent])


def encode(event: AnyEvent) -> bytes:
    """The JSON bytes of ``event``, tagged with its type."""
    return _encoder.encode(event)


def decode(payload: bytes) -> AnyEvent:
    """The event in ``payload``.

    Raises msgspec.DecodeError (not JSON) or msgspec.ValidationError (not a known event,
    or a field of the wrong type, or an unknown field).
    """
    if UPCASTERS:
        raw = msgspec.json.decode(payload)
        if isinstance(raw, dict):
            upcast = UPCASTERS.get(raw.get("type", ""))
            if upcast is not None:
                event: AnyEvent = msgspec.convert(upcast(raw), AnyEvent)
                return event
    decoded: AnyEvent = _decoder.decode(payload)
    return decoded


def encode_many(events: Sequence[AnyEvent]) -> bytes:
    """The JSON array of ``events``, in order: several requests in one message."""
    return _encoder.encode(list(events))


def decode_many(payload: bytes) -> list[AnyEvent]:
    """The events of a JSON array ``encode_many`` made (current versions only: a message
    that carries them is read at once, never stored for later).

    Raises msgspec.DecodeError or msgspec.ValidationError, as ``decode``.
    """
    found: list[AnyEvent] = _many_decoder.decode(payload)
    return found


def json_schema() -> dict[str, Any]:
    """The JSON Schema of every event, for integrations in any language."""
    schema = msgspec.json.schema(AnyEvent)
    schema["title"] = "fgpu events"
    schema["x-schema-version"] = SCHEMA_VERSION
    schema["x-event-types"] = sorted(str(t.__struct_config__.tag) for t in EVENT_TYPES)
    return schema
