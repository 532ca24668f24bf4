"""``fgpu vfolder ...``: virtual folders, and their files in and out.

Creating, sharing, unsharing, trashing a folder and emptying the trash are requests on
the log that the registrar applies or refuses (as ``fgpu admin`` does: the command waits
for the answer). Files go through the storage service beside the read API, with the same
sign-in; uploads and downloads show progress and resume where they stopped (``--resume``);
files and directories are removed (``rm-file``) and renamed (``mv-file``) there too.
Nothing that exists is replaced unless asked (``--replace``).
"""

import secrets
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.options import Settings, api_errors, fail, out, print_json
from services.cli.tenancy_cmd import JsonOpt, TimeoutOpt, ask

if TYPE_CHECKING:
    from services.cli.api_client import ReadApi

__all__ = ["app"]

app = typer.Typer(help="Virtual folders: data that outlives sessions.", no_args_is_help=True)
trash_app = typer.Typer(help="Folders in the trash (administrators).", no_args_is_help=True)
app.add_typer(trash_app, name="trash")

UserOpt = Annotated[str | None, typer.Option("--user", help="A user of the folder's domain.")]
ProjectOpt = Annotated[
    str | None, typer.Option("--project", help="A project, DOMAIN/PROJECT or of your domain.")
]


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _api(ctx: typer.Context) -> "ReadApi":
    return _settings(ctx).read_api()


def _whoami(api: "ReadApi") -> dict[str, Any]:
    with api_errors():
        me: dict[str, Any] = api.get("/v1/auth/whoami")
    if me.get("user") is None:
        fail("virtual folders are users': sign in with a user's keypair")
    return me


def _folder(api: "ReadApi", name: str, *, trash: bool = False) -> dict[str, Any]:
    """The folder the signed-in user calls ``name`` (its name or id): its own first."""
    with api_errors():
        found: list[dict[str, Any]] = api.get("/v1/vfolders", {"trash": str(trash).lower()})
    me = _whoami(api)["user"]
    named = [f for f in found if f["id"] == name] or [f for f in found if f["name"] == name]
    if len(named) > 1:
        named = [f for f in named if f["user"] == me] or named
    if not named:
        fail(f"no folder {name!r} of yours or shared with you" + (" in the trash" if trash else ""))
    if len(named) > 1:
        ids = ", ".join(f["id"] for f in named)
        fail(f"{len(named)} folders called {name!r} ({ids}): name one by its id")
    return named[0]


def _project(api: "ReadApi", project: str) -> str:
    if "/" in project:
        return project
    return f"{_whoami(api)['domain']}/{project}"


def _whose(
    ctx: typer.Context, name: str, user: str | None, project: str | None
) -> tuple[dict[str, Any], str]:
    """The folder ``name``, and whom a share names (``user:<name>``, ``project:<d/p>``)."""
    if (user is None) == (project is None):
        fail("give --user NAME or --project PROJECT")
    api = _api(ctx)
    f = _folder(api, name)
    return f, f"user:{user}" if user is not None else f"project:{_project(api, str(project))}"


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="1-64 letters, digits, '_.-'")],
    project: ProjectOpt = None,
    host: Annotated[str, typer.Option(help="The storage host it lives on.")] = "local",
    quota: Annotated[str | None, typer.Option(help="Most it may hold (10g, 500m).")] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Create a folder of yours (or, for administrators, of a project: --project)."""
    from events import CreateVfolder
    from services.domain.resources import InvalidAmount, parse_mem

    api = _api(ctx)
    try:
        quota_bytes = parse_mem(quota) if quota is not None else None
    except InvalidAmount as e:
        fail(f"--quota: {e}")
    owner = {"project": _project(api, project)} if project else {"user": _whoami(api)["user"]}
    vfolder_id = f"vf-{secrets.token_hex(8)}"
    command = CreateVfolder(
        vfolder_id=vfolder_id, name=name, host=host, quota_bytes=quota_bytes, **owner
    )
    answer = ask(ctx, command, timeout)
    if as_json:
        print_json({**answer, "id": vfolder_id})
    else:
        out().print(f"folder {name} created ({vfolder_id})", highlight=False)


@app.command("ls")
def ls(
    ctx: typer.Context,
    trash: Annotated[bool, typer.Option(help="The trash's folders you manage.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The folders you may use or manage: their owner, quota, usage and your access."""
    with api_errors():
        found = _api(ctx).get("/v1/vfolders", {"trash": str(trash).lower()})
    if as_json:
        print_json(found)
        return
    from rich.table import Table

    table = Table("name", "id", "owner", "host", "bytes", "quota", "access", "shared with")
    for f in found:
        table.add_row(
            f["name"],
            f["id"],
            f["user"] or f["project"],
            f["host"],
            str(f["bytes"]),
            "-" if f["quota_bytes"] is None else str(f["quota_bytes"]),
            f["access"] or "-",
            ", ".join(f"{k} ({v})" for k, v in f["shares"].items()),
        )
    out().print(table)


