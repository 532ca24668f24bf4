"""A tenancy folded from its commands, no log: domains ``lab`` and ``other``, each with an
admin; a user and a superadmin in ``lab``; each person's key ``AK<name>``."""

from events import CreateDomain, CreateKeypair, CreateUser, Role
from services.domain.tenancy.admin import apply
from services.domain.tenancy.model import Tenancy

__all__ = ["two_domains"]


def two_domains() -> Tenancy:
    t = Tenancy()
    for d in ("lab", "other"):
        apply(t, CreateDomain(domain=d))
    people = [
        ("root", "lab", Role.SUPERADMIN),
        ("ada", "lab", Role.DOMAIN_ADMIN),
        ("uma", "lab", Role.USER),
        ("oto", "other", Role.DOMAIN_ADMIN),
    ]
    for user, domain, role in people:
        apply(t, CreateUser(user=user, domain=domain, role=role))
        apply(t, CreateKeypair(access_key=f"AK{user}", user=user, secret_hash="x"))
    return t
