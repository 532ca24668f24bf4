"""Requests have one outcome: a request sent again with its request id is stored once,
never twice. Its ids come from the request id, keyed with the requester's secret
(``services.domain.request_ids``); the intake takes a message once by its first event's
id (its ``Nats-Msg-Id``), and the log keeps each event once. The CLI says a refusal as
one, and an unknown outcome with the request id to send again."""

from contextlib import AsyncExitStack

import anyio
import pytest

from events import AdminRequested, CreateDomain, SessionDestroyRequested, SessionRequested, Slots
from events import subjects as subj
from services.adapters.memory_log import MemoryLog
from services.adapters.nats_connection import nats_connection
from services.adapters.system_clock import SystemClock
from services.adapters.virtual_clock import VirtualClock
from services.client import Client
from services.domain.access.permissions import inbox
from services.domain.request_ids import RequestIds, request_id_problem
from services.ports import OutcomeUnknown, RequestsRefused
from tests.support.tenancy_env import secured_cluster, start_actors

pytestmark = pytest.mark.anyio
SMALL = Slots(cpu=100, mem=1 << 30, fgpu=25)


def test_ids_are_made_from_the_request_id_and_keyed_with_the_secret() -> None:
    mine = RequestIds("AKana", "job-1", "secret")
    assert mine.session(0) == RequestIds("AKana", "job-1", "secret").session(0)
    assert mine.session(0) != mine.session(1)
    assert mine.event("0") != mine.event("1")
    # Another key, or someone without the secret, cannot make them.
    assert RequestIds("AKbob", "job-1", "secret").session(0) != mine.session(0)
    assert RequestIds("AKana", "job-1", "guess").event("0") != mine.event("0")
    assert subj.is_token(mine.session(0)) and subj.is_token(mine.event("admin"))
    assert request_id_problem("job-1") is None
    assert request_id_problem("a b") is not None and request_id_problem("") is not None


async def test_without_tenancy_a_request_sent_again_is_stored_once() -> None:
    log = MemoryLog()
    client = Client(log, VirtualClock(), "AKana", secret="s")
    first = await client.create(image="fgpu/busybox:latest", slots=SMALL, count=3, request_id="r1")
    again = await client.create(image="fgpu/busybox:latest", slots=SMALL, count=3, request_id="r1")
    other = await client.create(image="fgpu/busybox:latest", slots=SMALL, count=3)
    assert again == first and not set(other) & set(first)
    stored = [r.event async for batch in log.read(0) for r in batch]
    assert len([e for e in stored if isinstance(e, SessionRequested)]) == 6


async def test_with_tenancy_a_request_sent_again_is_taken_and_stored_once() -> None:
    """Through the intake, as the CLI sends: the same create of three, destroy and
    administrator's request, each sent twice with its request id, are each one message
    on the intake stream and one request on the log."""
    async with secured_cluster(services=("intake",)) as c, AsyncExitStack() as stack:
        me, secret = c.root.access_key, c.root.secret
        options = {"user": me, "password": secret, "inbox_prefix": inbox(me)}
        async with nats_connection(c.url, name="ana", **options) as conn:
            client = Client(conn.log, SystemClock(), me, sender=conn.sender(me), secret=secret)

            async def send_all() -> list[str]:
                sessions = await client.create(
                    image="fgpu/busybox:latest", slots=SMALL, count=3, request_id="c1"
                )
                await client.destroy(sessions[0], request_id="d1")
                await client.admin(CreateDomain(domain="lab"), request_id="a1")
                return sessions

            sessions = await send_all()
            assert await send_all() == sessions
            # Nothing has read them yet: the stream took each message once.
            info = await c.setup._api("intake info", f"STREAM.INFO.{subj.INTAKE_STREAM}")
            assert info["state"]["messages"] == 3
            after = await c.setup.last_seq()
            await start_actors(c, stack)  # the intake writes them
            with anyio.fail_after(30):
                await Client(c.setup, SystemClock(), me).wait_until(
                    lambda s: sessions[-1] in s.sessions and s.admin_requests
                )
            await send_all()  # once more, after they were written
            marker = await client.create(image="fgpu/busybox:latest", slots=SMALL)
            with anyio.fail_after(30):
                await Client(c.setup, SystemClock(), me).wait_until(
                    lambda s: marker[0] in s.sessions
                )
        stored = [r.event async for batch in c.setup.read(after) for r in batch]
        assert [e.session_id for e in stored if isinstance(e, SessionRequested)] == [
            *sessions,
            *marker,
        ]
        assert len([e for e in stored if isinstance(e, SessionDestroyRequested)]) == 1
        assert len([e for e in stored if isinstance(e, AdminRequested)]) == 1


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            OutcomeUnknown("hand requests to the intake: no answer within 10 s"),
            "error: outcome unknown (hand requests to the intake: no answer within 10 s): "
            "retry with --request-id r1",
        ),
        (RequestsRefused("the intake is full"), "error: refused: the intake is full"),
    ],
)
def test_the_cli_says_a_refusal_or_an_unknown_outcome_in_one_line(
    error: Exception, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from services.cli.options import Settings
    from services.cli.outcome import sent

    async def send() -> None:
        raise error

    with pytest.raises(SystemExit) as exited:
        sent(Settings(nats=None, api=None, access_key="AKana"), send, "--request-id r1")
    assert exited.value.code == 1
    assert capsys.readouterr().err == said + "\n"


def test_a_bad_request_id_is_refused_before_anything_is_sent() -> None:
    import subprocess
    import sys
    from pathlib import Path

    fgpu = str(Path(sys.executable).parent / "fgpu")
    argv = [fgpu, "--nats", "nats://127.0.0.1:1", "session", "create", "--image", "busybox"]
    p = subprocess.run(
        [*argv, "--fgpu", "0.5", "--request-id", "a b", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == "error: --request-id 'a b': 1-64 letters, digits, '-' or '_'"
    assert p.stdout == ""
