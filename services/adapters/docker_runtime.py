"""ContainerRuntime on a Docker engine, through aiodocker (asyncio only).

The engine is found through ``DOCKER_HOST`` or the default socket; ``scripts/docker-up``
starts a private one. Containers get no network (``NetworkMode: none``) unless asked, since
the private engine has no default bridge; an inference replica joins its owner's serving
network (``ContainerSpec.network``: an internal bridge made here on first use, which the
private engine allows), and its address there is its ``ContainerInfo.host``. GPUs are
handed over by NVIDIA ``DeviceRequests``.

Errors are translated here, at the edge (see ``services.ports``)::

    ContainerError          the engine answered and refused (bad spec, failed start, a
     |                      pull the registry refused or could not serve, ...)
     +-- ImageNotFound      the image is not on this engine (``run``), or not in the
     |                      registry (``pull``)
     +-- RuntimeUnavailable no answer, a timeout or a 5xx on a plain call: retry later

Images are pulled only when the agent asks (``pull``), from the registry the image's
reference names.

Connections: calls the engine answers at once (create, start, inspect, list, delete, ...)
share a pool of ``pool_size`` connections, each call bounded by ``request_timeout_s``
(waiting for a free connection included). Nothing whose length a container or a registry
decides holds one of them: the stop (as long as the container takes to go), an output's
read or follow, an exec, a pull each have a connection of their own, and every ``wait`` is told by
one stream of the engine's events (``docker_exits``) instead of a request per container.
So an agent with hundreds of containers can still start and stop the next.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, Self

import aiodocker
import aiohttp
import anyio
from aiodocker.exceptions import DockerError, DockerStreamError
from aiodocker.execs import Exec
from aiodocker.stream import Stream
from anyio.abc import TaskGroup

from events import ImageInfo
from services.adapters.docker_exits import EventStream, ExitWatch, Look
from services.domain.container_spec import ContainerSpec, container_env, env_from_list
from services.ports import (
    EXEC_OUTPUT_KEPT,
    ContainerError,
    ContainerInfo,
    ExecChannel,
    ExecResult,
    ImageNotFound,
    OutputFollow,
    PullProgress,
    RuntimeUnavailable,
)

__all__ = ["DockerRuntime", "PullTally", "container_config", "image_infos"]

_NO_ANSWER = 900  # aiodocker's status for "could not connect"
_NANO_PER_MILLI_CPU = 1_000_000  # 1 CPU = 1e9 NanoCpus = 1000 millis
_STDERR = 2  # the stream number of an exec's multiplexed output
# After an exec's output ends the engine may take a moment to record its exit (a command
# that closed its streams and runs on): asked again this often, at most this many times.
_EXIT_POLL_S, _EXIT_POLLS = 0.05, 100
# What a registry says of an image it does not have, in a pull's error message.
_NOT_IN_REGISTRY = ("manifest unknown", "not found", "name unknown")
# A listed container's State when it runs (a paused one runs, as its inspect says).
_RUNNING_STATES = ("running", "paused", "restarting")
# Failures below the HTTP status: no socket, a dropped connection, a timeout.
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


def container_config(
    spec: ContainerSpec,
    *,
    network_mode: str = "none",
    init: bool = True,
    image_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The body of ``POST /containers/create`` for ``spec`` (the name goes in the query).

    Pure: no engine needed. Limits of 0 mean "no limit" and are left out. Memory swap is
    capped at the memory limit, so a limited container cannot swap past it. With ``init``
    the engine's tini runs as PID 1, so SIGTERM reaches the command and zombies are reaped.
    ``image_env`` is the image's own environment, which ``spec.env_prepend`` extends.
    """
    host: dict[str, Any] = {
        "NetworkMode": spec.network or network_mode,
        "Init": init,
        "LogConfig": {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}},
    }
    if spec.cpu_millis > 0:
        host["NanoCpus"] = spec.cpu_millis * _NANO_PER_MILLI_CPU
    if spec.mem_bytes > 0:
        host["Memory"] = spec.mem_bytes
        host["MemorySwap"] = spec.mem_bytes
    if spec.mounts:
        # Mounts rather than Binds: no "src:dst:mode" string to split on colons, and a
        # missing source is an error instead of an empty directory created on the host.
        host["Mounts"] = [
            {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
            for m in spec.mounts
        ]
    if spec.ipc_host:
        host["IpcMode"] = "host"
    if spec.groups:
        host["GroupAdd"] = [str(g) for g in spec.groups]
    if spec.gpu_uuids:
        host["DeviceRequests"] = [
            {
                "Driver": "nvidia",
                "DeviceIDs": list(spec.gpu_uuids),
                "Capabilities": [["gpu"]],
            }
        ]
    config: dict[str, Any] = {
        "Image": spec.image,
        "Labels": dict(spec.labels),
        "Env": [f"{k}={v}" for k, v in sorted(container_env(spec, image_env or {}).items())],
        "Tty": spec.tty,
        "OpenStdin": spec.tty,
        "AttachStdin": False,
        "HostConfig": host,
    }
    if spec.command:
        config["Cmd"] = list(spec.command)
    return config


def image_infos(listed: list[dict[str, Any]]) -> list[ImageInfo]:
    """One ImageInfo per tag of ``GET /images/json``'s images, by tag. The digest is the
    repo digest of the tag's own name (an image pushed to two registries has one each)."""
    out: list[ImageInfo] = []
    for image in listed:
        digests = {
            d.rpartition("@")[0]: d.rpartition("@")[2] for d in image.get("RepoDigests") or ()
        }
        for ref in image.get("RepoTags") or ():
            if ref == "<none>:<none>":
                continue
            name = ref.rpartition(":")[0] if ":" in ref.rsplit("/", 1)[-1] else ref
            out.append(
                ImageInfo(
                    ref=ref,
                    id=str(image.get("Id", "")),
                    digest=digests.get(name),
                    size=int(image.get("Size") or 0),
                )
            )
    return sorted(out, key=lambda i: i.ref)


class PullTally:
    """A pull's bytes so far and in all, from the engine's progress messages: each layer's
    ``Downloading`` progress, and its whole size once it is complete."""

    def __init__(self) -> None:
        self._layers: dict[str, tuple[int, int]] = {}  # id -> (current, total)

    def add(self, message: dict[str, Any]) -> bool:
        """Count one message; whether it changed the tally."""
        layer, status = message.get("id"), message.get("status", "")
        if not isinstance(layer, str):
            return False
        detail = message.get("progressDetail") or {}
        current, total = self._layers.get(layer, (0, 0))
        if status == "Downloading" and detail.get("total"):
            current, total = int(detail.get("current") or 0), int(detail["total"])
        elif status in ("Download complete", "Pull complete", "Already exists"):
            current = total
        elif status not in ("Pulling fs layer", "Waiting"):
            return False  # "Pulling from <name>" (its id is the tag), extracting, ...
        if self._layers.get(layer) == (current, total):
            return False
        self._layers[layer] = (current, total)
        return True

    @property
    def current(self) -> int:
        return sum(c for c, _ in self._layers.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self._layers.values())


def _translate(e: Exception, what: str) -> ContainerError:
    """The port's error for a foreign one: no answer or a 5xx is retryable, else permanent."""
    if isinstance(e, DockerError):
        if e.status == _NO_ANSWER or e.status >= 500:
            return RuntimeUnavailable(f"{what}: {e}")
        return ContainerError(f"{what}: {e}")
    return RuntimeUnavailable(f"{what}: {type(e).__name__}: {e}")


@contextmanager
def _engine_call(what: str) -> Iterator[None]:
    """Wrap every foreign error of the block in the port's hierarchy. A call that expects
    some answers (a 404 meaning "none") catches DockerError inside it and re-raises the
    others."""
    try:
        yield
    except (DockerError, *_TRANSPORT_ERRORS) as e:
        raise _translate(e, what) from e


def _info(data: dict[str, Any]) -> ContainerInfo:
    """ContainerInfo from ``GET /containers/{id}/json``."""
    state = data.get("State") or {}
    running = bool(state.get("Running"))
    # A created-but-never-started container has ExitCode 0 too; it has not exited.
    exited = not running and state.get("Status") in ("exited", "dead")
    networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
    addresses = [n.get("IPAddress") for n in networks.values() if n and n.get("IPAddress")]
    return ContainerInfo(
        id=data["Id"],
        name=str(data.get("Name", "")).lstrip("/"),
        labels=dict((data.get("Config") or {}).get("Labels") or {}),
        running=running,
        exit_code=int(state.get("ExitCode", 0)) if exited else None,
        host=addresses[0] if addresses else None,
    )


def _engine_client(url: str | None, timeout: aiohttp.ClientTimeout, limit: int) -> aiodocker.Docker:
    """An aiodocker client whose connector opens at most ``limit`` connections at once
    (0: no limit). Raises RuntimeUnavailable if no engine is configured."""
    try:
        docker = aiodocker.Docker(url=url, timeout=timeout)
    except (ValueError, AssertionError) as e:
        # aiodocker asserts when neither DOCKER_HOST nor a local socket exists.
        raise RuntimeUnavailable(f"no Docker engine configured: {e}") from e
    # aiodocker makes the connector the address calls for (a unix socket, TCP with or
    # without TLS, ssh, a named pipe) with aiohttp's default limit of 100, and takes no
    # limit of its own; the connector reads its limit at every acquire, so setting it
    # before the first call is the limit.
    docker.connector._limit = limit
    return docker


class DockerRuntime:
    """A Docker engine as a ContainerRuntime. Use ``async with`` (``wait`` needs it: its
    stream of the engine's events runs in the block) or call ``close()``.

    ``url`` overrides ``DOCKER_HOST``. Plain calls share ``pool_size`` connections and
    time out after ``request_timeout_s``, the wait for a connection included
    (RuntimeUnavailable). A stop may take its grace on top; reading an output may take
    as long as the output keeps coming (``request_timeout_s`` without a byte ends it);
    an exec, a pull and a wait have no limit. ``sweep_s``: how often the waits' stream is
    checked against the containers themselves (``docker_exits``). The aiohttp sessions
    are made on first use, inside the event loop.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        network_mode: str = "none",
        init: bool = True,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        pool_size: int = 100,
        sweep_s: float = 60.0,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self._url = url
        self._network_mode = network_mode
        self._init = init
        self._request_timeout_s = request_timeout_s
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=connect_timeout_s
        )
        self._pool_size = pool_size
        self._docker: aiodocker.Docker | None = None  # plain calls
        self._long: aiodocker.Docker | None = None  # a connection per call, no pool limit
        self._exits = ExitWatch(_ExitsOf(self), sweep_s=sweep_s)
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._watching = False
        self._networks: set[str] = set()  # serving networks known to exist
        self._network_lock = anyio.Lock()

    def _client(self) -> aiodocker.Docker:
        """The client of plain calls: the engine answers them at once."""
        if self._docker is None:
            self._docker = _engine_client(self._url, self._timeout, self._pool_size)
        return self._docker

    def _streams(self) -> aiodocker.Docker:
        """The client of the calls whose length a container or a registry decides: each
        on a connection of its own, so none waits behind another."""
        if self._long is None:
            self._long = _engine_client(self._url, self._timeout, 0)
        return self._long

    async def close(self) -> None:
        """Close the HTTP sessions; the runtime may be used again (new ones are made, and
        the waits go on, told by a new stream of events)."""
        self._exits.reconnect()
        clients, self._docker, self._long = (self._docker, self._long), None, None
        for docker in clients:
            if docker is not None:
                await docker.close()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, tg, self._stack, self._tg, self._watching = self._stack, self._tg, None, None, False
        try:
            if tg is not None:
                tg.cancel_scope.cancel()  # the watch of exits: its waiters are told
            if stack is not None:
                await stack.__aexit__(exc_type, exc, tb)
        finally:
            # Left by cancellation too (the shutdown path): the sessions are closed all the
            # same, or their sockets would be left open.
            with anyio.CancelScope(shield=True):
                await self.close()

    async def ping(self) -> None:
        """Return when the engine answers; RuntimeUnavailable otherwise."""
        with _engine_call("ping"):
            await self._client().version()

    async def images(self) -> list[str]:
        with _engine_call("list images"):
            listed = await self._client().images.list()
        return sorted(
            tag for image in listed for tag in image.get("RepoTags") or () if tag != "<none>:<none>"
        )

    async def image_details(self) -> list[ImageInfo]:
        with _engine_call("list images"):
            listed = await self._client().images.list()
        return image_infos(listed)

    async def pull(self, image: str, progress: PullProgress) -> None:
        """``POST /images/create`` of ``image``, its progress stream read to the end: each
        message that changed the tally is told to ``progress``. An error in the stream is
        the registry's: ImageNotFound for an image it lacks, else ContainerError."""
        tally = PullTally()
        with _engine_call(f"pull {image}"):
            try:
                async for message in self._streams().images.pull(image, stream=True):
                    if isinstance(message, dict) and tally.add(message):
                        await progress(tally.current, tally.total)
            except DockerStreamError as e:
                text = str(e).lower()
                if any(words in text for words in _NOT_IN_REGISTRY):
                    raise ImageNotFound(f"pull {image}: {e}") from e
                raise ContainerError(f"pull {image}: {e}") from e
            except DockerError as e:
                if e.status == 404:
                    raise ImageNotFound(f"pull {image}: {e}") from e
                if e.status == _NO_ANSWER:
                    raise
                raise ContainerError(f"pull {image}: {e}") from e
        await progress(tally.current, tally.total)

    async def run(self, spec: ContainerSpec) -> ContainerInfo:
        """Create and start; an existing container of that name is returned as it is.

        A container left created-but-not-started (a crash between create and start) is
        started. A failed start removes the container and raises ContainerError, so a
        retry starts from scratch. Raises ImageNotFound, RuntimeUnavailable, ContainerError.

        A new session's path is two or three calls (the image's environment when the spec
        prepends to it, create, start): the name is created without looking first (a 409
        says it exists, and only then is it inspected), and a container this call started
        is returned running without another look (if its command has already exited,
        ``wait`` says so at once), unless it joined a serving network: then it is looked
        at once, for its address there.
        """
        if spec.network is not None:
            await self._network(spec.network)
        try:
            created = await self._create(spec)
        except ImageNotFound:
            if await self._inspect(spec.name) is None:
                raise
            created = None  # its image has gone since: the container is still there
        if created is not None:
            await self._start(created, spec.name)
            if spec.network is None:
                return ContainerInfo(
                    id=created, name=spec.name, labels=dict(spec.labels), running=True
                )
        data = await self._inspect(created or spec.name)
        if data is None:
            raise ContainerError(f"container {spec.name} vanished while it was being made")
        if (data.get("State") or {}).get("Status") == "created":
            await self._start(data["Id"], spec.name)
            data = await self._inspect(data["Id"])
            if data is None:
                raise ContainerError(f"container {spec.name} vanished right after start")
        return _info(data)

    async def _network(self, name: str) -> None:
        """Make the serving network ``name`` unless it exists: an internal bridge (no
        route out through the engine's NAT), labelled as fgpu's. Two agents on one engine
        making it at the same moment may still make two (the engine refuses containers
        a name two networks share: remove one). Raises
        RuntimeUnavailable or ContainerError."""
        # The engine takes a second network of one name (its duplicate check is gone), and
        # a name two networks share is refused to every container: one look-and-make at a
        # time in this runtime, and a network made already is found by its exact name.
        async with self._network_lock:
            if name in self._networks:
                return
            config = {
                "Name": name,
                "Driver": "bridge",
                "Internal": True,
                "Labels": {"fgpu.serving": "1"},
            }
            with _engine_call(f"create network {name}"):
                listed = await self._client().networks.list(filters={"name": [name]})
                if not any(n.get("Name") == name for n in listed):
                    await self._client().networks.create(config)
            self._networks.add(name)

    async def _create(self, spec: ContainerSpec) -> str | None:
        """Create ``spec``'s container; its id, or None if one of that name exists."""
        base = await self._image_env(spec.image) if spec.env_prepend else {}
        config = container_config(
            spec, network_mode=self._network_mode, init=self._init, image_env=base
        )
        with _engine_call(f"create {spec.name}"):
            try:
                created = await self._client().containers.create(config, name=spec.name)
            except DockerError as e:
                if e.status == 404:
                    raise ImageNotFound(f"image {spec.image!r} is not on this engine") from e
                if e.status == 409:  # the name is taken: made before, or by another caller
                    return None
                raise
        return str(created.id)

    async def _image_env(self, image: str) -> dict[str, str]:
        """The environment ``image`` sets (its ``Config.Env``). Raises ImageNotFound."""
        with _engine_call(f"inspect image {image}"):
            try:
                data = await self._client().images.inspect(image)
            except DockerError as e:
                if e.status == 404:
                    raise ImageNotFound(f"image {image!r} is not on this engine") from e
                raise
        return env_from_list((data.get("Config") or {}).get("Env"))

    async def _inspect(self, ref: str) -> dict[str, Any] | None:
        """The engine's record of a container by id or name; None when there is none."""
        with _engine_call(f"inspect {ref}"):
            try:
                data: dict[str, Any] = await self._client().containers.container(ref).show()
            except DockerError as e:
                if e.status == 404:
                    return None
                raise
        return data

    async def _start(self, container_id: str, name: str) -> None:
        container = self._client().containers.container(container_id)
        with _engine_call(f"start {name}"):
            try:
                await container.start()
            except DockerError as e:
                if e.status == _NO_ANSWER:
                    raise
                # The engine answered: the command, a device request or a mount is wrong
                # for this container (runc failures come back as 500s). Not worth
                # retrying as is.
                await self.remove(container_id, stop_timeout_s=0)
                raise ContainerError(f"start {name}: {e}") from e

    async def list(self, labels: dict[str, str]) -> list[ContainerInfo]:
        filters = {"label": [f"{k}={v}" for k, v in sorted(labels.items())]}
        with _engine_call("list containers"):
            listed = await self._client().containers.list(all=True, filters=filters)
        infos = []
        for container in listed:
            # The listing has no exit code; inspect each. One removed meanwhile is skipped.
            data = await self._inspect(container.id)
            if data is not None:
                infos.append(_info(data))
        return infos

    async def wait(self, container_id: str) -> int:
        """The exit code, at once if it has exited already. ContainerError if unknown, or
        removed before its exit was seen; RuntimeUnavailable if the runtime's block ends
        meanwhile, or if the engine does not answer and ``container_id`` is a name (a full
        id is waited on while the engine is away: it is looked at again once it is back).
        Told by the stream of the engine's events, not by a request that would hold a
        connection for the container's life."""
        if self._tg is None:
            raise RuntimeError("DockerRuntime.wait needs the runtime entered: async with")
        if not self._watching:
            self._watching = True
            self._tg.start_soon(self._exits.run)
        return await self._exits.wait(container_id)

    async def remove(self, container_id: str, *, stop_timeout_s: float = 5.0) -> None:
        """Stop (SIGTERM, SIGKILL after whole seconds, rounded up) and remove; gone is fine.

        The stop, on a connection of its own, is bounded by its grace and
        ``request_timeout_s``; the removal is a plain call."""
        grace = max(0, math.ceil(stop_timeout_s))
        stop_limit = aiohttp.ClientTimeout(
            total=grace + self._request_timeout_s, sock_connect=self._timeout.sock_connect
        )
        with _engine_call(f"remove {container_id}"):
            try:
                await (
                    self._streams()
                    .containers.container(container_id)
                    .stop(t=grace, timeout=stop_limit)
                )
                await (
                    self._client()
                    .containers.container(container_id)
                    .delete(force=True, timeout=self._timeout)
                )
            except DockerError as e:
                if e.status in (404, 409):  # already gone; a removal already under way
                    return
                raise

    async def cpu_ns(self, container_id: str) -> int | None:
        # one-shot: the engine answers at once instead of waiting for a second reading.
        path = f"containers/{container_id}/stats"
        with _engine_call(f"stats {container_id}"):
            try:
                stats = await self._client()._query_json(
                    path, params={"stream": "0", "one-shot": "1"}
                )
            except DockerError as e:
                if e.status == 404:
                    return None
                raise
        usage = ((stats or {}).get("cpu_stats") or {}).get("cpu_usage") or {}
        total = usage.get("total_usage")
        return total if isinstance(total, int) else None

    async def logs(self, container_id: str, *, tail: int = 200) -> str:
        """On a connection of its own, for as long as the output keeps coming."""
        container = self._streams().containers.container(container_id)
        reading = aiohttp.ClientTimeout(
            sock_read=self._request_timeout_s, sock_connect=self._timeout.sock_connect
        )
        with _engine_call(f"logs {container_id}"):
            lines = await container.log(stdout=True, stderr=True, tail=tail, timeout=reading)
        return "".join(lines)

    @asynccontextmanager
    async def follow_logs(
        self, container_id: str, *, tail: int = 200
    ) -> AsyncIterator[OutputFollow]:
        """``GET /containers/{id}/logs?follow=1`` on a connection of its own, with no read
        limit (a container may be quiet for hours), read only as the reader asks: what is
        not read waits in the engine, held back by the socket's flow control."""
        what = f"logs {container_id}"
        if await self._inspect(container_id) is None:
            raise ContainerError(f"{what}: no such container")
        lasting = aiohttp.ClientTimeout(
            connect=self._request_timeout_s, sock_connect=self._timeout.sock_connect
        )
        container = self._streams().containers.container(container_id)
        lines = container.log(stdout=True, stderr=True, follow=True, tail=tail, timeout=lasting)
        try:
            yield _Followed(lines, what)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*_TRANSPORT_ERRORS):
                await lines.aclose()  # type: ignore[attr-defined]

    async def exec(
        self, container_id: str, argv: Sequence[str], *, keep: int = EXEC_OUTPUT_KEPT
    ) -> ExecResult:
        """``POST /containers/{id}/exec`` and its start, attached, reading the output until
        it ends; then the exit code from the exec's inspect. A 404 (no such container) or
        409 (not running) is ContainerError. ContainerError too if the engine records no
        exit while the command, its output closed, still runs."""
        container = self._streams().containers.container(container_id)
        out, err = _Kept(keep), _Kept(keep)
        with _engine_call(f"exec in {container_id}"):
            execution = await container.exec(list(argv), stdout=True, stderr=True, tty=False)
            async with execution.start(detach=False) as stream:
                while (message := await stream.read_out()) is not None:
                    (err if message.stream == _STDERR else out).add(message.data)
            code = await _exit_of(execution)
        if code is None:
            raise ContainerError(f"exec in {container_id}: its output ended, it runs on")
        return ExecResult(
            exit_code=code,
            stdout=bytes(out.kept),
            stderr=bytes(err.kept),
            stdout_bytes=out.seen,
            stderr_bytes=err.seen,
        )

    @asynccontextmanager
    async def open_exec(
        self,
        container_id: str,
        argv: Sequence[str],
        *,
        tty: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ExecChannel]:
        """The engine's exec, attached with its input open (a hijacked connection). A 404
        (no such container) or 409 (not running) is ContainerError."""
        container = self._streams().containers.container(container_id)
        what = f"exec in {container_id}"
        with _engine_call(what):
            # Without a terminal, stdout alone: a relay's complaints must not go into the
            # bytes it carries.
            execution = await container.exec(
                list(argv), stdin=True, stdout=True, stderr=tty, tty=tty, environment=env
            )
            stream = execution.start(detach=False)
            await stream.__aenter__()
        try:
            yield _Attached(execution, stream, what)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(*_TRANSPORT_ERRORS):
                await stream.close()


