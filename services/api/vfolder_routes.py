"""The storage service: virtual folders' files in and out, with the read API's tokens.

The folders themselves (who owns, who may read or write, what is in the trash) are the
tenancy's, changed only by events; these routes move bytes, and say what a folder holds:

- ``GET /v1/vfolders``: the folders the viewer may use or manage (``?trash=true``: those
  in the trash it manages);
- ``GET /v1/vfolders/{id}/files?path=DIR`` and ``GET .../stat?path=FILE``;
- ``PUT /v1/vfolders/{id}/files/{path}?offset=N``: the body written at ``N``, which must be
  the file's size (a resumed upload) or 0 (a new file; an existing one only with
  ``replace=true``). The folder's quota is checked as bytes come: past it, the file is cut
  back to ``N`` and the answer is 413. Uploads into one folder take turns (one process).
- ``GET /v1/vfolders/{id}/files/{path}``: the file, with ``Range`` for a resumed download.

After an upload, on ``POST /v1/vfolders/{id}/scan`` and every few minutes
(``Storage.scan_all``), a folder is scanned and what changed appended (``VfolderScanned``
on ``fgpu.storage.<host>``). Files of folders purged from the trash are deleted by
``Storage.reap``, which follows the tenancy.
"""

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
import structlog
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse

from events import VfolderScanned
from events import subjects as subj
from services.api import models
from services.api.guard import Who
from services.domain.tenancy import Tenancy, User
from services.domain.vfolders import Vfolder, access_of, manages
from services.domain.visibility import Viewer
from services.ports import EventLog, FolderError, FolderStore, LogError

__all__ = ["Storage", "mount"]

log = structlog.get_logger()
PathQuery = Annotated[str, Query(max_length=4096, description="relative to the folder")]
_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": models.Problem} for code in (400, 403, 404, 409)
}


class Storage:
    """The folders under one storage root, and where their scans are appended (None: not
    appended, for a read API that may not write the log)."""

    def __init__(self, files: FolderStore, events: EventLog | None) -> None:
        self.files = files
        self.events = events
        self._turns: dict[str, anyio.Lock] = {}
        self._reaped: set[str] = set()

    def turn(self, vfolder_id: str) -> anyio.Lock:
        return self._turns.setdefault(vfolder_id, anyio.Lock())

    async def scanned(self, f: Vfolder) -> tuple[int, int]:
        """Scan ``f``, append what was found if it changed; its bytes and files."""
        total, files = await anyio.to_thread.run_sync(self.files.scan, f)
        if self.events is not None and (total, files) != (f.bytes, f.files):
            e = VfolderScanned(
                id=f"scan-{uuid.uuid4().hex}",
                at=datetime.now(UTC),
                actor=f"storage:{f.host}",
                host=f.host,
                vfolder_id=f.vfolder_id,
                bytes=total,
                files=files,
            )
            try:
                await self.events.append(subj.storage(f.host), e)
            except LogError as err:  # the bytes are written; the next scan says so
                log.warning("storage.scan_not_appended", vfolder=f.vfolder_id, error=str(err))
        return total, files

    async def scan_all(self, tenancy: Callable[[], Tenancy], every_s: float) -> None:
        """Scan every live folder with a directory here, every ``every_s``, until cancelled:
        what sessions wrote is counted, not only uploads."""
        while True:
            for f in list(tenancy().vfolders.values()):
                if f.state == "live" and await anyio.Path(self.files.where(f)).is_dir():
                    try:
                        await self.scanned(f)
                    except OSError as e:
                        log.warning("storage.scan_failed", vfolder=f.vfolder_id, error=str(e))
            await anyio.sleep(every_s)  # a period, not a wait for something

    async def reap(
        self, tenancy: Callable[[], Tenancy], wait_beyond: Callable[[int], Awaitable[int]]
    ) -> None:
        """Delete the files of every folder purged from the trash, as purges come, until
        cancelled. ``wait_beyond(seq)`` returns once the log is folded beyond ``seq``."""
        seq = 0
        while True:
            for f in list(tenancy().vfolders.values()):
                if f.state == "purged" and f.vfolder_id not in self._reaped:
                    try:
                        if await anyio.to_thread.run_sync(self.files.purge, f):
                            log.info("storage.purged", vfolder=f.vfolder_id, host=f.host)
                        self._reaped.add(f.vfolder_id)
                    except OSError as e:
                        log.warning("storage.purge_failed", vfolder=f.vfolder_id, error=str(e))
            seq = await wait_beyond(seq)


