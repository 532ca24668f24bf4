"""A file sent from a descriptor already open: what was checked is what is sent, never a
path opened again. One byte range (``Range: bytes=N-``, ``N-M``, ``-K``) is answered
206; several, or a malformed header, get the whole file (a server may ignore Range); a
range past the end gets 416.

A file is sent as an attachment (``Content-Disposition``, its name encoded), typed
``application/octet-stream`` with ``nosniff``, under a Content-Security-Policy that
sandboxes it and lets it load nothing: a folder's file is its writer's, so an HTML file
opened by a link of the web UI is saved, never run as a page of the UI's origin.
"""

import os
import urllib.parse
from collections.abc import AsyncIterator
from email.utils import formatdate

import anyio
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from services.ports import OpenFile

__all__ = ["inert", "send_file"]

_CHUNK = 256 * 1024


class _Descriptor(StreamingResponse):
    """Streams ``fd`` and closes it when done, however it ends (a client gone too)."""

    def __init__(self, fd: int, start: int, end: int, status: int, headers: dict[str, str]):
        super().__init__(
            _chunks(fd, start, end),
            status_code=status,
            headers=headers,
            media_type="application/octet-stream",
        )
        self.fd = fd

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            os.close(self.fd)


async def _chunks(fd: int, start: int, end: int) -> AsyncIterator[bytes]:
    """Bytes ``start`` to ``end`` of ``fd``; fewer if the file shrank meanwhile."""
    at = start
    while at < end:
        chunk = await anyio.to_thread.run_sync(os.pread, fd, min(_CHUNK, end - at), at)
        if not chunk:
            return
        at += len(chunk)
        yield chunk


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range ``header`` asks for, as [start, end); None: the whole file. Raises
    ValueError for a range that starts past the end."""
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, sep, last = header[len("bytes=") :].strip().partition("-")
    if not sep or not (first.isdigit() or last.isdigit()):
        return None
    if not first:  # the last ``last`` bytes
        return (max(size - int(last), 0), size) if int(last) else None
    start = int(first)
    end = min(int(last) + 1, size) if last.isdigit() else size
    if last.isdigit() and int(last) < start:
        return None
    if start >= size:
        raise ValueError(start)
    return start, end


def inert(name: str) -> dict[str, str]:
    """The headers that make file ``name`` a download that no browser renders or runs."""
    quoted = urllib.parse.quote(name[-255:], safe="")
    return {
        "content-disposition": f"attachment; filename*=UTF-8''{quoted}",
        "x-content-type-options": "nosniff",
        "content-security-policy": "default-src 'none'; sandbox",
    }


def send_file(opened: OpenFile, range_header: str | None, name: str) -> Response:
    """The response that sends ``opened``, called ``name`` (and closes its descriptor)."""
    headers = {
        "accept-ranges": "bytes",
        "last-modified": formatdate(opened.mtime, usegmt=True),
        **inert(name),
    }
    try:
        wanted = _range(range_header, opened.size)
    except ValueError:
        os.close(opened.fd)
        return Response(status_code=416, headers={"content-range": f"bytes */{opened.size}"})
    if wanted is None:
        headers["content-length"] = str(opened.size)
        return _Descriptor(opened.fd, 0, opened.size, 200, headers)
    start, end = wanted
    headers["content-length"] = str(end - start)
    headers["content-range"] = f"bytes {start}-{end - 1}/{opened.size}"
    return _Descriptor(opened.fd, start, end, 206, headers)
