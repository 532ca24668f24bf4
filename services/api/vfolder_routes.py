"""The storage service: virtual folders' files in and out, with the read API's tokens.

The folders themselves (who owns, who may read or write, what is in the trash) are the
tenancy's, changed only by events; these routes move bytes, and say what a folder holds:

- ``GET /v1/vfolders``: the folders the viewer may use or manage (``?trash=true``: those
  in the trash it manages);
- ``GET /v1/vfolders/{id}/files?path=DIR`` and ``GET .../stat?path=FILE``;
- ``PUT /v1/vfolders/{id}/files/{path}?offset=N&total=T``: the body written into the file
  from ``N``: 0 starts anew, any other ``N`` resumes an upload that stopped there (``stat``
  says where: any other ``N`` is refused, 409). The bytes go to a hidden file beside it,
  which takes the file's name, whole, once the body has all come, or, with ``total``, once
  the file's ``T`` bytes have all come: a body that ends short of ``T`` is one chunk, kept
  aside for the next (the web UI sends a file so, in chunks); a body past ``T`` is
  refused (400). An existing file is replaced only with ``replace=true``, and only by a
  whole upload. A client that goes away leaves that hidden file to resume from; a
  refusal leaves nothing. The folder's quota is checked as bytes come (and against ``T``
  before any): past it, the answer is 413. Uploads into one folder take turns (one
  process).
- ``GET /v1/vfolders/{id}/files/{path}``: the file, with ``Range`` for a resumed download;
  always as an attachment of no type a browser would run (``file_send.py``): a folder's
  HTML is never a page of this origin;
- ``DELETE /v1/vfolders/{id}/files/{path}?recursive=``, ``POST .../move?path=&to=``.

Every path is resolved by the store beneath the folder, never through a link, under the
folders' own uid (``services.adapters.vfolder_files``); a download sends the file it
opened, never a path opened again.

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
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from events import VfolderScanned
from events import subjects as subj
from services.api import models
from services.api.file_send import send_file
from services.api.guard import Who
from services.domain.access.visibility import Viewer
from services.domain.tenancy.model import Tenancy, User, Vfolder
from services.domain.tenancy.vfolders import access_of, manages
from services.ports import EventLog, FolderError, FolderStore, LogError, Upload

__all__ = ["Storage", "mount", "seen_folder"]

log = structlog.get_logger()
PathQuery = Annotated[str, Query(max_length=4096, description="relative to the folder")]
ToQuery = Annotated[str, Query(max_length=4096, description="the new path, in the folder")]
# 414: a path past PATH_MAX; 503: the storage helper is not answering; 507: no space left.
_REFUSED: dict[int | str, dict[str, Any]] = {
    code: {"model": models.Problem} for code in (400, 403, 404, 409, 414, 503, 507)
}
_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_SENT: dict[int | str, dict[str, Any]] = {
    200: {"description": "the file", "content": _BYTES},
    206: {"description": "the range asked for (Range: bytes=N-)", "content": _BYTES},
    416: {"description": "a range that starts past the file's end"},
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
                    except (OSError, FolderError) as e:
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
                    except (OSError, FolderError) as e:
                        # What the storage uid may not delete (a session's, made as root)
                        # stays: named here for an administrator; tried again next pass.
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


def seen_folder(t: Tenancy, viewer: Viewer, vfolder_id: str) -> Vfolder:
    """The live folder ``vfolder_id`` if ``viewer`` sees it in ``GET /v1/vfolders`` (it may
    use or manage it). Raises HTTPException (404: no such folder, or none of those)."""
    who = _user(t, viewer)
    f = t.vfolders.get(vfolder_id)
    if f is None or f.state != "live" or not (access_of(who, f) or manages(t, who, f)):
        raise HTTPException(404, f"no folder {vfolder_id!r}")
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
    """The storage routes, on ``app`` (see the module's docstring), in the order the
    schema lists them."""
    _mount_listings(app, storage, tenancy)
    _mount_files(app, storage, tenancy)


def _mount_listings(app: FastAPI, storage: Storage, tenancy: Callable[[], Tenancy]) -> None:
    """The folders, what each holds, and its scan."""

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
        """A file's size (null if there is none), what an upload into it left when it
        stopped short (where a resumed upload starts), and the folder's bytes and quota."""
        f = _folder(tenancy(), viewer, vfolder_id, "ro")
        state = await _in_thread(storage.files.stat, f, path)
        used, _ = await _in_thread(storage.files.scan, f)
        return models.FileStat(
            path=path,
            size=state.size,
            partial=state.partial,
            folder_bytes=used,
            quota_bytes=f.quota_bytes,
        )

    @app.post("/v1/vfolders/{vfolder_id}/scan", tags=["vfolders"], responses=_REFUSED)
    async def scan(vfolder_id: str, viewer: Who) -> models.VfolderInfo:
        """Count what the folder holds now (sessions write into it too), and say it on the
        log; the folder as it then is."""
        t = tenancy()
        f = _folder(t, viewer, vfolder_id, "ro")
        total, files = await storage.scanned(f)
        return _info(t, _user(t, viewer), f).model_copy(update={"bytes": total, "files": files})


def _mount_files(app: FastAPI, storage: Storage, tenancy: Callable[[], Tenancy]) -> None:
    """A folder's files: uploaded, downloaded, removed and moved."""
    _mount_upload(app, storage, tenancy)
    _mount_file_changes(app, storage, tenancy)


def _mount_upload(app: FastAPI, storage: Storage, tenancy: Callable[[], Tenancy]) -> None:
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
        offset: Annotated[int, Query(ge=0, description="0, or where a stopped upload resumes")] = 0,
        replace: Annotated[bool, Query(description="replace a file that exists")] = False,
        total: Annotated[
            int | None, Query(ge=0, description="the whole file's bytes: the body is a chunk")
        ] = None,
    ) -> models.Uploaded:
        """Write the body into file ``path`` from ``offset`` (see the module's docstring)."""
        f = _folder(tenancy(), viewer, vfolder_id, "rw")
        if total is not None and total < offset:
            raise HTTPException(400, f"total {total} is less than offset {offset}")
        async with storage.turn(f.vfolder_id):
            used, _ = await _in_thread(storage.files.scan, f)
            up: Upload = await _in_thread(storage.files.upload, f, path, offset, replace)
            # What the folder holds without this upload's file (what it replaces, and what
            # an earlier upload into it left, both counted in ``used``).
            held = used - up.replaced - up.partial
            size, partial = await _receive(up, request, f, held, offset, total)
            folder_bytes, _ = await storage.scanned(f)
        return models.Uploaded(
            path=path,
            size=size,
            partial=partial,
            folder_bytes=folder_bytes,
            quota_bytes=f.quota_bytes,
        )


