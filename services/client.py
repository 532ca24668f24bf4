"""What a user does through the log: ask for sessions, destroy them, watch them.

Used by the CLI, the demo, the tests and the benchmark. Writes are events on the user's
own subjects (``fgpu.req.<access key>.>``, ``fgpu.admin.<access key>.>``): appended to
the log, or with tenancy handed to the intake (a ``RequestSender``), which writes them
there; reads fold the log.
"""

import secrets
from collections.abc import Callable, Iterable, Sequence
from contextlib import aclosing, suppress
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

from msgspec.structs import replace

from events import (
    AdminCommand,
    AdminRequested,
    AnyEvent,
    CreateVfolder,
    PipelineCancelRequested,
    PipelineRerunRequested,
    PipelineRunRequested,
    PipelineScheduleRemoved,
    PipelineScheduleSet,
    PipelineSpec,
    PolicySet,
    SecretRemoved,
    SecretSet,
    ServeCommand,
    ServeRequested,
    SessionDestroyRequested,
    SessionRequested,
    SessionType,
    Slots,
    VfolderMount,
)
from events import subjects as subj
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state import fold
from services.domain.provenance import Provenance, stamp
from services.domain.request_ids import RequestIds, new_request_id
from services.domain.secrets import name_problem
from services.ports import Clock, ConcurrencyConflict, EventLog, RequestSender

__all__ = ["Client", "SessionAsk", "new_session_id", "session_requests"]


def new_session_id() -> str:
    return "s" + secrets.token_hex(6)


class SessionAsk(TypedDict, total=False):
    """What each session of a request asks for: ``SessionRequested``'s fields of the same
    names, whose defaults stand for those left out (sequences given as any iterable)."""

    image: Required[str]
    slots: Required[Slots]
    command: Iterable[str]
    priority: int
    name: str | None
    project: str | None
    gpu_models: Iterable[str]
    cpu_only: bool
    group: str | None
    lifetime_s: int | None
    session_type: SessionType | None
    mounts: Iterable[VfolderMount]
    secret_env: Iterable[tuple[str, str]]


def session_requests(
    ids: RequestIds, at: datetime, count: int = 1, **ask: Unpack[SessionAsk]
) -> list[SessionRequested]:
    """The ``count`` requests of request ``ids``, each asking for ``ask``, made at ``at``
    in the name of ``ids.access_key``, exactly as ``Client.create`` sends them: a door may
    check one (``validation.invalid_request``, as the fold does) before sending them all
    (``Client.send_requests``). Pure: the same arguments, the same requests."""
    prov = Provenance(ids.access_key, at, None, ids.event("correlation"))
    fields: dict[str, object] = {
        **ask,
        "command": tuple(ask.get("command", ())),
        "gpu_models": tuple(ask.get("gpu_models", ())),
        "mounts": tuple(ask.get("mounts", ())),
        "secret_env": tuple(ask.get("secret_env", ())),
    }
    out = []
    for n in range(count):
        e = stamp(SessionRequested, prov, session_id=ids.session(n), owner=ids.access_key, **fields)
        out.append(replace(e, id=ids.event(str(n))))
    return out


