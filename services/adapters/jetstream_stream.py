"""The stream the log lives in: this version's configuration, and what a server says of it.

The stream is an administrator's to create or update (``JetStreamLog.create_or_update_
stream``); clients only read its description. An update lays this version's settings over
the stream's own (``updated``), so what an administrator set beside them (limits,
replicas, subjects of their own) stays.
"""

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events import subjects as subj
from services.ports import LogError, Retention

__all__ = [
    "INTAKE_BACKLOG",
    "StreamChange",
    "StreamInfo",
    "domains_config",
    "holds",
    "intake_config",
    "retention_of",
    "retention_step",
    "stream_config",
    "stream_info_of",
    "updated",
]

_DUPLICATE_WINDOW_NS = 120 * 1_000_000_000


def stream_config(replicas: int | None = None) -> dict[str, Any]:
    """The stream as this version of fgpu needs it, as ``$JS.API.STREAM.CREATE`` takes it;
    with ``replicas`` copies on as many servers of a cluster (None: as the server has it,
    one for a new stream)."""
    replicated = {} if replicas is None else {"num_replicas": replicas}
    return {
        **replicated,
        "name": subj.STREAM,
        "subjects": list(subj.STREAM_SUBJECTS),
        "storage": "file",
        "retention": "limits",
        "duplicate_window": _DUPLICATE_WINDOW_NS,
        "allow_atomic": True,
        "allow_direct": True,
        "discard": "old",
        # The history is never cut by hand: no message is deleted, the stream never
        # purged, whoever asks (permissions deny it to every identity too). A stream
        # made with retention is purged by the archiver alone, of what it has archived.
        "deny_delete": True,
        "deny_purge": True,
    }


INTAKE_BACKLOG = 16  # a key's requests the intake stream holds waiting; more are refused


def intake_config(replicas: int | None = None) -> dict[str, Any]:
    """The intake stream: people's requests waiting for the intake, one subject per key,
    each read once (a work queue). The server holds at most ``INTAKE_BACKLOG`` of a key
    and refuses the next at once (discard new, per subject): a key's flood waits on itself
    alone, and costs the server a refusal each. A request waiting an hour is dropped."""
    replicated = {} if replicas is None else {"num_replicas": replicas}
    return {
        **replicated,
        "name": subj.INTAKE_STREAM,
        "subjects": [subj.INTAKE_WILDCARD],
        "storage": "file",
        "retention": "workqueue",
        "discard": "new",
        "discard_new_per_subject": True,
        "max_msgs_per_subject": INTAKE_BACKLOG,
        "max_age": 3600 * 1_000_000_000,
        "max_msg_size": 1 << 20,
        "deny_delete": True,
        "deny_purge": True,
    }


def domains_config(replicas: int | None = None) -> dict[str, Any]:
    """The domains' stream: each domain's records of the log, for the domain's readers
    (``fgpu.d.<domain>.<subject>``, written by the domain feed and made again from the log
    at will). Kept as the log is; each record's id there names its domain and sequence."""
    replicated = {} if replicas is None else {"num_replicas": replicas}
    return {
        **replicated,
        "name": subj.DOMAINS_STREAM,
        "subjects": [subj.DOMAINS_WILDCARD],
        "storage": "file",
        "retention": "limits",
        "discard": "old",
        "duplicate_window": _DUPLICATE_WINDOW_NS,
        "deny_delete": True,
    }


# The retention of a stream made with it, in the stream's metadata (strings, as the
# server keeps them): the archiver reads them there.
_RETAIN_EVENTS, _RETAIN_AGE = "fgpu_retain_events", "fgpu_retain_age_s"


def retention_of(config: dict[str, Any]) -> Retention | None:
    """The retention a stream's configuration holds; None when it keeps everything (made
    refusing purges, or with no limit set). Raises LogError for limits of no known form."""
    if config.get("deny_purge", False):
        return None
    meta = config.get("metadata") or {}
    try:
        events = int(meta[_RETAIN_EVENTS]) if meta.get(_RETAIN_EVENTS) else None
        age = float(meta[_RETAIN_AGE]) if meta.get(_RETAIN_AGE) else None
        return None if events is None and age is None else Retention(events, age)
    except (TypeError, ValueError) as e:
        raise LogError(f"the stream's retention, {meta}, is of no known form: {e}") from e


def retention_step(
    config: dict[str, Any] | None, wanted: dict[str, Any], retention: Retention | None
) -> dict[str, Any]:
    """``wanted`` with ``retention`` for the stream whose configuration is ``config`` (None:
    one to make). A new stream with retention may be purged (by the archiver alone); an
    existing one keeps its ``deny_purge``, which the server never lets anyone lift, and
    retention asked of one made refusing purges is refused with a LogError that says so.
    No retention asked leaves an existing stream's as it is."""
    out = dict(wanted)
    if config is not None:
        out.pop("deny_purge")
        if retention is None:
            return out
        if config.get("deny_purge", False):
            raise LogError(
                f"the stream {subj.STREAM} was made keeping every event for good (it refuses "
                "purges, which no one can undo): retention needs a stream made with it "
                "(fgpu stream create --retain-events/--retain-days on a new server)"
            )
    elif retention is None:
        return out
    else:
        out["deny_purge"] = False
    meta = dict((config or {}).get("metadata") or {})
    meta[_RETAIN_EVENTS] = "" if retention.max_events is None else str(retention.max_events)
    meta[_RETAIN_AGE] = "" if retention.max_age_s is None else repr(retention.max_age_s)
    out["metadata"] = meta
    return out


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
    leader: str = ""  # the server leading it; none while a cluster elects one


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
            leader=str((data.get("cluster") or {}).get("leader") or ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LogError(f"stream info: an answer of no known form: {e!r}") from e


def holds(config: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the server's ``config`` has every setting of ``wanted``: each of its
    subjects stored (by the same subject or a wider one), the rest equal."""
    return all(
        all(_stored(s, config.get(k) or ()) for s in v) if k == "subjects" else config.get(k) == v
        for k, v in wanted.items()
    )


def updated(config: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The server's ``config`` brought up to ``wanted``, as ``$JS.API.STREAM.UPDATE`` takes
    it: every setting of ``wanted`` laid over the stream's, whose others (an administrator's
    limits, replicas, ...) stay; the subjects are the stream's and ``wanted``'s, less any
    that another of them stores too (the server refuses subjects that overlap)."""
    both = [*(config.get("subjects") or ()), *wanted["subjects"]]
    subjects = [
        s
        for i, s in enumerate(both)
        if s not in both[:i] and not _stored(s, [o for o in both if o != s])
    ]
    return {**config, **wanted, "subjects": subjects}


def _stored(subject: str, subjects: Iterable[str]) -> bool:
    """Whether one of ``subjects`` stores every message ``subject`` matches."""
    return any(_covers(pattern, subject) for pattern in subjects)


def _covers(pattern: str, subject: str) -> bool:
    """Whether ``pattern`` matches every subject that ``subject`` (a pattern too) matches:
    ``*`` stands for one token, ``>`` for one or more at the end."""
    ours, theirs = pattern.split("."), subject.split(".")
    for i, token in enumerate(ours):
        if token == ">":
            return len(theirs) > i
        if i == len(theirs) or theirs[i] == ">" or token not in ("*", theirs[i]):
            return False
    return len(theirs) == len(ours)
