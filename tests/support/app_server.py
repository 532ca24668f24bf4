"""An app for a session to serve, as a hostile one would: a page with a relative
stylesheet and a script, a POST that answers what it got, a WebSocket echo, cookies set
(one of fgpu's names among them), and every request's headers kept and shown at
``/headers``. Python's standard library only, in the ``fgpu/python:bookworm`` image
(``scripts/docker-up --python``), labelled as declaring it (``APP_IMAGE``)."""

import os
import subprocess

from tests.support.cli_stack import docker
from tests.support.docker_env import require_docker

__all__ = ["APP_IMAGE", "SERVER", "app_image"]

APP_IMAGE = "fgpu/python-web:test"  # fgpu/python, declaring fgpu.service.web=http:8080

_PAGE = b"""<!doctype html><html><head><title>an app</title>
<link rel="stylesheet" href="style.css"></head>
<body><h1 id="hello">hello from the app</h1><script src="app.js"></script></body></html>"""

# Each result shown as text, for the browser test to read.
_SCRIPT = b"""const out = (id, text) => { const p = document.createElement("p");
  p.id = id; p.textContent = text; document.body.append(p); };
fetch("style.css").then(r => r.text()).then(t => out("css", t));
fetch("echo", { method: "POST", body: "ping-42" }).then(r => r.text()).then(t => out("post", t));
const ws = new WebSocket(location.href.replace(/^http/, "ws") + "ws");
ws.onopen = () => ws.send("hi-42");
ws.onmessage = (m) => { out("ws", m.data); ws.close(); };"""

SERVER = """
import base64, hashlib, http.server, json, struct
PAGE, SCRIPT, SEEN = @PAGE@, @SCRIPT@, []
class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def send(self, code, body, kind, *extra):
        self.send_response(code)
        for k, v in (("Content-Type", kind), ("Content-Length", str(len(body))), *extra):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        SEEN.append({"path": self.path, "headers": self.headers.items()})
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.echo()
        if self.path == "/headers":
            return self.send(200, json.dumps(SEEN).encode(), "application/json")
        if self.path == "/style.css":
            return self.send(200, b"h1 { color: teal }", "text/css")
        if self.path == "/app.js":
            return self.send(200, SCRIPT, "text/javascript")
        if self.path == "/":
            planted = ("Set-Cookie", "fgpu_ui=planted; Path=/")
            return self.send(200, PAGE, "text/html", planted, ("Set-Cookie", "own=1; Path=/"))
        self.send(404, b"no", "text/plain")
    def do_POST(self):
        SEEN.append({"path": self.path, "headers": self.headers.items()})
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send(200, b"got:" + body, "text/plain")
    def echo(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
        self.send_response(101)
        for k, v in (("Upgrade", "websocket"), ("Connection", "Upgrade")):
            self.send_header(k, v)
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while len(head := self.rfile.read(2)) == 2:
            op, n = head[0] & 15, head[1] & 127
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i & 3] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                self.wfile.write(b"\\x88\\x00")
                return
            out = b"echo:" + data
            self.wfile.write(bytes([0x80 | op, len(out)]) + out)
            self.wfile.flush()
        self.close_connection = True
http.server.ThreadingHTTPServer(("127.0.0.1", 8080), App).serve_forever()
""".replace("@PAGE@", repr(_PAGE)).replace("@SCRIPT@", repr(_SCRIPT))


def app_image() -> str:
    """``APP_IMAGE``, built from fgpu/python:bookworm with the service label if it is
    not there yet."""
    require_docker()
    dockerfile = "FROM fgpu/python:bookworm\nLABEL fgpu.service.web=http:8080\n"
    build = ["docker", "build", "-q", "-t", APP_IMAGE, "-"]
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the legacy builder needs no network
    subprocess.run(build, input=dockerfile, text=True, env=env, check=True, timeout=120)
    assert "http:8080" in docker("image", "inspect", APP_IMAGE, "--format", "{{.Config.Labels}}")
    return APP_IMAGE
