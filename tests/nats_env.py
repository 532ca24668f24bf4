"""Helpers for tests on a real nats-server: the administrator's stream step, TLS, a
configuration of the test's own."""

import contextlib
import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats.js.errors

from events import subjects as subj
from services.adapters.jetstream import JetStreamLog, connect

__all__ = ["Cert", "create_stream", "fresh_stream", "make_cert", "server_conf", "store_raw"]

_FGPU_CONF = Path(__file__).resolve().parents[1] / "nats.conf"


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
    (``nats.conf``, included): the last ``-c`` given is the one the server reads."""
    conf = where / "nats-test.conf"
    # nats-server resolves an include from the including file's folder.
    included = os.path.relpath(_FGPU_CONF, where)
    conf.write_text(f'include "{included}"\n{text}\n')
    return ["-c", str(conf)]
