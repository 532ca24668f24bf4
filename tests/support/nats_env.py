"""Helpers for tests on a real nats-server: the administrator's stream step, TLS, a
configuration of the test's own, a server the test stops."""

import contextlib
import os
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats.js.errors
import pytest
from nats.aio.client import Client

from events import subjects as subj
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect

__all__ = [
    "Cert",
    "Stoppable",
    "Trigger",
    "create_stream",
    "fresh_stream",
    "make_cert",
    "server_conf",
    "store_raw",
]

_DEADLINE_S = 10.0  # a wait for the client to see what the test did to its server
# Which message, given its subject and headers, the server stops at (Stoppable).
Trigger = Callable[[str, dict[str, str]], bool]

_FGPU_CONF = Path(__file__).resolve().parents[2] / "nats-base.conf"


async def fresh_stream(events: JetStreamLog) -> None:
    """Delete the stream if there is one, and create it again, empty."""
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await events.js.delete_stream(subj.STREAM)
    await events.create_or_update_stream()


async def store_raw(events: JetStreamLog, messages: list[tuple[str, bytes]]) -> None:
    """Put ``messages`` (subject, payload) on the stream as a client would (no encoding,
    no dedupe id), and wait until all are stored."""
    end = await events.last_seq() + len(messages)
    for subject, payload in messages:
        await events.nc.publish(subject, payload)
    await events.nc.flush()
    with anyio.fail_after(10):
        while await events.last_seq() < end:  # noqa: ASYNC110
            await anyio.sleep(0.01)


def create_stream(url: str) -> None:
    """The administrator's step, outside any event loop: for a server that ``fgpu``
    processes use, which never create the stream themselves."""

    async def create() -> None:
        events = await connect(url, name="test-admin")
        try:
            await events.create_or_update_stream()
        finally:
            await events.close()

    anyio.run(create)


@dataclass(frozen=True)
class Cert:
    """A self-signed certificate for 127.0.0.1, and its key."""

    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        """A client's context that trusts this certificate alone."""
        return ssl.create_default_context(cafile=str(self.cert))

    def server_args(self) -> list[str]:
        """nats-server's options to require TLS of every client with this certificate."""
        return ["--tls", "--tlscert", str(self.cert), "--tlskey", str(self.key)]


def make_cert(where: Path) -> Cert:
    """A certificate made by openssl in ``where``: nothing is downloaded."""
    cert = Cert(where / "cert.pem", where / "key.pem")
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt"]
    command += ["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1"]
    command += ["-keyout", str(cert.key), "-out", str(cert.cert)]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert


def server_conf(where: Path, text: str) -> list[str]:
    """nats-server's options to read ``text`` as its configuration, on top of fgpu's own
    (``nats-base.conf``, included): the last ``-c`` given is the one the server reads."""
    conf = where / "nats-test.conf"
    # nats-server resolves an include from the including file's folder.
    included = os.path.relpath(_FGPU_CONF, where)
    conf.write_text(f'include "{included}"\n{text}\n')
    return ["-c", str(conf)]


@dataclass
class Stoppable:
    """A server of a test's own and the client on it, the server for the test to stop."""

    server: nats_server.NatsServer
    nc: Client

    async def stop(self) -> None:
        await anyio.to_thread.run_sync(self.server.stop)

    async def gone(self) -> None:
        """Stopped, and the client has seen it go."""
        await self.stop()
        await self.until(lambda: not self.nc.is_connected)

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()``, with a deadline."""
        with anyio.fail_after(_DEADLINE_S):
            while not done():  # noqa: ASYNC110
                await anyio.sleep(0.01)

    def stop_on_publish(self, monkeypatch: pytest.MonkeyPatch, when: Trigger) -> None:
        """Stop the server as the client publishes the first message ``when`` picks. The
        stop blocks the event loop until the server has exited, so the client learns of it
        only once the call waits for an answer: it fails in flight."""
        publish = self.nc.publish

        async def stopping(
            subject: str,
            payload: bytes = b"",
            reply: str = "",
            headers: dict[str, str] | None = None,
        ) -> None:
            if self.server.process.poll() is None and when(subject, headers or {}):
                self.server.stop()
            await publish(subject, payload, reply=reply, headers=headers)

        monkeypatch.setattr(self.nc, "publish", stopping)
