"""Who may ask what of an endpoint, and what an allowed request decides. Pure.

An endpoint is its owner's (the key that created it: its replicas are that key's
sessions, charged to it). Its owner, an administrator of its domain, and a superadmin may
change it, scale it, mint and revoke its tokens, and remove it, as they may a session
(``services.domain.access.session_access``); with no tenancy, only its owner. A revoked
key, a removed user's and a service's may do nothing. A refusal about an endpoint the
requester may not see reads as one about an endpoint that does not exist. A revision
naming secrets is the owner's alone to add: its replicas open the owner's secrets.
"""

import re
from datetime import datetime

from events import (
    AddRevision,
    AnyEvent,
    AutoscaleRule,
    AutoscaleSet,
    CreateEndpoint,
    CreateToken,
    EndpointCreated,
    EndpointRemoved,
    PointEndpoint,
    RemoveEndpoint,
    ReplicasSet,
    RevisionAdded,
    RevisionSpec,
    RevisionTarget,
    RevokeToken,
    Role,
    RolloutEnded,
    RolloutPolicy,
    RolloutStarted,
    ScaleEndpoint,
    ServeCommand,
    ServeRequested,
    SetAutoscale,
    SetTraffic,
    TokenCreated,
    TokenRevoked,
)
from events import subjects as subj
from services.domain.container_spec import env_problem
from services.domain.image_ref import image_reference_problem
from services.domain.provenance import Provenance, stamp
from services.domain.refusal import Refusal
from services.domain.resources import MAX_AMOUNT
from services.domain.secrets import SecretBook, missing_secret, references_problem
from services.domain.serving.state import EndpointView, ServingState
from services.domain.tenancy.admin import DEFAULT, project_key
from services.domain.tenancy.groups import DEFAULT_GROUP, admission_problem
from services.domain.tenancy.model import Tenancy

__all__ = ["MAX_REPLICAS", "decide", "may_see", "policy_problem", "refusal", "rule_problem"]

MAX_REPLICAS = 64  # of one endpoint
MAX_WAIT_S = 3600.0  # the longest drain time or warm-up deadline
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def may_see(s: ServingState, t: Tenancy, key: str, endpoint_id: str) -> EndpointView | None:
    """The live endpoint if ``key`` may act on it (owner, its domain's admin, a
    superadmin; with no tenancy its owner alone), else None."""
    ep = s.endpoints.get(endpoint_id)
    if ep is None or ep.removed:
        return None
    if not t.on:
        return ep if ep.owner == key else None
    who = t.user_of(key)
    if who is None:
        return None
    if ep.owner == key or who.role is Role.SUPERADMIN:
        return ep
    return ep if who.role is Role.DOMAIN_ADMIN and who.domain == ep.domain else None


def refusal(
    s: ServingState, t: Tenancy, r: ServeRequested, now: datetime, secrets: SecretBook
) -> Refusal | None:
    """Why request ``r`` may not be applied now; None if it may. ``secrets``: every
    owner's, for a new revision's references to them."""
    c = r.command
    if t.on and t.user_of(r.requester) is None:
        return Refusal("forbidden", f"access key {r.requester} may not serve models")
    if isinstance(c, CreateEndpoint):
        return _create_refusal(s, t, r.requester, c) or _secrets_refusal(
            secrets, r.requester, r.requester, c.revision
        )
    ep = may_see(s, t, r.requester, c.endpoint_id)
    if ep is None:
        return Refusal("forbidden", f"no endpoint {c.endpoint_id} of yours")
    why = _change_refusal(ep, c, now)
    if why is None and isinstance(c, AddRevision):
        return _secrets_refusal(secrets, r.requester, ep.owner, c.revision)
    return why


def _secrets_refusal(
    secrets: SecretBook, requester: str, owner: str, spec: RevisionSpec
) -> Refusal | None:
    """A revision's replicas are ``owner``'s sessions and open ``owner``'s secrets: only
    the owner names them (an administrator who may change the endpoint could otherwise
    run a command of its choosing with them), and only ones it has."""
    if not spec.secret_env:
        return None
    if requester != owner:
        return Refusal(
            "forbidden",
            "a revision naming secrets is its owner's to add: the owner's secrets are "
            "opened in each replica",
        )
    missing = missing_secret(secrets, owner, spec.secret_env)
    return None if missing is None else _bad(missing)