class _ExitsOf:
    """A DockerRuntime's engine as its ExitWatch asks it (``docker_exits.ExitEngine``)."""

    def __init__(self, runtime: DockerRuntime) -> None:
        self._rt = runtime

    async def clock(self) -> int | None:
        """The engine's time, from the ``Date`` of its answer to a ping."""
        with _engine_call("ping"):
            async with self._rt._client()._query("_ping", versioned_api=False) as response:
                await response.read()
                date = response.headers.get("Date")
        try:
            return int(email.utils.parsedate_to_datetime(date).timestamp()) if date else None
        except (TypeError, ValueError):
            return None

    @asynccontextmanager
    async def events(self, since: int | None) -> AsyncIterator[EventStream]:
        filters = {"type": ["container"], "event": ["die", "destroy"]}
        params = {"filters": json.dumps(filters)}
        if since is not None:
            params["since"] = str(since)
        # It lasts the runtime's life and is quiet while nothing ends: no total, no read
        # limit. A connection of its own.
        lasting = aiohttp.ClientTimeout(
            connect=self._rt._request_timeout_s, sock_connect=self._rt._timeout.sock_connect
        )
        with _engine_call("events"):
            response = await self._rt._streams()._do_query(
                "events", "GET", params=params, timeout=lasting
            )
        try:
            yield _EventLines(response)
        finally:
            response.close()

    async def look(self, ref: str) -> Look | None:
        data = await self._rt._inspect(ref)
        if data is None:
            return None
        state = data.get("State") or {}
        return Look(
            id=str(data["Id"]),
            running=bool(state.get("Running")),
            exit_code=int(state.get("ExitCode") or 0),
        )

    async def running(self) -> dict[str, bool]:
        with _engine_call("list containers"):
            listed = await self._rt._client()._query_json("containers/json", params={"all": "1"})
        return {str(c["Id"]): c.get("State") in _RUNNING_STATES for c in listed}


