"""The read API as the CLI reads it: JSON over HTTP, and the event stream (SSE) with resume.

The standard library's ``http.client`` rather than an HTTP package: a CLI call pays for
every import before it does anything, and a GET and a line reader are all it needs.

Errors::

    ApiError            the API answered, with an error (``status``, ``detail``)
    ApiUnreachable      no answer: not listening, the connection broke, or too slow
"""

import contextlib
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.cli.api_tokens import TokenCache

if TYPE_CHECKING:
    import http.client
    from typing import BinaryIO

__all__ = ["ApiError", "ApiUnreachable", "ReadApi", "StreamEvent"]

Params = Mapping[str, str | int | Sequence[str] | None]
_TIMEOUT_S = 30.0
# The server sends a comment at least every 15 s: a stream silent for longer is broken.
_STREAM_IDLE_S = 45.0
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class ApiError(Exception):
    """The read API answered with an error."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ApiUnreachable(Exception):
    """The read API did not answer: it is not listening there, or the connection broke."""


@dataclass(frozen=True)
class StreamEvent:
    """One message of the event stream: ``seq`` is its log sequence (the SSE id).

    ``more``: the server sent more events in the same write (it writes a page at once),
    already here; a reader may put work off until an event without it.
    """

    seq: int
    event: dict[str, Any]
    more: bool = False


class ReadApi:
    """A client of the read API at ``base_url`` (``http://host:port``), reading as the
    keypair ``access_key`` with ``secret`` (signed in when the API asks for it; a cluster
    with no tenancy does not), its tokens kept in ``tokens``."""

    def __init__(
        self,
        base_url: str,
        *,
        access_key: str | None = None,
        secret: str | None = None,
        tokens: TokenCache | None = None,
        timeout_s: float = _TIMEOUT_S,
    ) -> None:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the read API's address must be http://HOST:PORT, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._url = url
        self._timeout_s = timeout_s
        self._key = access_key
        self._secret = secret
        self._tokens = tokens or TokenCache(None)

    def get(self, path: str, params: Params | None = None) -> Any:
        """The JSON body of ``GET path?params``. Raises ApiError or ApiUnreachable."""
        target = self._target(path, params)
        status, body = self._call("GET", target, None, self._token())
        if status == 401 and self._may_sign_in():
            status, body = self._call("GET", target, None, self.sign_in())
        if status >= 400:
            raise ApiError(status, self._refusal(_detail(body, status), status))
        return self._json(body)

    def post(self, path: str, params: Params | None = None) -> Any:
        """The JSON body of ``POST path?params`` (no body). Raises ApiError or
        ApiUnreachable."""
        return self._bodiless("POST", path, params)

    def delete(self, path: str, params: Params | None = None) -> Any:
        """The JSON body of ``DELETE path?params``. Raises ApiError or ApiUnreachable."""
        return self._bodiless("DELETE", path, params)

    def _bodiless(self, method: str, path: str, params: Params | None) -> Any:
        target = self._target(path, params)
        status, body = self._call(method, target, b"", self._token())
        if status == 401 and self._may_sign_in():
            status, body = self._call(method, target, b"", self.sign_in())
        if status >= 400:
            raise ApiError(status, self._refusal(_detail(body, status), status))
        return self._json(body)

    def download(
        self,
        path: str,
        params: Params | None,
        out: "BinaryIO",
        *,
        offset: int = 0,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """The body of ``GET path?params`` written to ``out`` as it comes; how many bytes.
        With ``offset``, only the bytes from there (a ``Range`` request). ``progress`` is
        told of each chunk written. Raises ApiError or ApiUnreachable."""
        target = self._target(path, params)
        written = self._download_once(target, self._token(), out, offset, progress)
        if written is None and self._may_sign_in():
            written = self._download_once(target, self.sign_in(), out, offset, progress)
        if written is None:
            raise ApiError(401, self._refusal("the read API refused the token", 401))
        return written

    def _download_once(
        self,
        target: str,
        token: str | None,
        out: "BinaryIO",
        offset: int,
        progress: Callable[[int], object] | None,
    ) -> int | None:
        """Bytes written, or None if refused as unauthorized (nothing written then)."""
        import http.client

        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        conn = self._connection(self._timeout_s)
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
            if response.status == 401:
                response.read()
                return None
            if response.status >= 400:
                raise ApiError(response.status, _detail(response.read(), response.status))
            if offset and response.status != 206:
                raise ApiError(response.status, f"asked from byte {offset}, sent the whole")
            written = 0
            while chunk := response.read(1 << 16):
                out.write(chunk)
                written += len(chunk)
                if progress is not None:
                    progress(len(chunk))
            return written
        except (OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(f"the read API at {self.base_url} did not answer: {e}") from e
        finally:
            conn.close()

    def upload(
        self,
        path: str,
        params: Params | None,
        source: "BinaryIO",
        length: int,
        progress: Callable[[int], object] | None = None,
    ) -> Any:
        """``PUT path?params`` with ``length`` bytes read from ``source`` as the body; the
        JSON answer. ``progress`` is told of each chunk sent. Signs in first if it must (a
        body read from a stream cannot be sent twice). Raises ApiError or ApiUnreachable."""
        import http.client

        self.get("/v1/auth/whoami")  # a token that holds, got before the body goes
        token = self._token()
        conn = self._connection(self._timeout_s)
        try:
            conn.putrequest("PUT", self._target(path, params))
            conn.putheader("Content-Type", "application/octet-stream")
            conn.putheader("Content-Length", str(length))
            if token is not None:
                conn.putheader("Authorization", f"Bearer {token}")
            conn.endheaders()
            # Refused before the end (a quota), the server may close: its answer says why.
            with contextlib.suppress(OSError):
                self._send(conn, source, length, progress)
            response = conn.getresponse()
            status, body = response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(f"the read API at {self.base_url} did not answer: {e}") from e
        finally:
            conn.close()
        if status >= 400:
            raise ApiError(status, self._refusal(_detail(body, status), status))
        return self._json(body)

    @staticmethod
    def _send(
        conn: "http.client.HTTPConnection",
        source: "BinaryIO",
        length: int,
        progress: Callable[[int], object] | None,
    ) -> None:
        sent = 0
        while sent < length:
            chunk = source.read(min(1 << 20, length - sent))
            if not chunk:
                raise ApiUnreachable(f"the file ended after {sent} of {length} bytes")
            conn.send(chunk)
            sent += len(chunk)
            if progress is not None:
                progress(len(chunk))

    def sign_in(self) -> str:
        """A new token for the keypair (kept for the next calls). Raises ApiError (the
        keypair is refused) or ApiUnreachable."""
        body = json.dumps({"access_key": self._key, "secret_key": self._secret}).encode()
        status, answer = self._call("POST", self._target("/v1/auth/token", None), body, None)
        if status >= 400:
            raise ApiError(status, f"signing in to the read API: {_detail(answer, status)}")
        data = self._json(answer)
        import datetime

        expires = datetime.datetime.fromisoformat(data["expires_at"]).timestamp()
        self._tokens.put(self.base_url, str(self._key), data["token"], expires)
        return str(data["token"])

    def _token(self) -> str | None:
        return self._tokens.get(self.base_url, self._key) if self._key else None

    def _may_sign_in(self) -> bool:
        if self._key and self._token():
            self._tokens.put(self.base_url, self._key, None)  # refused: forget it
        return bool(self._key and self._secret)

    def _refusal(self, detail: str, status: int) -> str:
        if status == 401 and not (self._key and self._secret):
            return (
                f"{detail} (the read API reads for a signed-in keypair: give its secret in "
                "FGPU_SECRET_KEY, or `fgpu login`)"
            )
        return detail

    def _call(
        self, method: str, target: str, body: bytes | None, token: str | None
    ) -> tuple[int, bytes]:
        import http.client

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        conn = self._connection(self._timeout_s)
        try:
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(f"the read API at {self.base_url} did not answer: {e}") from e
        finally:
            conn.close()

    def _json(self, body: bytes) -> Any:
        try:
            return json.loads(body)
        except ValueError as e:
            raise ApiUnreachable(f"the read API at {self.base_url} answered no JSON") from e

    def stream(
        self,
        after: int,
        *,
        deadline: float | None = None,
        on_break: Callable[[ApiUnreachable, int], None] | None = None,
    ) -> Iterator[StreamEvent]:
        """Every event after sequence ``after``, then each new one as it comes.

        Resumes after the last event seen whenever the connection breaks (``Last-Event-ID``),
        so nothing is missed or repeated; ``on_break(error, last)`` hears of each break
        after which it tries again. Ends at ``deadline`` (``time.monotonic()``), or never.
        Raises ApiError if the API refuses, ApiUnreachable if it cannot be reached before
        the deadline (or at all, the first time).
        """
        last = after
        failures = 0
        signed_in = False  # once per stream: a token just made and refused is final
        opened: list[bool] = []  # the stream was open once: a break later is resumed
        while deadline is None or time.monotonic() < deadline:
            try:
                for event in self._stream_once(last, deadline, opened):
                    failures = 0
                    last = event.seq
                    yield event
                return  # the deadline passed while waiting
            except ApiError as e:
                if e.status != 401 or signed_in or not self._may_sign_in():
                    raise ApiError(e.status, self._refusal(e.detail, e.status)) from e
                self.sign_in()
                signed_in = True
            except ApiUnreachable as e:
                if not opened:
                    raise  # never reached: say so rather than retry for ever
                if on_break is not None and failures == 0:
                    on_break(e, last)
                failures += 1
                pause = _BACKOFF_S[min(failures, len(_BACKOFF_S)) - 1]
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)

    def _stream_once(
        self, after: int, deadline: float | None, opened: list[bool]
    ) -> Iterator[StreamEvent]:
        import http.client

        idle = _STREAM_IDLE_S
        if deadline is not None:
            idle = max(0.05, min(idle, deadline - time.monotonic()))
        conn = self._connection(idle)
        try:
            headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
            token = self._token()
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            conn.request("GET", "/v1/events/stream", headers=headers)
            response = conn.getresponse()
            if response.status >= 400:
                raise ApiError(response.status, _detail(response.read(), response.status))
            opened.append(True)
            fields: dict[str, str] = {}
            while True:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    if conn.sock is not None:
                        conn.sock.settimeout(max(0.05, min(_STREAM_IDLE_S, left)))
                try:
                    line = response.readline()
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                    raise ApiUnreachable("the event stream went silent") from None
                if not line:
                    raise ApiUnreachable("the read API closed the event stream")
                text = line.decode().rstrip("\r\n")
                if text:
                    name, _, value = text.partition(":")
                    fields[name] = value[1:] if value.startswith(" ") else value
                    continue
                event = _event(fields, more=bool(response.chunk_left))  # a blank line ends it
                fields = {}
                if event is not None:
                    yield event
        except (OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(f"the event stream broke: {e}") from e
        finally:
            conn.close()

    def _connection(self, timeout_s: float) -> "http.client.HTTPConnection":
        import http.client

        host, port = self._url.hostname or "", self._url.port
        if self._url.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout_s)
        return http.client.HTTPConnection(host, port, timeout=timeout_s)

    def _target(self, path: str, params: Params | None) -> str:
        prefix = self._url.path.rstrip("/")
        pairs: list[tuple[str, str]] = []
        for key, value in (params or {}).items():
            if value is None:
                continue
            if isinstance(value, str | int):
                pairs.append((key, str(value)))
            else:
                pairs.extend((key, v) for v in value)
        query = urllib.parse.urlencode(pairs)
        return f"{prefix}{path}" + (f"?{query}" if query else "")


def _event(fields: dict[str, str], *, more: bool) -> StreamEvent | None:
    """The event of one SSE message; None for a message without data (a retry hint)."""
    data, seq = fields.get("data"), fields.get("id")
    if data is None or seq is None or not seq.isdigit():
        return None
    return StreamEvent(int(seq), json.loads(data), more)


def _detail(body: bytes, status: int) -> str:
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else f"HTTP {status}"
