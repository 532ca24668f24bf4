"""A request's ids, made from the id its requester gives it: sent again with the same
request id, a request carries the same events, with the same ids, so the log keeps one.

A person's request (``fgpu session create``, ``session rm``, ``admin ...``) has one
request id, chosen by the requester (``--request-id``) or made at random. Every id it
puts on the log comes from that one: each event's id (its ``Nats-Msg-Id`` on the log and,
for the first event of a message, on the intake stream), each session's id, the
correlation id. So a request whose outcome is unknown (no answer came) can be sent again
as it was, and is then stored once: the intake stream and the log dedupe its ids within
their 2-minute windows, and beyond them a session id asked for twice is refused by the
fold, and a batch of requests expects its first subject to be new.

The ids are keyed hashes: of the requester's access key and request id, keyed with the
requester's secret where there is one, so nobody else can make them, not even knowing the
request id, and take them first (each stream dedupes ids of every key: an id taken first
by another would have the request's own dropped). Pure: no clock, no I/O.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from events import subjects as subj

__all__ = ["RequestIds", "new_request_id", "request_id_problem"]


def new_request_id() -> str:
    """A fresh request id, for a request sent without one."""
    return "r" + secrets.token_hex(8)


def request_id_problem(request_id: str) -> str | None:
    """Why ``request_id`` may not be one (it is shown and given back on the command
    line), or None."""
    if subj.is_token(request_id):
        return None
    return f"--request-id {request_id!r}: 1-64 letters, digits, '-' or '_'"


@dataclass(frozen=True)
class RequestIds:
    """The ids of request ``request_id`` of ``access_key`` (keyed with ``secret``)."""

    access_key: str
    request_id: str
    secret: str | None = None

    def _digest(self, part: str) -> str:
        message = f"{self.access_key}\0{self.request_id}\0{part}".encode()
        key = (self.secret or "").encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()

    def event(self, part: str) -> str:
        """The id of the request's event ``part`` (one name per event of the request)."""
        return self._digest(f"event\0{part}")[:32]

    def run(self) -> str:
        """The id of the request's pipeline run."""
        return "p" + self._digest("run")[:15]

    def session(self, n: int) -> str:
        """The id of the request's ``n``-th session (as ``services.client`` makes ids)."""
        return "s" + self._digest(f"session\0{n}")[:12]
