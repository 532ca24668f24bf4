"""What the serving actor does to bring each endpoint to what it wants. Pure.

For every endpoint, in one pass over its replicas and the sessions the fold knows:

* a replica whose session ended is ``gone`` (out of rotation first, if it was in);
* a provisioning replica whose session runs is ``warming``, at the session's address
  and the revision's port;
* a warming replica a router found healthy is ``healthy`` and in rotation; a healthy one
  found unhealthy is ``unhealthy``, out of rotation, and drained to be replaced;
* a warming replica not found healthy within its revision's warm-up deadline is
  ``unhealthy`` and drained to be replaced (``services.domain.serving.timers``);
* a replica beyond its revision's wanted count (or of a revision no longer wanted, or of
  a removed endpoint) is taken out of rotation and ``draining``; once that is on the log
  (a later pass: proxies are told before the session stops) and its revision's drain
  time has passed on the log's clock, its session is destroyed;
* every wanted slot (revision, ordinal) no live replica fills gets a new session.

Everything a pass writes is derived from the log: a replica's session id from the
endpoint's creation, the slot and its generation; a destroy's id from the session's.
So a pass repeated after a crash asks for nothing twice (the same ids, refused by the
log's dedupe or by the fold).
"""

import hashlib
from collections.abc import Container, Mapping
from typing import Any

from events import (
    AnyEvent,
    ReplicaChanged,
    ReplicaPhase,
    ReplicaRotation,
    SessionDestroyRequested,
    SessionRequested,
    SessionType,
    VfolderMount,
)
from events import subjects as subj
from services.domain.provenance import Provenance, stamp
from services.domain.records import SessionView
from services.domain.serving.state import (
    EndpointView,
    ReplicaView,
    ServingState,
    live_replicas,
    slot,
)
from services.domain.serving.timers import grace_over, warmup_over
from services.domain.status import ENDED, SessionStatus

__all__ = ["destroy_id", "reconcile", "replica_session_id"]

P = ReplicaPhase
Item = tuple[str, AnyEvent]


def _digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()


def replica_session_id(ep: EndpointView, revision: int, ordinal: int, generation: int) -> str:
    """The session of a slot's ``generation``-th replica: derived from the id of the
    endpoint's creation, which only readers of the log know."""
    return "s" + _digest("replica", ep.created_id, revision, ordinal, generation)[:12]


def destroy_id(session_id: str) -> str:
    return _digest("drain", session_id)[:32]


def reconcile(
    serving: ServingState,
    sessions: Mapping[str, SessionView],
    destroys_asked: Container[str],
    prov: Provenance,
    ended: Container[str] = (),
) -> list[Item]:
    """The events that move every endpoint toward its targets (see the module);
    ``ended``: the ids of sessions that ended and are in ``sessions`` no more."""
    out: list[Item] = []
    for ep in list(serving.endpoints.values()):
        for r in list(ep.replicas.values()):
            v = sessions.get(r.session_id)
            if v is None and r.session_id in ended:
                out += [*_out(ep, r, prov), _changed(ep, r, P.GONE, prov, reason=_LET_GO)]
                continue
            if v is not None and v.status not in ENDED and warmup_over(serving, ep, r):
                out += _late(ep, r, prov)
                continue
            held = r.phase is P.DRAINING and not grace_over(serving, ep, r)
            out += _observe(ep, r, v, destroys_asked, prov, held=held)
        out += _surplus(ep, prov)
        out += _missing(ep, sessions, ended, prov)
    return out


_LET_GO = "its session ended"


def _record(
    ep: EndpointView, slot_of: tuple[str, int, int, int], phase: P, prov: Provenance, **kw: object
) -> Item:
    """``replica.changed`` of the replica ``slot_of`` (session, revision, ordinal,
    generation) entering ``phase``."""
    session_id, revision, ordinal, generation = slot_of
    e = stamp(
        ReplicaChanged,
        prov,
        endpoint_id=ep.endpoint_id,
        session_id=session_id,
        revision=revision,
        ordinal=ordinal,
        generation=generation,
        phase=phase,
        **kw,
    )
    return subj.SERVING, e


def _changed(ep: EndpointView, r: ReplicaView, phase: P, prov: Provenance, **kw: object) -> Item:
    return _record(ep, (r.session_id, r.revision, r.ordinal, r.generation), phase, prov, **kw)


def _rotation(ep: EndpointView, r: ReplicaView, on: bool, prov: Provenance) -> Item:
    e = stamp(
        ReplicaRotation, prov, endpoint_id=ep.endpoint_id, session_id=r.session_id, in_rotation=on
    )
    return subj.SERVING, e


def _out(ep: EndpointView, r: ReplicaView, prov: Provenance) -> list[Item]:
    return [_rotation(ep, r, False, prov)] if r.in_rotation else []


