"""A tiny model server: what an inference replica runs in the demo, the tests and the
serving benchmark. Python's standard library only, so it runs as it is in the
``fgpu/model-server`` image (``scripts/docker-up --python`` builds it on
``fgpu/python:bookworm``) or beside this repository (``python -m services.model_server``).

- ``POST /predict`` ``{"inputs": [x, ...]}`` (or ``GET /predict?x=1,2``): a logistic
  model's answer, computed, as JSON ``{"model", "replica", "score", "label"}``.
- ``GET /generate?prompt=...&tokens=N&delay_ms=D``: N tokens as server-sent events, one
  every D ms, then ``data: [DONE]``.
- ``GET /health``: 200 once warmed up (``WARMUP_S`` after the start), 503 before, and
  503 while the file ``$UNHEALTHY_FILE`` (default ``/tmp/unhealthy``) exists.

Listens on ``$HOST:$PORT`` (default 0.0.0.0:8080: a container's own address);
``MODEL_NAME`` names it in its answers.
"""

import json
import math
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["predict", "serve"]

WEIGHTS = (0.8, -0.4, 0.25, 1.5)
BIAS = -0.1
VOCABULARY = ("fractional", "gpus", "serve", "many", "small", "models", "at", "once")
STARTED = time.monotonic()


def predict(inputs: list[float]) -> dict[str, object]:
    """A logistic regression over the first inputs (missing ones count as 0)."""
    z = BIAS + sum(w * x for w, x in zip(WEIGHTS, inputs, strict=False))
    score = 1 / (1 + math.exp(-z))
    return {"score": round(score, 6), "label": int(score >= 0.5)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An answer is one write, head and body: ``handle_one_request`` flushes the buffer
    # after each request (a stream flushes each chunk itself). Unbuffered, the head and
    # the body were two segments, each one more wakeup of the proxy and of the client.
    wbufsize = -1
    # A stream's chunks are many writes: with Nagle's algorithm each would wait for the
    # client's delayed ACK of the last (40 ms).
    disable_nagle_algorithm = True
    model = os.environ.get("MODEL_NAME", "tiny-logistic")
    replica = socket.gethostname()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/health":
            self._health()
        elif url.path == "/predict":
            raw = query.get("x", [""])[0]
            self._predict([float(v) for v in raw.split(",") if v])
        elif url.path == "/generate":
            self._generate(query)
        else:
            self._json(404, {"error": f"no route {url.path}"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if urlsplit(self.path).path != "/predict":
            self._json(404, {"error": "POST /predict only"})
            return
        try:
            inputs = [float(v) for v in json.loads(body or b"{}").get("inputs", [])]
        except (ValueError, TypeError, AttributeError) as e:
            self._json(400, {"error": f"bad inputs: {e}"})
            return
        self._predict(inputs)

    def _health(self) -> None:
        warm = time.monotonic() - STARTED >= float(os.environ.get("WARMUP_S", "0"))
        failing = os.path.exists(os.environ.get("UNHEALTHY_FILE", "/tmp/unhealthy"))
        ok = warm and not failing
        self._json(200 if ok else 503, {"status": "ok" if ok else "unavailable"})

    def _predict(self, inputs: list[float]) -> None:
        self._json(200, {"model": self.model, "replica": self.replica, **predict(inputs)})

    def _generate(self, query: dict[str, list[str]]) -> None:
        tokens = min(int(query.get("tokens", ["8"])[0]), 4096)
        delay = int(query.get("delay_ms", ["0"])[0]) / 1000
        seed = sum(query.get("prompt", [""])[0].encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(tokens):
            word = VOCABULARY[(seed + i) % len(VOCABULARY)]
            self._chunk(f"data: {json.dumps({'token': word, 'index': i})}\n\n".encode())
            time.sleep(delay)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _json(self, code: int, said: dict[str, object]) -> None:
        body = json.dumps(said).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line a request would cost more than the answer


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # not 5: a burst of new connections must not wait for SYN retries

    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone mid-answer (a proxy's check closing early) is no error of ours."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def serve(host: str, port: int) -> None:
    Server((host, port), Handler).serve_forever()


if __name__ == "__main__":
    serve(os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8080")))
