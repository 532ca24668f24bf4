"""Which images a session may run, and where an agent may get one: pure rules.

A domain may have an allow-list (``SetImages``): each entry a name, allowing every tag of
it, or ``name:tag``; a session of the domain asking for anything else is rejected at
admission. A domain with no allow-list allows every image, as every cluster did before
allow-lists. An alias (``SetImageAlias``) names a default version: a request for
``python`` in a domain where ``python`` -> ``fgpu/python:3.11`` runs the latter, resolved
at admission (``SessionAdmitted.image``) and checked against the allow-list as resolved.

An agent can start a session of an image it holds; it can also start one of an image it
lacks when the image's reference names the registry it pulls from (``--registry``): the
session then goes PULLING before RUNNING. Nothing is ever pulled from anywhere else. The
scheduler places on an agent that holds the image when one fits, and on one that must
pull it only when none does (``pullers``).
"""

from services.domain.fold.cluster import ClusterState
from services.domain.image_ref import split_reference
from services.domain.records import AgentView
from services.domain.tenancy.model import Tenancy

__all__ = [
    "allowed_by",
    "image_refusal",
    "obtainable",
    "pullers",
    "pulls_from",
    "resolve_image",
    "via_registry",
]

_LATEST = "latest"


def resolve_image(t: Tenancy, domain: str, image: str) -> str:
    """The image a request for ``image`` in ``domain`` runs: its alias's, else itself."""
    return t.aliases.get(domain, {}).get(image, image)


def allowed_by(entries: tuple[str, ...], image: str) -> bool:
    """Whether an allow-list of ``entries`` lets ``image`` run. A name without a tag (nor
    digest) allows every tag of it; ``name`` and ``name:latest`` are the same image."""
    try:
        name, tag, digest = split_reference(image)
    except ValueError:
        return False
    for entry in entries:
        try:
            e_name, e_tag, e_digest = split_reference(entry)
        except ValueError:
            continue
        if e_name != name:
            continue
        if e_tag is None and e_digest is None:
            return True
        if e_digest is not None and e_digest == digest:
            return True
        if e_tag is not None and e_digest is None and e_tag == (tag or _LATEST):
            return True
    return False


def image_refusal(t: Tenancy, domain: str, image: str) -> str | None:
    """Why a session of ``domain`` may not run ``image`` (as resolved); None if it may."""
    entries = t.images.get(domain)
    if entries is None or allowed_by(entries, image):
        return None
    listed = ", ".join(entries) or "none"
    return f"image {image} is not allowed in domain {domain} (allowed: {listed})"


def pulls_from(registry: str | None, image: str) -> bool:
    """Whether an agent pulling from ``registry`` may pull ``image``: it names it."""
    return registry is not None and image.startswith(f"{registry}/")


def via_registry(a: AgentView, image: str) -> bool:
    """Whether ``a`` would pull ``image`` from its registry."""
    return pulls_from(a.registry, image)


def obtainable(a: AgentView, image: str) -> bool:
    """Whether ``a`` holds ``image`` or can pull it."""
    return image in a.images or via_registry(a, image)


def pullers(s: ClusterState, image: str) -> frozenset[str]:
    """The agents that lack ``image`` and could pull it: the scheduler tries the others
    first, so a pull happens only where no agent holding the image fits."""
    return frozenset(
        a.agent_id for a in s.agents.values() if image not in a.images and via_registry(a, image)
    )