def _observe(
    ep: EndpointView,
    r: ReplicaView,
    v: SessionView | None,
    destroys_asked: Container[str],
    prov: Provenance,
    *,
    held: bool = False,
) -> list[Item]:
    """What replica ``r``'s session (``v``; None: not folded yet) and its health say
    (``held``: a draining one's grace is not over, its session is not stopped yet)."""
    if v is None:
        return []
    if v.status in ENDED:
        why = v.reason or f"its session ended ({v.status})"
        return [*_out(ep, r, prov), _changed(ep, r, P.GONE, prov, reason=why)]
    if r.phase is P.PROVISIONING and v.status is SessionStatus.RUNNING:
        port = ep.revisions[r.revision].port
        return [_changed(ep, r, P.WARMING, prov, host=v.host, port=port, reason="running")]
    if r.phase in (P.WARMING, P.UNHEALTHY) and r.reported_healthy is True:
        return [_changed(ep, r, P.HEALTHY, prov), _rotation(ep, r, True, prov)]
    if r.phase is P.HEALTHY and r.reported_healthy is False:
        return [
            *_out(ep, r, prov),
            _changed(ep, r, P.UNHEALTHY, prov, reason="its health check failed"),
            _changed(ep, r, P.DRAINING, prov, reason="replaced: unhealthy"),
        ]
    if held:
        return []
    if r.phase is P.DRAINING and not r.in_rotation and v.status is not SessionStatus.TERMINATING:
        d = destroy_id(r.session_id)
        if d not in destroys_asked:
            return [_destroy(ep, r, d, prov)]
    return []


def _late(ep: EndpointView, r: ReplicaView, prov: Provenance) -> list[Item]:
    """A replica that missed its warm-up deadline: replaced as an unhealthy one is."""
    why = f"not healthy within {ep.revisions[r.revision].warmup_s:g}s"
    return [
        _changed(ep, r, P.UNHEALTHY, prov, reason=why),
        _changed(ep, r, P.DRAINING, prov, reason=f"replaced: {why}"),
    ]


def _envelope(event_id: str, ep: EndpointView, prov: Provenance) -> dict[str, Any]:
    """The envelope of a request the serving actor makes for ``ep``'s owner: its id
    derived (so a request made again is the same one), correlated with the endpoint."""
    return {
        "id": event_id,
        "at": prov.at,
        "actor": prov.actor,
        "causation_id": prov.causation_id,
        "correlation_id": ep.endpoint_id,
    }


def _destroy(ep: EndpointView, r: ReplicaView, d: str, prov: Provenance) -> Item:
    e = SessionDestroyRequested(
        **_envelope(d, ep, prov), session_id=r.session_id, requester=ep.owner
    )
    return subj.request(ep.owner, r.session_id), e


def _wanted(ep: EndpointView) -> set[tuple[int, int]]:
    if ep.removed:
        return set()
    return {(t.revision, k) for t in ep.targets for k in range(t.replicas)}


def _surplus(ep: EndpointView, prov: Provenance) -> list[Item]:
    """Drain live replicas no wanted slot needs (of two in one slot, the older)."""
    wanted = _wanted(ep)
    seen: set[tuple[int, int]] = set()
    out: list[Item] = []
    for r in sorted(live_replicas(ep), key=lambda r: -r.generation):
        key = (r.revision, r.ordinal)
        if key in wanted and key not in seen:
            seen.add(key)
            continue
        out += [*_out(ep, r, prov), _changed(ep, r, P.DRAINING, prov, reason="not wanted")]
    return out


def _missing(
    ep: EndpointView,
    sessions: Mapping[str, SessionView],
    ended: Container[str],
    prov: Provenance,
) -> list[Item]:
    """A new replica for each wanted slot no live replica fills (not a stalled one)."""
    filled = {(r.revision, r.ordinal) for r in live_replicas(ep)}
    out: list[Item] = []
    for revision, ordinal in sorted(_wanted(ep) - filled):
        key = slot(revision, ordinal)
        if key in ep.stalled:
            continue
        generation = ep.next_generation.get(key, 0)
        sid = replica_session_id(ep, revision, ordinal, generation)
        if sid in sessions or sid in ended:  # asked for already: its record is on its way
            continue
        out += _request(ep, revision, ordinal, generation, sid, prov)
    return out


def _request(
    ep: EndpointView, revision: int, ordinal: int, generation: int, sid: str, prov: Provenance
) -> list[Item]:
    spec = ep.revisions[revision]
    mounts = () if spec.model is None else (VfolderMount(name=spec.model, read_only=True),)
    asked = SessionRequested(
        **_envelope(_digest("request", sid)[:32], ep, prov),
        session_id=sid,
        owner=ep.owner,
        image=spec.image,
        command=spec.command,
        slots=spec.slots,
        name=f"{ep.name}-r{revision}-{ordinal}",
        project=ep.project,
        cpu_only=spec.cpu_only,
        group=ep.group,
        session_type=SessionType.INFERENCE,
        mounts=mounts,
        env=spec.env,
        secret_env=spec.secret_env,
    )
    provisioning = _record(ep, (sid, revision, ordinal, generation), P.PROVISIONING, prov)
    return [(subj.request(ep.owner, sid), asked), provisioning]