def _create_refusal(
    s: ServingState, t: Tenancy, requester: str, c: CreateEndpoint
) -> Refusal | None:
    if not subj.is_token(c.endpoint_id):
        return _bad(f"endpoint id {c.endpoint_id!r} must be 1-64 letters, digits, '-' or '_'")
    if c.endpoint_id in s.endpoints:
        return Refusal("conflict", f"endpoint {c.endpoint_id} exists")
    if _NAME.fullmatch(c.name) is None:
        return _bad(f"endpoint name {c.name!r}: 1-63 lower-case letters, digits and '-'")
    if c.name in s.names:
        return Refusal("conflict", f"an endpoint named {c.name} exists")
    domain, project = _home(t, requester, c.project)
    if project is None:
        return Refusal("forbidden", f"{requester} is no member of project {c.project}")
    group = c.group or DEFAULT_GROUP
    problem = admission_problem(
        t.groups, group, project_key(domain, project), None, c.revision.slots.fgpu
    )
    if problem is not None:
        return _bad(problem)
    return _spec_refusal(c.revision) or _count_refusal(c.replicas)


def _home(t: Tenancy, requester: str, asked: str | None) -> tuple[str, str | None]:
    """The domain and project an endpoint of ``requester`` goes to (project None: it may
    not ask for that one)."""
    who = t.user_of(requester)
    if not t.on or who is None:
        return DEFAULT, (asked or DEFAULT) if asked in (None, DEFAULT) else None
    project = asked or who.default_project
    if project is None or project not in who.projects:
        return who.domain, None
    return who.domain, project


def _change_refusal(ep: EndpointView, c: ServeCommand, now: datetime) -> Refusal | None:
    match c:
        case AddRevision():
            return (
                _spec_refusal(c.revision)
                or (None if c.replicas is None else _count_refusal(c.replicas))
                or _policy_refusal(c.rollout)
                or _green_refusal(ep, c)
            )
        case ScaleEndpoint():
            return _count_refusal(c.replicas)
        case PointEndpoint():
            if c.revision not in ep.revisions:
                return _bad(f"endpoint {ep.name} has no revision {c.revision}")
            return (None if c.replicas is None else _count_refusal(c.replicas)) or _policy_refusal(
                c.rollout
            )
        case SetTraffic():
            return _traffic_refusal(ep, c)
        case CreateToken():
            if not subj.is_token(c.token_id):
                return _bad(f"token id {c.token_id!r} must be 1-64 letters, digits, '-' or '_'")
            if c.token_id in ep.tokens:
                return Refusal("conflict", f"endpoint {ep.name} has a token {c.token_id}")
            if c.expires_at <= now:
                return _bad("the token would have expired already")
            return None
        case RevokeToken():
            token = ep.tokens.get(c.token_id)
            if token is None or token.revoked:
                return _bad(f"endpoint {ep.name} has no live token {c.token_id}")
            return None
        case SetAutoscale():
            problem = None if c.rule is None else rule_problem(c.rule)
            return None if problem is None else _bad(problem)
    return None


MAX_COOLDOWN_S = 86400.0
MAX_COLD_START_S = 600.0


def rule_problem(rule: AutoscaleRule) -> str | None:
    """What is wrong with an autoscaling rule, in one line; None: nothing."""
    lo, hi = rule.min_replicas, rule.max_replicas
    if not 0 <= lo <= hi <= MAX_REPLICAS or hi < 1:
        return f"autoscaling wants 0 <= min <= max <= {MAX_REPLICAS} and max >= 1"
    if not 0 <= rule.down < rule.up:
        return "autoscaling wants 0 <= down < up"
    if not 1 <= rule.step <= MAX_REPLICAS:
        return f"the step must be between 1 and {MAX_REPLICAS}"
    if not 0 < rule.cooldown_s <= MAX_COOLDOWN_S:
        return f"the cooldown must be above 0 and at most {MAX_COOLDOWN_S:g} s"
    if not 0 < rule.cold_start_s <= MAX_COLD_START_S:
        return f"the cold start must be above 0 and at most {MAX_COLD_START_S:g} s"
    return None


def policy_problem(p: RolloutPolicy) -> str | None:
    """What is wrong with a rolling update's policy, in one line; None: nothing."""
    if not (0 <= p.max_surge <= MAX_REPLICAS and 0 <= p.max_unavailable <= MAX_REPLICAS):
        return f"max surge and max unavailable must be between 0 and {MAX_REPLICAS}"
    if p.max_surge == 0 and p.max_unavailable == 0:
        return "max surge and max unavailable cannot both be 0: the rollout could not move"
    return None


def _policy_refusal(p: RolloutPolicy | None) -> Refusal | None:
    problem = None if p is None else policy_problem(p)
    return None if problem is None else _bad(problem)


