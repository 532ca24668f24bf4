"""The CLI's client of the read API: its event stream resumes where a broken connection
left it, with no gap and no repeat; errors come out as one of its two kinds."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from services.cli.api_client import ApiError, ApiUnreachable, ReadApi


def _message(seq: int) -> bytes:
    data = json.dumps({"seq": seq, "type": "session.requested.v1", "session_id": f"s{seq}"})
    return f"id: {seq}\nevent: session.requested.v1\ndata: {data}\n\n".encode()


class _Scripted(BaseHTTPRequestHandler):
    """Each connection gets the next script: the events after the client's Last-Event-ID,
    up to the script's end, then the connection is cut (or kept, for the last)."""

    cuts = (3, 5)  # first connection: up to 3, then cut; second: up to 5, kept open
    seen: list[str | None]
    served = 0
    done = threading.Event()

    def do_GET(self) -> None:
        cls = type(self)
        if self.path.startswith("/v1/missing"):
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"detail": "no session \'x\'"}')
            return
        cls.seen.append(self.headers.get("Last-Event-ID"))
        after = int(self.headers.get("Last-Event-ID") or 0)
        end = cls.cuts[min(cls.served, len(cls.cuts) - 1)]
        cls.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"retry: 1000\n\n: a comment\n\n")
        for seq in range(after + 1, end + 1):
            self.wfile.write(_message(seq))
        self.wfile.flush()
        if cls.served == len(cls.cuts):
            cls.done.wait(30)  # held open: the client stops reading by itself

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _server() -> Iterator[tuple[str, type[_Scripted]]]:
    handler = type("Handler", (_Scripted,), {"seen": [], "served": 0, "done": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.done.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_stream_resumes_after_the_last_event_seen() -> None:
    with _server() as (url, handler):
        got = []
        for e in ReadApi(url).stream(0):
            got.append(e.seq)
            assert e.event["session_id"] == f"s{e.seq}"
            if e.seq == 5:
                break
    assert got == [1, 2, 3, 4, 5]  # nothing missed, nothing twice
    assert handler.seen == ["0", "3"]  # the second connection asked for what came after 3


def test_a_stream_that_never_opens_is_unreachable() -> None:
    with pytest.raises(ApiUnreachable):
        next(ReadApi("http://127.0.0.1:9").stream(0))


def test_an_error_answer_is_an_api_error_with_its_detail() -> None:
    with _server() as (url, _), pytest.raises(ApiError) as caught:
        ReadApi(url).get("/v1/missing")
    assert caught.value.status == 404 and caught.value.detail == "no session 'x'"


@pytest.mark.parametrize("bad", ["127.0.0.1:8080", "ftp://host", "http://"])
def test_a_bad_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        ReadApi(bad)
