"""Serving replicas for the proxies' tests: Python's HTTP server on loopback, in a thread,
each one the test steers without sleeping.

- ``GET /health``: 200, or 503 once ``healthy`` is False.
- ``GET /who...``: ``{"name", "path", "authorization"}`` as JSON: who answered, the path
  it saw (query included) and the Authorization header it got, if any.
- ``POST /echo``: ``{"name", "body"}``: who answered and the body it got.
- ``GET /stream?n=N``: N server-sent events; the first at once, each next one only after
  the test calls ``release()``: a proxy that buffered would hold back even the first.
"""

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["Replica", "replicas"]

RELEASE_WITHIN_S = 30.0


@dataclass
class Replica:
    name: str
    port: int = 0
    healthy: bool = True
    seen: list[str] = field(default_factory=list)  # paths asked, /health aside
    _gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def release(self) -> None:
        """Let one held event of a stream go."""
        self._gate.release()


def _handler(replica: Replica) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200 if replica.healthy else 503, b"ok" if replica.healthy else b"no")
                return
            replica.seen.append(self.path)
            if self.path.startswith("/stream"):
                self._stream(int(parse_qs(urlsplit(self.path).query).get("n", ["3"])[0]))
                return
            said = {"name": replica.name, "path": self.path}
            said["authorization"] = self.headers.get("Authorization")
            self._send(200, json.dumps(said).encode(), "application/json")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            replica.seen.append(self.path)
            said = {"name": replica.name, "body": body.decode()}
            self._send(200, json.dumps(said).encode(), "application/json")

        def _send(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, n: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                if i and not replica._gate.acquire(timeout=RELEASE_WITHIN_S):
                    break
                event = f"data: {replica.name} {i}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def _serving(replica: Replica) -> Iterator[Replica]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(replica))
    server.daemon_threads = True
    replica.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name=f"replica-{replica.name}")
    thread.start()
    try:
        yield replica
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def replicas(*names: str) -> Iterator[list[Replica]]:
    """One running replica per name, stopped on exit."""
    with ExitStack() as stack:
        yield [stack.enter_context(_serving(Replica(name))) for name in names]