def _green_refusal(ep: EndpointView, c: AddRevision) -> Refusal | None:
    if c.traffic is None:
        return None
    if c.rollout is not None:
        return _bad("a revision beside the others (a traffic share) is not rolled out")
    if not 0 <= c.traffic <= 100:
        return _bad("the new revision's share of the traffic is between 0 and 100")
    return None if ep.targets else _bad(f"endpoint {ep.name} has no revision to share with")


def _traffic_refusal(ep: EndpointView, c: SetTraffic) -> Refusal | None:
    revisions = [share.revision for share in c.shares]
    if not revisions or len(set(revisions)) != len(revisions):
        return _bad("name each revision once, with its share of the traffic")
    missing = sorted(set(revisions) - set(ep.revisions))
    if missing:
        return _bad(f"endpoint {ep.name} has no revision {missing[0]}")
    if any(not 0 <= share.traffic <= 100 for share in c.shares):
        return _bad("each share of the traffic is between 0 and 100")
    if sum(share.traffic for share in c.shares) != 100:
        return _bad("the shares of the traffic must sum to 100")
    return None if c.replicas is None else _count_refusal(c.replicas)


def _count_refusal(replicas: int) -> Refusal | None:
    if not 0 <= replicas <= MAX_REPLICAS:
        return _bad(f"replicas must be between 0 and {MAX_REPLICAS}, got {replicas}")
    return None


def _spec_refusal(spec: RevisionSpec) -> Refusal | None:
    problem = image_reference_problem(spec.image)
    if problem is not None:
        return _bad(problem)
    if not 1 <= spec.port <= 65535:
        return _bad(f"port must be between 1 and 65535, got {spec.port}")
    sl = spec.slots
    if spec.cpu_only and sl.fgpu != 0:
        return _bad("a CPU-only revision asks for no fGPU")
    if not spec.cpu_only and sl.fgpu <= 0:
        return _bad("fGPU must be greater than zero")
    if sl.cpu <= 0 or sl.mem <= 0 or max(sl.cpu, sl.mem, sl.fgpu) > MAX_AMOUNT:
        return _bad("cpu and mem must be greater than zero, and no amount beyond a cluster's")
    if spec.model is not None and not spec.model:
        return _bad("a model folder needs a name")
    problem = env_problem(spec.env) or references_problem(spec.secret_env, spec.env)
    if problem is not None:
        return _bad(problem)
    h = spec.health
    if not h.path.startswith("/") or min(h.interval_s, h.timeout_s) <= 0:
        return _bad("the health check needs a path from '/' and times above zero")
    if h.initial_delay_s < 0 or min(h.healthy_after, h.unhealthy_after) < 1:
        return _bad("the health check's delay must be >= 0 and its thresholds >= 1")
    if not (0 <= spec.drain_s <= MAX_WAIT_S and 0 <= spec.warmup_s <= MAX_WAIT_S):
        return _bad(f"the drain time and warm-up deadline are 0 to {MAX_WAIT_S:.0f} seconds")
    return None


def _bad(reason: str) -> Refusal:
    return Refusal("invalid", reason)


def decide(s: ServingState, t: Tenancy, r: ServeRequested, prov: Provenance) -> list[AnyEvent]:
    """The decisions an allowed request ``r`` makes (``refusal`` said None), each stamped
    with ``prov`` (caused by ``r``)."""
    c = r.command
    who = r.requester
    if isinstance(c, CreateEndpoint):
        return _created(t, who, c, prov)
    ep = s.endpoints[c.endpoint_id]
    match c:
        case AddRevision():
            n = len(ep.revisions) + 1
            added = stamp(
                RevisionAdded,
                prov,
                endpoint_id=ep.endpoint_id,
                revision=n,
                spec=c.revision,
                requester=who,
            )
            if c.traffic is not None:
                return [added, *_superseded(ep, prov), _beside(ep, prov, who, n, c)]
            return [added, *_move(ep, prov, who, n, c.replicas, c.rollout)]
        case ScaleEndpoint():
            return [
                *_superseded(ep, prov),
                _targets(prov, ep.endpoint_id, who, _primary(ep), c.replicas),
            ]
        case PointEndpoint():
            return _move(ep, prov, who, c.revision, c.replicas, c.rollout)
        case SetTraffic():
            return [*_superseded(ep, prov), _split(ep, prov, who, c)]
        case RemoveEndpoint():
            return [stamp(EndpointRemoved, prov, endpoint_id=ep.endpoint_id, requester=who)]
        case CreateToken():
            return [
                stamp(
                    TokenCreated,
                    prov,
                    endpoint_id=ep.endpoint_id,
                    token_id=c.token_id,
                    sha256=c.sha256,
                    expires_at=c.expires_at,
                    requester=who,
                )
            ]
        case SetAutoscale():
            return [
                stamp(AutoscaleSet, prov, endpoint_id=ep.endpoint_id, rule=c.rule, requester=who)
            ]
        case RevokeToken():
            return [
                stamp(
                    TokenRevoked,
                    prov,
                    endpoint_id=ep.endpoint_id,
                    token_id=c.token_id,
                    requester=who,
                )
            ]
    raise AssertionError(f"no decision for {type(c).__name__}")


