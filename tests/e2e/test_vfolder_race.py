"""The hostile tenant's race, from inside a real container: a session of alice's swaps
directories of her folder with links (one to a host directory, one to bob's folder, one
to a world-writable host directory) as fast as the kernel lets it (renameat2
RENAME_EXCHANGE), while alice calls every folder route many times through two storage
services (one resolving with openat2, one walking). Nothing outside her folder is ever
read, written, created, renamed or deleted, and every answer is 2xx or 4xx."""

import collections
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from services.adapters.docker_runtime import DockerRuntime
from services.adapters.memory_log import MemoryLog
from services.adapters.vfolder_files import FolderFiles
from services.api.vfolder_routes import Storage
from services.domain.container_spec import LABEL_AGENT, ContainerSpec, Mount
from tests.support.vfolder_env import FOLDER, Api, app_of, engine, tenancy

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
IMAGE = "fgpu/busybox:latest"
AGENT = "vfolder-race"
ROUNDS = 20  # per worker; 4 workers, 14 requests a round
SECRETS = (b"HOST-SECRET", b"HOST-PUBLIC", b"BOB-SECRET")
# In the container: alice's decoys, the links beside them, then the swapping.
SETUP = """set -e
cd /home/work/data
mkdir a b c
echo decoy > a/secret.txt; echo decoy > a/public.txt; echo decoy > b/bob.txt
chown -R "$(stat -c %u:%g .)" a b c  # the folder's owner's, so every route gets through
ln -s {host}/private a.lnk; ln -s ../vf-bob b.lnk; ln -s {host}/empty c.lnk
touch racing
exec /opt/race/swap stop a a.lnk b b.lnk c c.lnk
"""


@pytest.fixture
def host() -> Iterator[Path]:
    """A host directory the storage uid may enter (unlike the test's own, which is
    root's alone): ``private`` holds a root-only secret and a world-readable file,
    ``empty`` is world-writable and must stay empty, ``vfolders`` is the folders' root.
    Only where a path leads keeps the storage service out of them."""
    where = Path(tempfile.mkdtemp(prefix="fgpu-race-", dir="/tmp"))
    where.chmod(0o755)
    (where / "private").mkdir(mode=0o755)
    (where / "private" / "secret.txt").write_bytes(b"HOST-SECRET")
    (where / "private" / "secret.txt").chmod(0o600)
    (where / "private" / "public.txt").write_bytes(b"HOST-PUBLIC")
    (where / "private" / "public.txt").chmod(0o644)
    (where / "empty").mkdir()
    (where / "empty").chmod(0o777)
    try:
        yield where
    finally:
        shutil.rmtree(where)