def _asked(ctx: typer.Context, command: Any, text: str, as_json: bool, timeout: float) -> None:
    answer = ask(ctx, command, timeout)
    if as_json:
        print_json(answer)
    else:
        out().print(text, highlight=False)


@app.command("rm")
def rm(ctx: typer.Context, name: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False) -> None:
    """Move a folder to the trash (its owner, its domain's administrators); its files stay
    until an administrator empties the trash."""
    from events import RemoveVfolder

    f = _folder(_api(ctx), name)
    command = RemoveVfolder(vfolder_id=f["id"])
    _asked(ctx, command, f"folder {f['name']} moved to the trash", as_json, timeout)


@app.command("share")
def share(
    ctx: typer.Context,
    name: str,
    user: UserOpt = None,
    project: ProjectOpt = None,
    rw: Annotated[bool, typer.Option("--rw", help="Let them write too (default: read).")] = False,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Share a folder with a user or a project's members, read-only unless --rw."""
    from events import Access, ShareVfolder

    f, target = _whose(ctx, name, user, project)
    access: Access = "rw" if rw else "ro"
    command = ShareVfolder(vfolder_id=f["id"], target=target, access=access)
    _asked(ctx, command, f"folder {f['name']} shared with {target} ({access})", as_json, timeout)


@app.command("unshare")
def unshare(
    ctx: typer.Context,
    name: str,
    user: UserOpt = None,
    project: ProjectOpt = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Stop sharing a folder with a user or project (sessions started before keep it)."""
    from events import UnshareVfolder

    f, target = _whose(ctx, name, user, project)
    command = UnshareVfolder(vfolder_id=f["id"], target=target)
    _asked(ctx, command, f"folder {f['name']} no longer shared with {target}", as_json, timeout)


@app.command("ls-files")
def ls_files(
    ctx: typer.Context,
    name: str,
    path: Annotated[str, typer.Argument(help="A directory in the folder.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """The files of a folder's directory."""
    api = _api(ctx)
    f = _folder(api, name)
    with api_errors():
        found = api.get(f"/v1/vfolders/{f['id']}/files", {"path": path})
    if as_json:
        print_json(found)
        return
    for e in found:
        shown = e["name"] + ("/" if e["kind"] == "dir" else "")
        out().print(f"{e['size']:>12}  {e['mtime'][:19]}  {shown}", highlight=False)


@app.command("scan")
def scan(ctx: typer.Context, name: str, as_json: JsonOpt = False) -> None:
    """Count what a folder holds now (sessions write into it too); the storage service
    also does every few minutes."""
    api = _api(ctx)
    f = _folder(api, name)
    with api_errors():
        found = api.post(f"/v1/vfolders/{f['id']}/scan")
    if as_json:
        print_json(found)
    else:
        out().print(f"{found['name']}: {found['bytes']} bytes in {found['files']} files")


def _progress(description: str, total: int, done: int) -> Any:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TransferSpeedColumn,
    )

    bar = Progress(
        "{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=out(),
        transient=True,
    )
    return bar, bar.add_task(description, total=total, completed=done)


def _file_url(f: dict[str, Any], path: str) -> str:
    """The storage route of file ``path`` of folder ``f`` (its names quoted)."""
    return f"/v1/vfolders/{f['id']}/files/{urllib.parse.quote(path)}"


@app.command("upload")
def upload(
    ctx: typer.Context,
    name: str,
    local: Annotated[Path, typer.Argument(help="The file to send.", dir_okay=False)],
    remote: Annotated[str | None, typer.Argument(help="Its path in the folder.")] = None,
    resume: Annotated[
        bool, typer.Option(help="Go on from what an interrupted upload left.")
    ] = False,
    replace: Annotated[bool, typer.Option(help="Replace a file of that path.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Send a file into a folder (you must be allowed to write it); the folder's quota is
    checked as it goes. The file appears whole, or not at all: an interrupted upload is
    kept aside, and --resume goes on from it."""
    api = _api(ctx)
    f = _folder(api, name)
    path = remote or local.name
    try:
        length = local.stat().st_size
    except OSError as e:
        fail(f"{local}: {e.strerror}")
    with api_errors():
        there = api.get(f"/v1/vfolders/{f['id']}/stat", {"path": path})
    offset = _upload_offset(path, there["size"], there.get("partial"), length, resume, replace)
    # The file's total said, as the web UI says it with each chunk: one route, one rule
    # (the file appears once its ``length`` bytes are there, never a shorter one).
    params = {
        "offset": offset,
        "total": length,
        "replace": "true" if there["size"] is not None else None,
    }
    bar, task = _progress(f"{path}", length, offset)
    with open(local, "rb") as source, bar, api_errors():
        source.seek(offset)
        done = api.upload(
            _file_url(f, path), params, source, length - offset, lambda n: bar.advance(task, n)
        )
    if as_json:
        print_json(done)
    else:
        out().print(f"{path}: {done['size']} bytes in {f['name']}", highlight=False)


def _upload_offset(
    path: str, size: int | None, partial: int | None, length: int, resume: bool, replace: bool
) -> int:
    """Where an upload starts (a file there is then replaced: the caller asked to, or it
    resumes an upload that was to); exits with why it may not start at all."""
    if partial:
        if resume:
            if partial > length:
                fail(f"{path}: its upload holds {partial} bytes, more than the {length} to send")
            return partial
        if not replace:
            fail(
                f"an upload of {path} stopped after {partial} bytes: --resume to go on, "
                "--replace to send it anew",
                1,
            )
        return 0
    if size is not None and not replace:
        fail(f"{path} exists ({size} bytes): --replace to send it anew", 1)
    return 0


@app.command("download")
def download(
    ctx: typer.Context,
    name: str,
    remote: Annotated[str, typer.Argument(help="The file's path in the folder.")],
    local: Annotated[Path | None, typer.Argument(help="Where to write it.")] = None,
    resume: Annotated[bool, typer.Option(help="Go on from what is here.")] = False,
    replace: Annotated[bool, typer.Option(help="Replace a local file of that name.")] = False,
) -> None:
    """Fetch a file of a folder (read access is enough)."""
    api = _api(ctx)
    f = _folder(api, name)
    target = local or Path(Path(remote).name)
    with api_errors():
        there = api.get(f"/v1/vfolders/{f['id']}/stat", {"path": remote})
    if there["size"] is None:
        fail(f"no file {remote!r} in {f['name']}", 1)
    have = target.stat().st_size if target.exists() else 0
    if target.exists() and not (resume or replace):
        fail(f"{target} exists: --resume to go on, --replace to fetch it anew", 1)
    offset = have if resume else 0
    if offset > there["size"]:
        fail(f"{target} holds more than {remote} ({there['size']} bytes): not this file")
    if offset and offset == there["size"]:
        out().print(f"{target}: {offset} bytes, complete already", highlight=False)
        return
    bar, task = _progress(remote, there["size"], offset)
    with open(target, "ab" if offset else "wb") as sink, bar, api_errors():
        api.download(
            _file_url(f, remote),
            None,
            sink,
            offset=offset,
            progress=lambda n: bar.advance(task, n),
        )
    out().print(f"{target}: {there['size']} bytes", highlight=False)


@app.command("rm-file")
def rm_file(
    ctx: typer.Context,
    name: str,
    path: Annotated[str, typer.Argument(help="A file, link or directory in the folder.")],
    recursive: Annotated[
        bool, typer.Option("--recursive", "-r", help="A directory with all it holds.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove a file, a link (not what it points to) or an empty directory from a folder
    (you must be allowed to write it); a directory and all it holds with --recursive."""
    api = _api(ctx)
    f = _folder(api, name)
    with api_errors():
        done = api.delete(_file_url(f, path), {"recursive": "true" if recursive else None})
    if as_json:
        print_json(done)
    else:
        out().print(f"{path} removed from {f['name']} ({done['kind']})", highlight=False)


@app.command("mv-file")
def mv_file(
    ctx: typer.Context,
    name: str,
    path: Annotated[str, typer.Argument(help="A file, link or directory in the folder.")],
    to: Annotated[str, typer.Argument(help="Its new path (its directory must exist).")],
    replace: Annotated[bool, typer.Option(help="Replace what is there.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rename a file, link or directory within a folder (you must be allowed to write it)."""
    api = _api(ctx)
    f = _folder(api, name)
    params = {"path": path, "to": to, "replace": "true" if replace else None}
    with api_errors():
        done = api.post(f"/v1/vfolders/{f['id']}/move", params)
    if as_json:
        print_json(done)
    else:
        out().print(f"{path} renamed {to} in {f['name']}", highlight=False)


@trash_app.command("ls")
def trash_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The folders in the trash you manage."""
    ls(ctx, trash=True, as_json=as_json)


@trash_app.command("empty")
def trash_empty(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="These only (default: all).")] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Delete for good the folders in the trash (administrators): their files are gone."""
    from events import PurgeVfolders

    api = _api(ctx)
    if names:
        ids = [_folder(api, n, trash=True)["id"] for n in names]
    else:
        with api_errors():
            ids = [f["id"] for f in api.get("/v1/vfolders", {"trash": "true"})]
    if not ids:
        fail("the trash you manage is empty", 1)
    command = PurgeVfolders(vfolder_ids=tuple(ids))
    _asked(ctx, command, f"{len(ids)} folder(s) deleted for good", as_json, timeout)
