"""The attackers of the adversarial matrices, one set for every door: over NATS
(``tests/e2e/test_adversarial.py``) and through the web UI
(``tests/api/test_ui_adversarial.py``). A new role joins both matrices here.

The tenancy: domains ``lab`` (projects ``a`` and ``b``) and ``other`` (project ``x``).
The victim ``vic`` is a user of lab/a; ``ua`` a user of the same project; ``ub`` a user of
lab/b; ``oadmin`` the domain admin of ``other``; ``rv`` a user of lab/a whose keypair is
revoked."""

from events import AdminCommand, CreateDomain, CreateKeypair, CreateProject, CreateUser, Role
from services.domain.access.keys import hash_secret

__all__ = ["AT_THE_DOOR", "PEOPLE", "PERSON_ROLES", "VICTIM", "tenancy"]

VICTIM = "vic"
PEOPLE = {  # name: domain, project, role; each with one keypair
    VICTIM: ("lab", "a", Role.USER),
    "ua": ("lab", "a", Role.USER),
    "ub": ("lab", "b", Role.USER),
    "oadmin": ("other", "x", Role.DOMAIN_ADMIN),
    "rv": ("lab", "a", Role.USER),  # its keypair revoked
}
PERSON_ROLES = {  # a matrix's role: who plays it (a person, or nobody)
    "anonymous": "",
    "user-project-a": "ua",
    "user-project-b": "ub",
    "other-domain-admin": "oadmin",
    "revoked-key": "rv",
}
AT_THE_DOOR = ("anonymous", "revoked-key")  # never let in


def tenancy(keys: dict[str, tuple[str, str]]) -> list[AdminCommand]:
    """The domains, projects, PEOPLE and their keypairs (``keys``: name -> access key,
    secret) as administrators' commands, in order."""
    commands: list[AdminCommand] = [CreateDomain(domain="lab"), CreateDomain(domain="other")]
    commands += [CreateProject(domain=d, project=p) for d, p in (("lab", "a"), ("lab", "b"))]
    commands.append(CreateProject(domain="other", project="x"))
    for name, (domain, project, role) in PEOPLE.items():
        commands.append(CreateUser(user=name, domain=domain, role=role, projects=(project,)))
        key, secret = keys[name]
        commands.append(CreateKeypair(access_key=key, user=name, secret_hash=hash_secret(secret)))
    return commands
