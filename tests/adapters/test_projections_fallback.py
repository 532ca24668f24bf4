"""The bulk reader is a fast path only: where it cannot serve, catch-up reads in order.

Real servers: one that requires TLS (a certificate made at test time), whether the client
was told (an SSLContext) or found out (the server's INFO); ones that require a token or a
password, which the bulk reader speaks; ones that let the client in but refuse the bulk
reader (one connection at most, or no right to pull); and one behind a proxy that
rewrites the bulk reader's acks into a form it does not parse, before its first batch or
after some. In each the projector ends with every record, as one pass of the fold writes
them.
"""

import contextlib
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from structlog.testing import capture_logs

from events import AgentRegistered, GpuInfo, SessionRequested, Slots, encode, record_of
from events import subjects as subj
from projections import Projector
from projections.compare import differences
from projections.store import ProjectionStore
from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from services.domain.access.permissions import reader_names
from services.ports import BulkReadUnavailable
from tests.support.nats_env import Cert, server_conf, store_raw

pytestmark = pytest.mark.anyio

Raw = tuple[str, bytes]
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _log(n: int) -> list[Raw]:
    """An agent and ``n`` requests: what the tables show depends on every one."""
    agent = AgentRegistered(
        id="agent-a0",
        at=AT,
        actor="agent:a0",
        agent_id="a0",
        capacity=Slots(cpu=8000, mem=1 << 34, fgpu=200),
        gpus=(GpuInfo(index=0, uuid="GPU-0", model="M", mem=1 << 34, sm_count=80),),
        fgpu_per_gpu=200,
    )
    out: list[Raw] = [(subj.agent("a0"), encode(agent))]
    for k in range(n):
        request = SessionRequested(
            id=f"request-{k}",
            at=AT,
            actor="alice",
            session_id=f"s{k}",
            owner="alice",
            image="img:1",
            slots=Slots(fgpu=100),
        )
        out.append((subj.request("alice", f"s{k}"), encode(request)))
    return out


def _applied_in_one_go(path: Path, messages: list[Raw]) -> Path:
    store = ProjectionStore(path)
    store.apply([record_of(i + 1, s, p) for i, (s, p) in enumerate(messages)])
    store.close()
    return path


async def _caught_up(
    events: JetStreamLog, messages: list[Raw], tmp_path: Path, **kwargs: int
) -> list[dict[str, object]]:
    """Catch a new store up from ``events``; check that it holds what applying
    ``messages`` in one go does. The projector's warnings that it fell back."""
    store = ProjectionStore(tmp_path / "caught-up.duckdb")
    try:
        with capture_logs() as logs, anyio.fail_after(30):
            assert await Projector(events, store, **kwargs).catch_up() == len(messages)
    finally:
        store.close()
    once = _applied_in_one_go(tmp_path / "once.duckdb", messages)
    assert differences(tmp_path / "caught-up.duckdb", once) == {}
    return [e for e in logs if e["event"] == "projector.bulk_read_unavailable"]


@contextlib.asynccontextmanager
async def _log_on(url: str, **options: Any) -> AsyncIterator[JetStreamLog]:
    """A log on the server at ``url``, its stream created."""
    events = await connect(url, **options)
    try:
        await events.create_or_update_stream()
        yield events
    finally:
        await events.close()


# ---- TLS ----------------------------------------------------------------------------------


@pytest.mark.parametrize("told", [True, False], ids=["context-given", "found-in-info"])
async def test_a_server_that_requires_tls_is_caught_up_in_order(
    tls_cert: Cert, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, told: bool
) -> None:
    """Told (an SSLContext), the bulk reader refuses before it connects; not told (nats-py
    upgrades with the default context, here trusting the certificate through
    SSL_CERT_FILE), it learns it from the server's INFO. Either way the catch-up warns
    once and reads everything in order."""
    options: dict[str, object] = {"tls": tls_cert.client_context()} if told else {}
    if not told:
        monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert.cert))
    messages = _log(30)
    with nats_server.nats_server(args=tls_cert.server_args()) as server:
        async with _log_on(server.url, **options) as events:
            await store_raw(events, messages)
            with pytest.raises(BulkReadUnavailable, match="TLS"):
                async for _ in events.read_raw(0):
                    pass
            fallbacks = await _caught_up(events, messages, tmp_path, batch=7)
    assert len(fallbacks) == 1
    assert "TLS" in str(fallbacks[0]["reason"]) and fallbacks[0]["after"] == 0


# ---- credentials the bulk reader speaks -------------------------------------------------

SECRET = "s3cret-token"
TOKEN = ["--auth", SECRET]
PASSWORD = ["--user", "ann", "--pass", "pw"]


@pytest.mark.parametrize(
    ("server_args", "url", "options"),
    [
        (TOKEN, "nats://127.0.0.1:{port}", {"token": SECRET}),
        (TOKEN, f"nats://{SECRET}@127.0.0.1:{{port}}", {}),
        (PASSWORD, "nats://127.0.0.1:{port}", {"user": "ann", "password": "pw"}),
        (PASSWORD, "nats://ann:pw@127.0.0.1:{port}", {}),
    ],
    ids=["token-option", "token-in-url", "password-options", "password-in-url"],
)
async def test_a_token_or_a_password_is_spoken_by_the_bulk_reader(
    tmp_path: Path, server_args: list[str], url: str, options: dict[str, str]
) -> None:
    """Given as options or in the URL, as nats-py takes them: the bulk reader reads all,
    and a catch-up never falls back."""
    messages = _log(30)
    with nats_server.nats_server(args=server_args) as server:
        async with _log_on(url.format(port=server.port), **options) as events:
            await store_raw(events, messages)
            got = [seq async for raw in events.read_raw(0, batch=7) for seq in raw.seqs]
            assert got == list(range(1, len(messages) + 1))
            assert await _caught_up(events, messages, tmp_path, batch=7) == []