class _EventLines:
    """The engine's events response, one JSON object a line."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def next(self) -> dict[str, Any] | None:
        while line := await self._response.content.readline():
            if line.strip():
                event = json.loads(line)
                return event if isinstance(event, dict) else {}
        return None  # the engine ended it


async def _exit_of(execution: Exec) -> int | None:
    """An exec's exit code once its output has ended; None if the engine records none
    (a command that closed its streams and runs on)."""
    for _ in range(_EXIT_POLLS):
        inspected = await execution.inspect()
        if not inspected.get("Running") and inspected.get("ExitCode") is not None:
            return int(inspected["ExitCode"])
        await anyio.sleep(_EXIT_POLL_S)
    return None


class _Attached:
    """An exec attached with its input open, as an ExecChannel."""

    def __init__(self, execution: Exec, stream: Stream, what: str) -> None:
        self._execution, self._stream, self._what = execution, stream, what

    async def read(self) -> bytes | None:
        with _engine_call(self._what):
            message = await self._stream.read_out()
        return None if message is None else bytes(message.data)

    async def write(self, data: bytes) -> None:
        with _engine_call(self._what):
            try:
                await self._stream.write_in(data)
            except RuntimeError as e:  # aiodocker: "Cannot write to closed transport"
                raise ContainerError(f"{self._what}: its input is closed") from e

    async def resize(self, rows: int, cols: int) -> None:
        with _engine_call(self._what):
            await self._execution.resize(h=rows, w=cols)

    async def exit_code(self) -> int | None:
        with _engine_call(self._what):
            return await _exit_of(self._execution)


class _Followed:
    """A container's output followed, as an OutputFollow."""

    def __init__(self, lines: AsyncIterator[str], what: str) -> None:
        self._lines, self._what = lines, what

    async def read(self) -> bytes | None:
        with _engine_call(self._what):
            text = await anext(self._lines, None)
        return None if text is None else text.encode()


class _Kept:
    """The first ``limit`` bytes of a stream, and how many it had in all."""

    def __init__(self, limit: int) -> None:
        self.limit, self.kept, self.seen = limit, bytearray(), 0

    def add(self, data: bytes) -> None:
        self.seen += len(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