def _user(t: Tenancy, viewer: Viewer) -> User:
    user = t.users.get(viewer.user) if viewer.user is not None else None
    if user is None:
        raise HTTPException(403, "virtual folders are users': sign in with a user's keypair")
    return user


def _folder(t: Tenancy, viewer: Viewer, vfolder_id: str, need: str) -> Vfolder:
    """The live folder ``vfolder_id`` if ``viewer`` may ``need`` (ro: read, rw: write) it.
    Raises HTTPException (404: no such folder, or none the viewer may use or manage: it
    is not even said to exist; 403: the viewer's to see, not to use so)."""
    who = _user(t, viewer)
    f = t.vfolders.get(vfolder_id)
    access = None if f is None else access_of(who, f)
    if f is None or f.state != "live" or (access is None and not manages(t, who, f)):
        raise HTTPException(404, f"no folder {vfolder_id!r}")
    if access is None or (need == "rw" and access != "rw"):
        verb = "write" if need == "rw" else "read"
        raise HTTPException(403, f"user {who.user} may not {verb} folder {f.name} ({f.vfolder_id})")
    return f


def _info(t: Tenancy, who: User, f: Vfolder) -> models.VfolderInfo:
    return models.VfolderInfo(
        id=f.vfolder_id,
        name=f.name,
        host=f.host,
        domain=f.domain,
        user=f.user,
        project=f.project,
        quota_bytes=f.quota_bytes,
        bytes=f.bytes,
        files=f.files,
        state=f.state,
        access=access_of(who, f),
        shares=dict(f.shares) if manages(t, who, f) else {},
    )


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread, a FolderError as the HTTP refusal it stands for."""
    try:
        return await anyio.to_thread.run_sync(fn, *args)
    except FolderError as e:
        raise HTTPException(e.status, e.reason) from e


def mount(app: FastAPI, storage: Storage, tenancy: Callable[[], Tenancy]) -> None:
    """The storage routes, on ``app`` (see the module's docstring)."""

    @app.get("/v1/vfolders", tags=["vfolders"])
    async def list_vfolders(
        viewer: Who,
        trash: Annotated[bool, Query(description="the trash's, not the live ones")] = False,
    ) -> list[models.VfolderInfo]:
        """The folders the viewer may use or manage, by name."""
        t = tenancy()
        who = _user(t, viewer)
        if trash:  # what the viewer may purge or look at before it does
            seen = [f for f in t.vfolders.values() if f.state == "trashed" and manages(t, who, f)]
        else:
            seen = [
                f
                for f in t.vfolders.values()
                if f.state == "live" and (access_of(who, f) or manages(t, who, f))
            ]
        return [_info(t, who, f) for f in sorted(seen, key=lambda f: (f.name, f.vfolder_id))]

    @app.get("/v1/vfolders/{vfolder_id}/files", tags=["vfolders"], responses=_REFUSED)
    async def list_files(
        vfolder_id: str, viewer: Who, path: PathQuery = ""
    ) -> list[models.FileEntry]:
        """The entries of a directory of the folder (its top by default)."""
        f = _folder(tenancy(), viewer, vfolder_id, "ro")
        entries = await _in_thread(storage.files.listing, f, path)
        return [
            models.FileEntry(
                name=e.name, kind=e.kind, size=e.size, mtime=datetime.fromtimestamp(e.mtime, UTC)
            )
            for e in entries
        ]

    @app.get("/v1/vfolders/{vfolder_id}/stat", tags=["vfolders"], responses=_REFUSED)
    async def stat_file(vfolder_id: str, viewer: Who, path: PathQuery) -> models.FileStat:
        """A file's size (where a resumed upload starts; null if there is none), and the
        folder's bytes and quota."""
        f = _folder(tenancy(), viewer, vfolder_id, "ro")
        size = await _in_thread(storage.files.size, f, path)
        used, _ = await _in_thread(storage.files.scan, f)
        return models.FileStat(path=path, size=size, folder_bytes=used, quota_bytes=f.quota_bytes)

    @app.post("/v1/vfolders/{vfolder_id}/scan", tags=["vfolders"], responses=_REFUSED)
    async def scan(vfolder_id: str, viewer: Who) -> models.VfolderInfo:
        """Count what the folder holds now (sessions write into it too), and say it on the
        log; the folder as it then is."""
        t = tenancy()
        f = _folder(t, viewer, vfolder_id, "ro")
        total, files = await storage.scanned(f)
        return _info(t, _user(t, viewer), f).model_copy(update={"bytes": total, "files": files})

    @app.put(
        "/v1/vfolders/{vfolder_id}/files/{path:path}",
        tags=["vfolders"],
        responses={**_REFUSED, 413: {"model": models.Problem}},
    )
    async def upload(
        vfolder_id: str,
        path: str,
        request: Request,
        viewer: Who,
        offset: Annotated[int, Query(ge=0, description="where the body goes")] = 0,
        replace: Annotated[bool, Query(description="at 0, replace a file that exists")] = False,
    ) -> models.Uploaded:
        """Write the body into file ``path`` at ``offset`` (see the module's docstring)."""
        f = _folder(tenancy(), viewer, vfolder_id, "rw")
        async with storage.turn(f.vfolder_id):
            used, _ = await _in_thread(storage.files.scan, f)
            found = await _in_thread(storage.files.size, f, path)
            before = found or 0
            if offset == 0 and before > 0 and not replace:
                raise HTTPException(409, f"{path!r} exists ({before} bytes): replace=true")
            room = None if f.quota_bytes is None else f.quota_bytes - (used - before + offset)
            declared = request.headers.get("content-length", "")
            if room is not None and declared.isdigit() and int(declared) > room:
                raise HTTPException(413, _over(f, used - before + offset, int(declared)))
            fh = await _in_thread(storage.files.open_at, f, path, offset)
            written = 0
            try:
                async for chunk in request.stream():
                    written += len(chunk)
                    if room is not None and written > room:
                        await anyio.to_thread.run_sync(fh.truncate, offset)
                        if found is None:  # made by this upload: none is left
                            await _in_thread(storage.files.remove, f, path)
                        raise HTTPException(413, _over(f, used - before + offset, written))
                    await anyio.to_thread.run_sync(fh.write, chunk)
            finally:
                await anyio.to_thread.run_sync(fh.close)
            folder_bytes, _ = await storage.scanned(f)
        return models.Uploaded(
            path=path, size=offset + written, folder_bytes=folder_bytes, quota_bytes=f.quota_bytes
        )

    @app.get(
        "/v1/vfolders/{vfolder_id}/files/{path:path}",
        tags=["vfolders"],
        response_class=FileResponse,
        responses={
            **_REFUSED,
            200: {"content": {"application/octet-stream": {}}, "description": "the file"},
            206: {"content": {"application/octet-stream": {}}, "description": "its rest"},
            416: {"description": "a range past its end"},
        },
    )
    async def download(vfolder_id: str, path: str, viewer: Who) -> FileResponse:
        """The file; a ``Range: bytes=N-`` request gets the rest from ``N`` (206)."""
        f = _folder(tenancy(), viewer, vfolder_id, "ro")
        real = await _in_thread(storage.files.readable, f, path)
        return FileResponse(real, media_type="application/octet-stream")


def _over(f: Vfolder, used: int, more: int) -> str:
    return (
        f"folder {f.name} allows {f.quota_bytes} bytes; it holds {used}, "
        f"and {more} more would pass it"
    )