# ---- a server that lets the client in and refuses the bulk reader -------------------------

# The client's connection reads in order (pulls from a consumer of its own, answered on an
# inbox of nats-py's naming); the bulk reader needs a second connection, and hears its
# consumer on an inbox named after the consumer (one of ann's reader names). Both connect
# as ann, which a server without users takes as anyone.
_BULK_INBOXES = json.dumps([f"_INBOX.{name}" for name in reader_names("ann")])
REFUSING = {
    "one-connection": ("max_connections: 1", "maximum connections exceeded"),
    "no-bulk-inbox": (
        f"""authorization {{
          users = [{{user: ann, password: pw,
                    permissions: {{subscribe: {{deny: {_BULK_INBOXES}}}}}}}]
        }}""",
        "Permissions Violation for Subscription to",
    ),
}


@pytest.mark.parametrize("refusing", REFUSING)
async def test_a_server_that_refuses_the_bulk_reader_is_caught_up_in_order(
    tmp_path: Path, refusing: str
) -> None:
    """Refused before its first message, the bulk reader is unavailable at once, with the
    server's words: the catch-up warns once and reads everything in order, where
    retrying would be refused for ever."""
    conf, said = REFUSING[refusing]
    messages = _log(30)
    args = server_conf(tmp_path, conf)
    with nats_server.nats_server(args=args) as server:
        async with _log_on(f"nats://ann:pw@127.0.0.1:{server.port}") as events:
            await store_raw(events, messages)
            with anyio.fail_after(30), pytest.raises(BulkReadUnavailable, match=said):
                async for _ in events.read_raw(0):
                    pass
            fallbacks = await _caught_up(events, messages, tmp_path, batch=7)
    assert len(fallbacks) == 1
    assert said in str(fallbacks[0]["reason"]) and fallbacks[0]["after"] == 0


# ---- acks of a form the bulk reader does not parse -----------------------------------------

# An anonymous connection's reads go through consumers read-<hex> (the in-order reads that
# follow a fallback parse either form); the v2 form leads with a domain and an account hash
# and ends with a token.
_RAW_ACK = re.compile(rb"\$JS\.ACK\.FGPU\.(read-[0-9a-f]+)\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.(\d+)")


def _v2(m: re.Match[bytes]) -> bytes:
    return b"$JS.ACK.hub.ACCOUNTHASH.FGPU.%s.%s.%s.%s.%s.%s.t0k3n" % m.groups()


@contextlib.asynccontextmanager
async def _v2_acks_after(target: int, after: int, *, release: anyio.Event) -> AsyncIterator[int]:
    """A proxy to the server on port ``target`` (its own port, yielded) that rewrites the
    acks of the bulk reader's messages past stream sequence ``after`` into the v2 form,
    holding the first of them until ``release``: what came before is handled by then."""

    def rewrite(lines: bytes) -> tuple[bytes, bytes]:
        """``lines`` up to the first message to rewrite, and the rest rewritten."""
        first = next((m for m in _RAW_ACK.finditer(lines) if int(m.group(3)) > after), None)
        if first is None:
            return lines, b""
        cut = lines.rfind(b"\n", 0, first.start()) + 1
        return lines[:cut], _RAW_ACK.sub(_v2, lines[cut:])

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", target) as server:

            async def up() -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    async for chunk in client:
                        await server.send(chunk)
                tg.cancel_scope.cancel()

            async def down() -> None:
                pending = b""
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    async for chunk in server:
                        pending += chunk
                        whole = pending.rfind(b"\n") + 1  # a message's line is never cut
                        plain, rewritten = rewrite(pending[:whole])
                        pending = pending[whole:]
                        await client.send(plain)
                        if rewritten:
                            await release.wait()
                            await client.send(rewritten)
                tg.cancel_scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(up)
                tg.start_soon(down)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as serving:
        serving.start_soon(listener.serve, serve)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        serving.cancel_scope.cancel()


@pytest.mark.parametrize("after", [0, 14], ids=["before-the-first-batch", "after-two-batches"])
async def test_acks_of_an_unknown_form_make_the_catch_up_read_on_in_order(
    tmp_path: Path, after: int
) -> None:
    """The bulk reader meets its consumer's ack in a form it does not parse: the batches
    it handed out before stay written, and the catch-up reads on in order from there."""
    messages = _log(40)
    release = anyio.Event()
    store = ProjectionStore(tmp_path / "caught-up.duckdb")
    with nats_server.nats_server() as server:
        async with (
            _v2_acks_after(server.port, after, release=release) as port,
            _log_on(f"nats://127.0.0.1:{port}") as events,
        ):
            await store_raw(events, messages)
            projector = Projector(events, store, batch=7)

            async def release_once_written() -> None:
                await projector.wait_beyond(after - 1)
                release.set()

            with capture_logs() as logs, anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(release_once_written)
                    assert await projector.catch_up() == len(messages)
    store.close()
    fallbacks = [e for e in logs if e["event"] == "projector.bulk_read_unavailable"]
    assert len(fallbacks) == 1
    assert "does not parse" in str(fallbacks[0]["reason"]) and fallbacks[0]["after"] == after
    once = _applied_in_one_go(tmp_path / "once.duckdb", messages)
    assert differences(tmp_path / "caught-up.duckdb", once) == {}
