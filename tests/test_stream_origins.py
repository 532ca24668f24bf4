"""An asyncio connection left open says where it was made (``tests/support/stream_origins``,
on in every run): the warning names this file and the function that made it."""

import asyncio
import gc
import warnings

import pytest

from tests.support import stream_origins


async def _left_open(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    del writer  # never closed


async def _closed(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()


def _warnings_of(make: str) -> list[str]:
    """The ResourceWarnings a collection brings after ``make`` ran against a local server
    (the loop still runs when the writer is collected)."""

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        # Recorded from the start: a writer nothing refers to is collected at once.
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            await globals()[make](port)
            gc.collect()
        server.close()
        await server.wait_closed()
        found.extend(str(w.message) for w in seen if issubclass(w.category, ResourceWarning))

    found: list[str] = []
    asyncio.run(main())
    return found


def test_a_writer_left_open_says_where_it_was_made() -> None:
    stream_origins.on()
    [said] = _warnings_of("_left_open")
    assert said.startswith("unclosed <StreamWriter") and "(closed now), made at:" in said
    assert "test_stream_origins.py" in said and "in _left_open" in said


def test_a_writer_closed_says_nothing() -> None:
    stream_origins.on()
    assert _warnings_of("_closed") == []


@pytest.fixture(autouse=True)
def _back_on() -> object:
    yield None
    stream_origins.on()  # as conftest left it