class Client:
    """A user's requests, in the name of ``access_key``: appended to ``events``, or handed
    to the intake through ``sender`` when there is one (people on a cluster with tenancy
    may not append: the server lets them hand requests to the intake alone).

    Each request has a request id (given, else a fresh one), from which every id it puts
    on the log is made (``services.domain.request_ids``, keyed with ``secret``): sent
    again with the same request id, a request is stored once, never twice.
    """

    def __init__(
        self,
        events: EventLog,
        clock: Clock,
        access_key: str,
        *,
        sender: RequestSender | None = None,
        secret: str | None = None,
    ) -> None:
        if not subj.is_token(access_key):
            raise ValueError(f"access key {access_key!r} must be 1-64 letters, digits, - or _")
        self.events = events
        self.clock = clock
        self.access_key = access_key
        self.sender = sender
        self.secret = secret

    def _ids(self, request_id: str | None) -> RequestIds:
        return RequestIds(self.access_key, request_id or new_request_id(), self.secret)

    async def create(
        self, *, count: int = 1, request_id: str | None = None, **ask: Unpack[SessionAsk]
    ) -> list[str]:
        """Ask for ``count`` sessions (in ``project``; None: the user's default one), on a
        GPU of one of ``gpu_models`` (none: any), or with no GPU (``cpu_only``), in resource
        group ``group`` (None: the default one) for ``lifetime_s`` at most (None: the
        group's default), batch or interactive (``session_type``; None: batch with a
        command, else interactive), with the virtual folders ``mounts``; their ids, in
        order. They share a correlation id.

        All of them are stored or none (one atomic batch), and once: asked again with the
        same ``request_id``, the same sessions are asked for, which the log holds already
        (then this returns their ids as if it had stored them). Raises RequestsRefused
        (nothing was taken), OutcomeUnknown (ask again with the same request id), LogError.
        """
        requests = session_requests(self._ids(request_id), self.clock.now(), count, **ask)
        return await self.send_requests(requests)

    async def send_requests(self, requests: Sequence[SessionRequested]) -> list[str]:
        """Send ``requests`` (``session_requests``' of this client's access key), all of
        them or none, once; their session ids, in order. Raises as ``create``."""
        if any(e.owner != self.access_key for e in requests):
            raise ValueError(f"requests not made in the name of {self.access_key!r}")
        items = [(subj.request(self.access_key, e.session_id), e) for e in requests]
        if self.sender is not None:
            await self.sender.send([e for _, e in items])
        else:
            # The intake writes them so (``services.actors.intake``): all or none, and a
            # batch the log holds already is refused whole (it was this request's).
            with suppress(ConcurrencyConflict):
                await self.events.append_batch(
                    items, expect_subject=items[0][0], expected_last_subject_seq=0
                )
        return [e.session_id for _, e in items]

    async def destroy(self, session_id: str, *, request_id: str | None = None) -> str:
        """Ask to end ``session_id``; the id of the request (its answer names it as its
        cause). Asked again with the same ``request_id``, it is the same request.
        Raises as ``create``."""
        if not subj.is_token(session_id):
            raise ValueError(f"{session_id!r} is not a session id")
        e = stamp(
            SessionDestroyRequested,
            Provenance(self.access_key, self.clock.now()),
            session_id=session_id,
            requester=self.access_key,
        )
        e = replace(e, id=self._ids(request_id).event(f"destroy\0{session_id}"))
        await self._ask(subj.request(self.access_key, session_id), e)
        return e.id

    async def admin(self, command: AdminCommand, *, request_id: str | None = None) -> str:
        """Ask the registrar to apply ``command``; the request's id (its answer names it as
        its cause). Asked again with the same ``request_id``, it is the same request.
        Raises as ``create``."""
        e = stamp(
            AdminRequested,
            Provenance(self.access_key, self.clock.now()),
            requester=self.access_key,
            command=command,
        )
        e = replace(e, id=self._ids(request_id).event("admin"))
        await self._ask(subj.admin(self.access_key, e.id), e)
        return e.id

    async def pipeline_run(
        self,
        spec: PipelineSpec,
        *,
        project: str | None = None,
        request_id: str | None = None,
        folder_of: str | None = None,
    ) -> str:
        """Ask to run ``spec`` (its sessions in ``project``; None: the default one); the
        run's id. With ``folder_of`` (the requester's user), the run's folder is asked
        for with it, as that user's (``pipeline-<run id>``, its id the run's): both are
        handed in together, all or none. Asked again with the same ``request_id``, the
        same run, once."""
        ids = self._ids(request_id)
        run_id, now = ids.run(), self.clock.now()
        asked: list[AdminRequested | PipelineRunRequested] = []
        if folder_of is not None:
            folder = CreateVfolder(vfolder_id=run_id, name=f"pipeline-{run_id}", user=folder_of)
            asked.append(
                AdminRequested(
                    id=ids.event("pipeline-folder"),
                    at=now,
                    actor=self.access_key,
                    requester=self.access_key,
                    command=folder,
                )
            )
        asked.append(
            PipelineRunRequested(
                id=ids.event("pipeline-run"),
                at=now,
                actor=self.access_key,
                run_id=run_id,
                requester=self.access_key,
                spec=spec,
                project=project,
                folder=run_id if folder_of is not None else None,
                folder_request=asked[0].id if folder_of is not None else None,
            )
        )
        if self.sender is not None:
            await self.sender.send(asked)
            return run_id
        items: list[tuple[str, AnyEvent]] = [
            (
                subj.admin(self.access_key, e.id)
                if isinstance(e, AdminRequested)
                else subj.request(self.access_key, run_id),
                e,
            )
            for e in asked
        ]
        # One batch, as the intake writes them: appended one by one, the registrar could
        # make the folder before the run that waits for it were on the log.
        with suppress(ConcurrencyConflict):  # the log holds this request already
            await self.events.append_batch(
                items, expect_subject=items[0][0], expected_last_subject_seq=0
            )
        return run_id

    async def pipeline_cancel(self, run_id: str, *, request_id: str | None = None) -> str:
        """Ask to cancel run ``run_id``; the request's id. Raises as ``create``."""
        return await self._about_run(PipelineCancelRequested, run_id, request_id)

    async def pipeline_rerun(
        self, run_id: str, from_task: str, *, request_id: str | None = None
    ) -> str:
        """Ask to run ended run ``run_id`` again from ``from_task``; the request's id."""
        return await self._about_run(
            PipelineRerunRequested, run_id, request_id, from_task=from_task
        )

    async def pipeline_schedule(
        self,
        spec: PipelineSpec,
        cron: str,
        *,
        project: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Ask that ``spec`` be run at each time ``cron`` names; the schedule's id."""
        ids = self._ids(request_id)
        e = PipelineScheduleSet(
            id=ids.event("pipeline-schedule"),
            at=self.clock.now(),
            actor=self.access_key,
            schedule_id="c" + ids.run()[1:],
            requester=self.access_key,
            cron=cron,
            spec=spec,
            project=project,
        )
        await self._ask(subj.request(self.access_key, e.schedule_id), e)
        return e.schedule_id

    async def pipeline_unschedule(self, schedule_id: str, *, request_id: str | None = None) -> str:
        """Ask that schedule ``schedule_id`` run no more; the request's id."""
        if not subj.is_token(schedule_id):
            raise ValueError(f"{schedule_id!r} is not a schedule id")
        e = PipelineScheduleRemoved(
            id=self._ids(request_id).event(f"pipeline-unschedule\0{schedule_id}"),
            at=self.clock.now(),
            actor=self.access_key,
            schedule_id=schedule_id,
            requester=self.access_key,
        )
        await self._ask(subj.request(self.access_key, schedule_id), e)
        return e.id

    async def _about_run(
        self,
        kind: type[PipelineCancelRequested | PipelineRerunRequested],
        run_id: str,
        request_id: str | None,
        **fields: str,
    ) -> str:
        """A request of ``kind`` about run ``run_id``, sent; its id."""
        if not subj.is_token(run_id):
            raise ValueError(f"{run_id!r} is not a run id")
        tag = kind.__struct_config__.tag
        e = kind(
            id=self._ids(request_id).event(f"{tag}\0{run_id}"),
            at=self.clock.now(),
            actor=self.access_key,
            run_id=run_id,
            requester=self.access_key,
            **fields,
        )
        await self._ask(subj.request(self.access_key, run_id), e)
        return e.id

    async def serve(self, command: ServeCommand, *, request_id: str | None = None) -> str:
        """Ask the serving actor to apply ``command`` to an endpoint; the request's id
        (its answer names it as its cause). Asked again with the same ``request_id``, it
        is the same request. Raises as ``create``."""
        e = stamp(
            ServeRequested,
            Provenance(self.access_key, self.clock.now()),
            requester=self.access_key,
            command=command,
        )
        e = replace(e, id=self._ids(request_id).event("serve"))
        await self._ask(subj.request(self.access_key, e.id), e)
        return e.id

    async def secret_set(self, name: str, sealed: bytes, *, request_id: str | None = None) -> str:
        """Set this key's secret ``name`` to ``sealed`` (its value sealed to the
        cluster's secrets key: the clear value never reaches here); the request's id.
        Raises ValueError for a bad name, else as ``create``."""
        e = SecretSet(**self._secret_fields(SecretSet, name, request_id), sealed=sealed)
        await self._ask(subj.request(self.access_key, e.id), e)
        return e.id

    async def secret_remove(self, name: str, *, request_id: str | None = None) -> str:
        """Remove this key's secret ``name``; the request's id. Raises as ``secret_set``."""
        e = SecretRemoved(**self._secret_fields(SecretRemoved, name, request_id))
        await self._ask(subj.request(self.access_key, e.id), e)
        return e.id

    def _secret_fields(
        self, kind: type[SecretSet | SecretRemoved], name: str, request_id: str | None
    ) -> dict[str, Any]:
        """The fields of a request of ``kind`` about this key's secret ``name``."""
        problem = name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        tag = kind.__struct_config__.tag
        return {
            "id": self._ids(request_id).event(f"{tag}\0{name}"),
            "at": self.clock.now(),
            "actor": self.access_key,
            "owner": self.access_key,
            "name": name,
        }

    async def _ask(
        self,
        subject: str,
        e: SessionDestroyRequested
        | AdminRequested
        | ServeRequested
        | PipelineRunRequested
        | PipelineCancelRequested
        | PipelineRerunRequested
        | PipelineScheduleSet
        | PipelineScheduleRemoved
        | SecretSet
        | SecretRemoved,
    ) -> None:
        if self.sender is not None:
            await self.sender.send([e])
        else:
            await self.events.append(subject, e)

    async def set_policy(
        self, owner: str, *, max_sessions: int | None, max_slots: Slots | None
    ) -> None:
        e = stamp(
            PolicySet,
            Provenance(self.access_key, self.clock.now()),
            owner=owner,
            max_concurrent_sessions=max_sessions,
            max_slots=max_slots,
        )
        await self.events.append(subj.quota(owner), e)

    async def state(self) -> ClusterState:
        """The cluster as the log says now (the whole log folded: for tests and benches;
        the CLI reads the read API)."""
        s = ClusterState()
        async for batch in self.events.read(0):
            fold(batch, s)
        return s

    async def wait_until(
        self, done: Callable[[ClusterState], bool], state: ClusterState | None = None
    ) -> ClusterState:
        """Fold the log, new records as they come, until ``done(state)``.

        Never returns if that does not happen: put a deadline around it.
        """
        s = state if state is not None else ClusterState()
        if done(s):
            return s
        async with aclosing(self.events.tail(s.last_seq)) as batches:
            async for batch in batches:
                fold(batch, s)
                if done(s):
                    return s
        raise AssertionError("the log ended")
