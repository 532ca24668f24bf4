"""Whether a process of ours listens on a loopback port yet: one TCP connection tried."""

import anyio

__all__ = ["accepts"]


async def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` takes a connection now (closed at once). A refused one
    answers at once on loopback; the caller bounds how long it asks again."""
    try:
        stream = await anyio.connect_tcp("127.0.0.1", port)
    except OSError:
        return False
    await stream.aclose()
    return True