@pytest.fixture
def swap(tmp_path: Path) -> Path:
    """The racer, built static: it runs in any image."""
    out = tmp_path / "race" / "swap"
    out.parent.mkdir()
    source = Path(__file__).with_name("race") / "swap.c"
    cc = os.environ.get("CC", "cc")
    subprocess.run(
        [cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture
async def runtime() -> AsyncIterator[DockerRuntime]:
    async with engine(AGENT) as rt:
        yield rt


async def _hammer(api: Api, tally: collections.Counter[tuple[str, int]], leaks: list[str]) -> None:
    """Every route, ``ROUNDS`` times, on the paths the session swaps."""

    async def note(route: str, r: httpx.Response) -> None:
        tally[(route, r.status_code)] += 1
        if any(s in r.content for s in SECRETS):
            leaks.append(f"{route}: {r.content[:80]!r}")

    for _ in range(ROUNDS):
        await note("list", await api.get("alice", f"{FOLDER}/files", params={"path": "a"}))
        await note("list", await api.get("alice", f"{FOLDER}/files", params={"path": "b"}))
        await note(
            "stat", await api.get("alice", f"{FOLDER}/stat", params={"path": "a/secret.txt"})
        )
        await note("download", await api.get("alice", f"{FOLDER}/files/a/secret.txt"))
        await note("download", await api.get("alice", f"{FOLDER}/files/a/public.txt"))
        await note("download", await api.get("alice", f"{FOLDER}/files/b/bob.txt"))
        await note("upload", await api.put("alice", "c/planted.txt", b"PLANTED", replace="true"))
        await note("upload", await api.put("alice", "b/bob.txt", b"decoy", replace="true"))
        await note("rename", await api.move("alice", "a/secret.txt", "a/moved.txt"))
        await note("rename", await api.move("alice", "a/moved.txt", "a/secret.txt"))
        await note("rename", await api.move("alice", "b/bob.txt", "c/taken.txt"))
        await note("delete", await api.delete("alice", "c/planted.txt"))
        await note("delete", await api.delete("alice", "b/bob.txt"))
        await note("scan", await api.client.post(f"{FOLDER}/scan", headers=await api.as_("alice")))


async def test_a_session_racing_links_into_its_folder_reaches_nothing_outside(
    runtime: DockerRuntime, host: Path, swap: Path
) -> None:
    t = tenancy()
    top = host / "vfolders" / "local" / "vf-alice"
    async with contextlib.AsyncExitStack() as stack:
        apis = []
        for resolver in ("openat2", "walk"):
            files = stack.enter_context(FolderFiles(host / "vfolders", resolver=resolver))
            storage = Storage(files, None)
            transport = httpx.ASGITransport(app=app_of(t, storage), raise_app_exceptions=False)
            client = httpx.AsyncClient(transport=transport, base_url="http://storage")
            apis.append(Api(await stack.enter_async_context(client), MemoryLog(), storage))
        r = await apis[0].client.put(
            "/v1/vfolders/vf-bob/files/bob.txt",
            content=b"BOB-SECRET",
            headers=await apis[0].as_("bob"),
        )
        assert r.status_code == 200, r.text
        assert (await apis[0].put("alice", "first.txt", b"x")).status_code == 200
        before = _tree(host, but=top)

        spec = ContainerSpec(
            name="fgpu-vfolder-race",
            image=IMAGE,
            command=("sh", "-c", SETUP.format(host=host)),
            labels={LABEL_AGENT: AGENT},
            mounts=(
                Mount(source=str(top), target="/home/work/data", read_only=False),
                Mount(source=str(swap.parent), target="/opt/race", read_only=True),
            ),
        )
        racer = await runtime.run(spec)
        with anyio.fail_after(60):
            while not await anyio.Path(top / "racing").exists():  # noqa: ASYNC110
                await anyio.sleep(0.02)  # the container's shell is setting up

        tally: collections.Counter[tuple[str, int]] = collections.Counter()
        leaks: list[str] = []
        async with anyio.create_task_group() as tg:
            for api in apis * 2:
                tg.start_soon(_hammer, api, tally, leaks)
        (top / "stop").touch()
        with anyio.fail_after(60):
            code = await runtime.wait(racer.id)
        said = await runtime.logs(racer.id)
        await runtime.remove(racer.id)

    assert code == 0 and int(said.split()[0]) > 0, said  # it swapped all along
    assert leaks == []
    assert [k for k in tally if k[1] >= 500] == []
    # The race went both ways: some calls reached the folder's own directories, some
    # met a link and were refused.
    assert tally[("download", 200)] > 0 and tally[("download", 403)] > 0, tally
    assert _tree(host, but=top) == before
    assert (host / "private" / "secret.txt").read_bytes() == b"HOST-SECRET"
    assert (host / "private" / "public.txt").read_bytes() == b"HOST-PUBLIC"
    assert (host / "vfolders" / "local" / "vf-bob" / "bob.txt").read_bytes() == b"BOB-SECRET"


def _tree(root: Path, but: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` outside ``but``: its mode, size and inode number."""
    found = {}
    for path in root.rglob("*"):
        if path == but or but in path.parents:
            continue
        st = path.lstat()
        found[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_ino)
    return found
