"""Shared fixtures: a real NATS server per test session, a fresh stream per test."""

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog, connect
from tests.support import stream_origins
from tests.support.leak_hunt import leak_hunt  # noqa: F401 (an autouse fixture, off by default)
from tests.support.nats_env import Cert, make_cert

stream_origins.on()  # an asyncio connection left open says where it was made


@pytest.fixture(scope="session", autouse=True)
def fgpu_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A home of the run's own for what commands keep (credentials, the API's tokens):
    never the user's ``~/.fgpu``."""
    before = os.environ.get("FGPU_HOME")
    os.environ["FGPU_HOME"] = str(tmp_path_factory.mktemp("fgpu-home"))
    yield
    if before is None:
        os.environ.pop("FGPU_HOME", None)
    else:
        os.environ["FGPU_HOME"] = before


@pytest.fixture(scope="session", autouse=True)
def piped_width() -> Iterator[None]:
    """The CLI's piped output at its own width (``out()``: 160 columns, so ids stay whole),
    here and in the commands tests start: pytest-xdist gives its workers COLUMNS=80 and
    LINES=24, and a shell may export them too."""
    patch = pytest.MonkeyPatch()
    patch.delenv("COLUMNS", raising=False)
    patch.delenv("LINES", raising=False)
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def same_umask() -> Iterator[None]:
    """Each test starts with the run's umask: a daemon's command run in the test's process
    (``fgpu up``, ``fgpu api``, ``fgpu agent``) makes its process private for good, and
    later tests' files would be their owner's alone (a container of another uid could
    not read them)."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """One real nats-server -js on a free loopback port for the whole run, with no
    stream: a test that needs one makes it (``fresh_stream``), as an administrator does."""
    with nats_server.nats_server() as server:
        yield server.url


@pytest.fixture
def server() -> Iterator[nats_server.NatsServer]:
    """A nats-server of the test's own: one it may stop."""
    with nats_server.nats_server() as s:
        yield s


@pytest.fixture
async def log() -> AsyncIterator[JetStreamLog]:
    """A connection to an empty stream on a server of its own.

    A server per test, not a stream deleted and created again: on nats-server 2.15 a file
    stream recreated at once has been seen to bring back the deleted messages.
    """
    with nats_server.nats_server() as server:
        events = await connect(server.url)
        await events.create_or_update_stream()
        yield events
        await events.close()


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """A self-signed certificate for 127.0.0.1, made once a run."""
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
