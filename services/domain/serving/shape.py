"""An endpoint as people see it: the one shape the read API answers with and the CLI
prints (``--json``). Pure. A token is shown by its id, expiry and whether it was revoked,
never by its hash."""

from typing import Any

import msgspec

from events import ReplicaPhase
from services.domain.resources import format_cpu, format_fgpu
from services.domain.serving.state import EndpointView

__all__ = ["endpoint_detail"]


def endpoint_detail(ep: EndpointView) -> dict[str, Any]:
    return {
        "endpoint_id": ep.endpoint_id,
        "name": ep.name,
        "owner": ep.owner,
        "domain": ep.domain,
        "project": ep.project,
        "group": ep.group,
        "public": ep.public,
        "path": f"/e/{ep.name}/",
        "created_at": ep.created_at.isoformat(),
        "revisions": [
            {
                "revision": n,
                "image": spec.image,
                "command": list(spec.command),
                "port": spec.port,
                "model": spec.model,
                "slots": {
                    "fgpu": format_fgpu(spec.slots.fgpu),
                    "cpu": format_cpu(spec.slots.cpu),
                    "mem": spec.slots.mem,
                },
                "env": sorted(name for name, _ in spec.env),
                # Which variable holds which of the owner's secrets: names, never values.
                "secrets": [{"variable": k, "secret": n} for k, n in spec.secret_env],
                "health_path": spec.health.path,
                "drain_s": spec.drain_s,
                "warmup_s": spec.warmup_s,
                "traffic": next((t.traffic for t in ep.targets if t.revision == n), 0),
            }
            for n, spec in sorted(ep.revisions.items())
        ],
        "targets": [
            {"revision": t.revision, "replicas": t.replicas, "traffic": t.traffic}
            for t in ep.targets
        ],
        "replicas": [
            {
                "session_id": r.session_id,
                "revision": r.revision,
                "ordinal": r.ordinal,
                "generation": r.generation,
                "phase": r.phase.value,
                "host": r.host,
                "port": r.port,
                "in_rotation": r.in_rotation,
                "reason": r.reason,
            }
            for r in sorted(ep.replicas.values(), key=lambda r: (r.revision, r.ordinal))
        ],
        "tokens": [
            {"token_id": t.token_id, "expires_at": t.expires_at.isoformat(), "revoked": t.revoked}
            for t in sorted(ep.tokens.values(), key=lambda t: t.token_id)
        ],
        "stalled": dict(sorted(ep.stalled.items())),
        "rollout": _rollout(ep),
        "autoscale": None if ep.autoscale is None else msgspec.to_builtins(ep.autoscale),
    }


def _rollout(ep: EndpointView) -> dict[str, Any] | None:
    """The rolling update under way, with its progress: how many replicas of its
    revision are healthy and in rotation, of how many wanted."""
    ro = ep.rollout
    if ro is None:
        return None
    healthy = sum(
        r.revision == ro.revision and r.in_rotation and r.phase is ReplicaPhase.HEALTHY
        for r in ep.replicas.values()
    )
    return {
        "revision": ro.revision,
        "replicas": ro.replicas,
        "max_surge": ro.policy.max_surge,
        "max_unavailable": ro.policy.max_unavailable,
        "started_at": ro.started_at.isoformat(),
        "healthy": healthy,
    }