def _created(t: Tenancy, who: str, c: CreateEndpoint, prov: Provenance) -> list[AnyEvent]:
    """An endpoint, its first revision and its targets."""
    domain, project = _home(t, who, c.project)
    return [
        stamp(
            EndpointCreated,
            prov,
            endpoint_id=c.endpoint_id,
            name=c.name,
            owner=who,
            domain=domain,
            project=project or DEFAULT,
            group=c.group or DEFAULT_GROUP,
            public=c.public,
        ),
        stamp(
            RevisionAdded,
            prov,
            endpoint_id=c.endpoint_id,
            revision=1,
            spec=c.revision,
            requester=who,
        ),
        _targets(prov, c.endpoint_id, who, 1, c.replicas),
    ]


def _targets(
    prov: Provenance, endpoint_id: str, who: str, revision: int, replicas: int
) -> ReplicasSet:
    target = RevisionTarget(revision=revision, replicas=replicas, traffic=100)
    return stamp(ReplicasSet, prov, endpoint_id=endpoint_id, targets=(target,), requester=who)


def _move(
    ep: EndpointView,
    prov: Provenance,
    who: str,
    revision: int,
    replicas: int | None,
    policy: RolloutPolicy | None,
) -> list[AnyEvent]:
    """Revision ``revision`` takes ``replicas`` (None: as many as now) and all traffic: at
    once (``policy`` None), or by a rollout, which replaces one under way."""
    n = _total(ep) if replicas is None else replicas
    if policy is None:
        return [*_superseded(ep, prov), _targets(prov, ep.endpoint_id, who, revision, n)]
    started = stamp(
        RolloutStarted,
        prov,
        endpoint_id=ep.endpoint_id,
        revision=revision,
        replicas=n,
        policy=policy,
        requester=who,
    )
    return [started]


def _beside(ep: EndpointView, prov: Provenance, who: str, n: int, c: AddRevision) -> ReplicasSet:
    """Blue/green: new revision ``n`` at ``c.traffic`` percent (as many replicas as
    ``c.replicas`` or the revision taking most traffic now) beside that revision."""
    blue = max(ep.targets, key=lambda t: (t.traffic, t.revision))
    green = blue.replicas if c.replicas is None else c.replicas
    traffic = c.traffic or 0
    targets = (
        RevisionTarget(revision=blue.revision, replicas=blue.replicas, traffic=100 - traffic),
        RevisionTarget(revision=n, replicas=green, traffic=traffic),
    )
    return stamp(ReplicasSet, prov, endpoint_id=ep.endpoint_id, targets=targets, requester=who)


def _superseded(ep: EndpointView, prov: Provenance) -> list[AnyEvent]:
    """The end of the rollout under way, if any: targets set otherwise replace it."""
    if ep.rollout is None:
        return []
    ended = stamp(
        RolloutEnded,
        prov,
        endpoint_id=ep.endpoint_id,
        revision=ep.rollout.revision,
        outcome="superseded",
    )
    return [ended]


def _split(ep: EndpointView, prov: Provenance, who: str, c: SetTraffic) -> ReplicasSet:
    """Blue/green: each named revision at its share, keeping its replicas (a new one: as
    many as ``c.replicas`` or the revision taking most traffic now)."""
    had = {t.revision: t.replicas for t in ep.targets}
    fresh = had.get(_primary(ep), 0) if c.replicas is None else c.replicas
    targets = tuple(
        RevisionTarget(
            revision=share.revision,
            replicas=had.get(share.revision) or fresh,
            traffic=share.traffic,
        )
        for share in sorted(c.shares, key=lambda share: share.revision)
    )
    return stamp(ReplicasSet, prov, endpoint_id=ep.endpoint_id, targets=targets, requester=who)


def _total(ep: EndpointView) -> int:
    return sum(t.replicas for t in ep.targets)


def _primary(ep: EndpointView) -> int:
    """The revision taking most traffic (the latest one of a tie; none: the latest)."""
    if not ep.targets:
        return max(ep.revisions)
    return max(ep.targets, key=lambda t: (t.traffic, t.revision)).revision