def _mount_file_changes(app: FastAPI, storage: Storage, tenancy: Callable[[], Tenancy]) -> None:
    """Downloads, removals and moves."""

    @app.get(
        "/v1/vfolders/{vfolder_id}/files/{path:path}",
        tags=["vfolders"],
        response_class=Response,
        responses={**_SENT, **_REFUSED},
    )
    async def download(vfolder_id: str, path: str, viewer: Who, request: Request) -> Response:
        """The file; a ``Range: bytes=N-`` request gets the rest from ``N`` (206)."""
        f = _folder(tenancy(), viewer, vfolder_id, "ro")
        opened = await _in_thread(storage.files.open_read, f, path)
        return send_file(opened, request.headers.get("range"), path.rsplit("/", 1)[-1])

    @app.delete(
        "/v1/vfolders/{vfolder_id}/files/{path:path}", tags=["vfolders"], responses=_REFUSED
    )
    async def remove(
        vfolder_id: str,
        path: str,
        viewer: Who,
        recursive: Annotated[bool, Query(description="a directory with what is in it")] = False,
    ) -> models.Removed:
        """Remove a file, a link (never what it points to), or a directory: an empty one,
        or with everything in it if ``recursive``. Write access needed."""
        f = _folder(tenancy(), viewer, vfolder_id, "rw")
        kind = await _in_thread(storage.files.remove, f, path, recursive)
        folder_bytes, _ = await storage.scanned(f)
        return models.Removed(
            path=path, kind=kind, folder_bytes=folder_bytes, quota_bytes=f.quota_bytes
        )

    @app.post("/v1/vfolders/{vfolder_id}/move", tags=["vfolders"], responses=_REFUSED)
    async def move(
        vfolder_id: str,
        viewer: Who,
        path: PathQuery,
        to: ToQuery,
        replace: Annotated[bool, Query(description="replace what is at ``to``")] = False,
    ) -> models.Moved:
        """Rename a file, directory or link within the folder (``to``'s directory must
        exist). Write access needed."""
        f = _folder(tenancy(), viewer, vfolder_id, "rw")
        await _in_thread(storage.files.move, f, path, to, replace)
        return models.Moved(path=path, to=to)


async def _receive(
    up: Upload, request: Request, f: Vfolder, held: int, offset: int, total: int | None
) -> tuple[int | None, int | None]:
    """The request's body written by ``up`` from ``offset``, and put in place once the
    file is whole (its ``total`` bytes come; no ``total``: the body is the rest): the
    file's size, or, for a chunk short of ``total``, None and the bytes kept aside. Past
    the folder's quota (``held``: what it holds besides this file) the upload is undone
    and refused (413), as is a body past ``total`` (400). A client gone, or the server
    stopping, leaves what came for a resume; any other failure undoes it."""
    room = None if f.quota_bytes is None else f.quota_bytes - held - offset
    wanted = None if total is None else total - offset
    declared = request.headers.get("content-length", "")
    written = 0
    try:
        _refuse_early(f, held + offset, room, wanted, int(declared) if declared.isdigit() else None)
        async for chunk in request.stream():
            written += len(chunk)
            if room is not None and written > room:
                raise HTTPException(413, _over(f, held + offset, written))
            if wanted is not None and written > wanted:
                raise HTTPException(400, _past(offset, written, total))
            await _in_thread(up.write, chunk)
        if wanted is not None and written < wanted:
            await anyio.to_thread.run_sync(up.keep)  # a chunk: the next one goes on
            return None, offset + written
        size: int = await _in_thread(up.commit)
        return size, None
    except ClientDisconnect as e:
        await anyio.to_thread.run_sync(up.keep)
        # Nobody reads this answer; the log does.
        raise HTTPException(400, f"the body stopped short: resume at {offset + written}") from e
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(up.keep)
        raise
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(up.discard)
        raise


def _refuse_early(
    f: Vfolder, used: int, room: int | None, wanted: int | None, declared: int | None
) -> None:
    """Refuse, before a byte is written, an upload whose declared length (or the file's
    whole rest, ``wanted``) would pass the quota (413), or a body longer than that rest
    (400)."""
    for more in (wanted, declared):
        if room is not None and more is not None and more > room:
            raise HTTPException(413, _over(f, used, more))
    if wanted is not None and declared is not None and declared > wanted:
        raise HTTPException(400, f"a body of {declared} bytes passes the file's total")


def _past(offset: int, written: int, total: int | None) -> str:
    return f"the body passes the file's total ({total} bytes) at {offset + written}"


def _over(f: Vfolder, used: int, more: int) -> str:
    return (
        f"folder {f.name} allows {f.quota_bytes} bytes; it holds {used}, "
        f"and {more} more would pass it"
    )
