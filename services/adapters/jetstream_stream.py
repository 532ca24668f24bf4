"""The stream the log lives in: this version's configuration, and what a server says of it.

The stream is an administrator's to create or update (``JetStreamLog.create_or_update_
stream``); clients only read its description.
"""

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events import subjects as subj
from services.ports import LogError

__all__ = ["StreamChange", "StreamInfo", "holds", "stream_config", "stream_info_of"]

_DUPLICATE_WINDOW_NS = 120 * 1_000_000_000


def stream_config() -> dict[str, Any]:
    """The stream as this version of fgpu needs it, as ``$JS.API.STREAM.CREATE`` takes it."""
    return {
        "name": subj.STREAM,
        "subjects": list(subj.STREAM_SUBJECTS),
        "storage": "file",
        "retention": "limits",
        "duplicate_window": _DUPLICATE_WINDOW_NS,
        "allow_atomic": True,
        "allow_direct": True,
        "discard": "old",
    }


class StreamChange(enum.Enum):
    """What ``create_or_update_stream`` did."""

    CREATED = "created"
    UPDATED = "updated"
    CURRENT = "current"  # it had this version's configuration already


@dataclass(frozen=True)
class StreamInfo:
    """The stream as the server describes it now."""

    subjects: tuple[str, ...]
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    created: datetime


def stream_info_of(data: dict[str, Any]) -> StreamInfo:
    """StreamInfo from the body of ``$JS.API.STREAM.INFO``. Raises LogError."""
    try:
        state = data["state"]
        # RFC 3339 with nanoseconds: Python's parser takes up to microseconds.
        created = re.sub(r"(\.\d{6})\d+", r"\1", data["created"]).replace("Z", "+00:00")
        return StreamInfo(
            subjects=tuple(data["config"]["subjects"]),
            messages=int(state["messages"]),
            bytes=int(state["bytes"]),
            first_seq=int(state["first_seq"]),
            last_seq=int(state["last_seq"]),
            created=datetime.fromisoformat(created),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LogError(f"stream info: an answer of no known form: {e!r}") from e


def holds(config: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the server's ``config`` has every setting of ``wanted`` (lists in any order)."""
    return all(
        sorted(config.get(k) or ()) == sorted(v) if isinstance(v, list) else config.get(k) == v
        for k, v in wanted.items()
    )
