"""``fgpu admin ...``'s tenancy: domains, projects, users, keypairs and resource policies,
``server-auth`` and ``init``; and the asking every admin change shares (``ask``).

A change is a request on the log (``AdminRequested``) that the registrar applies or
refuses after checking the requester's role; the command waits for that answer through
the read API and says it (exit 1 on a refusal, its reason on stderr). Lists are read from
the read API. A keypair's secret is made here, shown once, and only its salted hash
leaves this process.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from services.cli.options import (
    Settings,
    api_errors,
    fail,
    out,
    print_json,
    run_async,
    user_client,
    warn,
)
from services.cli.outcome import chosen_request_id, sent

if TYPE_CHECKING:
    from events import AdminCommand, ResourcePolicy, ServeCommand

__all__ = ["app", "store_keypair"]

app = typer.Typer()  # no group of its own: admin_cmd puts these in ``fgpu admin``
domain_app = typer.Typer(help="Domains.", no_args_is_help=True)
project_app = typer.Typer(help="Projects of a domain (DOMAIN/PROJECT).", no_args_is_help=True)
user_app = typer.Typer(help="Users of a domain.", no_args_is_help=True)
keypair_app = typer.Typer(help="Keypairs (access key + secret).", no_args_is_help=True)
policy_app = typer.Typer(help="Resource policies at four levels.", no_args_is_help=True)


for _name, _sub in (
    ("domain", domain_app),
    ("project", project_app),
    ("user", user_app),
    ("keypair", keypair_app),
    ("policy", policy_app),
):
    app.add_typer(_sub, name=_name)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds to wait for the answer.")]


def _settings(ctx: typer.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def ask(
    ctx: typer.Context,
    command: "AdminCommand | ServeCommand",
    timeout: float,
    *,
    refusal: bool = False,
) -> dict[str, Any]:
    """Ask the registrar for ``command`` (the serving actor, for a serve command); its
    answer (a refusal exits 1 with its reason, unless ``refusal``: then it is returned
    too)."""
    from events import AdminCommand
    from services.cli.watch import answers, position

    settings = _settings(ctx)
    rid = chosen_request_id(settings.request_id)
    api = settings.read_api()
    with api_errors():
        api.get("/v1/domains")  # reachable: asked before anything is published

    with api_errors():
        after = position(api)

    async def publish() -> str:
        async with user_client(settings) as client:
            if isinstance(command, AdminCommand):
                return await client.admin(command, request_id=rid)
            return await client.serve(command, request_id=rid)

    verb = "admin" if isinstance(command, AdminCommand) else "serve"
    request_id = sent(settings, publish, f"fgpu {verb} --request-id {rid} ...")
    path = f"/v1/admin/requests/{request_id}"
    with api_errors():
        found = answers(api, [path], after, timeout_s=timeout)
    answer: dict[str, Any] | None = found.get(path)
    if answer is None:
        actor = "registrar" if verb == "admin" else "serving actor"
        fail(f"no answer within {timeout:g} s (request {request_id}); is a {actor} running?", 3)
    if not answer["applied"] and not refusal:
        refused(answer)
    return answer


def refused(answer: dict[str, Any]) -> NoReturn:
    fail(f"refused ({answer['code']}): {answer['reason']}", code=1)


def said(answer: dict[str, Any], text: str, as_json: bool, **extra: Any) -> None:
    """An applied change: its answer as JSON, else ``text``."""
    if as_json:
        print_json({**answer, **extra})
    else:
        out().print(text, highlight=False)


def listed(ctx: typer.Context, path: str, params: dict[str, str] | None = None) -> Any:
    """The read API's answer to ``GET path?params`` (exits with one line if it fails)."""
    with api_errors():
        return _settings(ctx).read_api().get(path, params)


def _split(project: str) -> tuple[str, str]:
    domain, _, name = project.partition("/")
    if not domain or not name:
        fail(f"a project is DOMAIN/PROJECT, got {project!r}")
    return domain, name


# ---- domains and projects ---------------------------------------------------------------


@domain_app.command("create")
def domain_create(
    ctx: typer.Context, domain: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Create a domain (superadmins)."""
    from events import CreateDomain

    said(ask(ctx, CreateDomain(domain=domain), timeout), f"domain {domain} created", as_json)


@domain_app.command("ls")
def domain_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Domains and their projects."""
    found = listed(ctx, "/v1/domains")
    if as_json:
        print_json(found)
        return
    for d in found:
        out().print(f"{d['domain']}: {', '.join(d['projects']) or '(no project)'}", highlight=False)


@project_app.command("create")
def project_create(
    ctx: typer.Context,
    project: Annotated[str, typer.Argument(help="DOMAIN/PROJECT")],
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Create a project in a domain (its domain admins, superadmins)."""
    from events import CreateProject

    domain, name = _split(project)
    answer = ask(ctx, CreateProject(domain=domain, project=name), timeout)
    said(answer, f"project {project} created", as_json)


@project_app.command("rm")
def project_rm(
    ctx: typer.Context,
    project: Annotated[str, typer.Argument(help="DOMAIN/PROJECT")],
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Remove a project; its members leave it, its sessions run on."""
    from events import RemoveProject

    domain, name = _split(project)
    answer = ask(ctx, RemoveProject(domain=domain, project=name), timeout)
    said(answer, f"project {project} removed", as_json)


# ---- users ------------------------------------------------------------------------------


@user_app.command("create")
def user_create(
    ctx: typer.Context,
    user: str,
    domain: Annotated[str, typer.Option(help="The user's domain.")],
    role: Annotated[str, typer.Option(help="user, domain-admin or superadmin.")] = "user",
    project: Annotated[
        list[str] | None, typer.Option(help="A project of the domain (repeat for more).")
    ] = None,
    default_project: Annotated[str | None, typer.Option(help="Where sessions go.")] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Create a user of a domain, member of the given projects."""
    from events import CreateUser

    command = CreateUser(
        user=user,
        domain=domain,
        role=_role(role),
        projects=tuple(project or ()),
        default_project=default_project,
    )
    said(ask(ctx, command, timeout), f"user {user} created", as_json)


@user_app.command("rm")
def user_rm(
    ctx: typer.Context, user: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Remove a user: its keypairs are revoked; its sessions run on."""
    from events import RemoveUser

    said(ask(ctx, RemoveUser(user=user), timeout), f"user {user} removed", as_json)


@user_app.command("set-role")
def user_set_role(
    ctx: typer.Context, user: str, role: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Give a user another role."""
    from events import SetRole

    said(ask(ctx, SetRole(user=user, role=_role(role)), timeout), f"{user} is {role}", as_json)


@user_app.command("join")
def user_join(
    ctx: typer.Context,
    user: str,
    project: str,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Make a user a member of a project of its domain (PROJECT, without the domain)."""
    from events import AddMember

    answer = ask(ctx, AddMember(user=user, project=project), timeout)
    said(answer, f"{user} joined {project}", as_json)


@user_app.command("leave")
def user_leave(
    ctx: typer.Context,
    user: str,
    project: str,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Take a user out of a project."""
    from events import RemoveMember

    answer = ask(ctx, RemoveMember(user=user, project=project), timeout)
    said(answer, f"{user} left {project}", as_json)


@user_app.command("ls")
def user_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Users, their domain, role and projects."""
    found = listed(ctx, "/v1/users")
    if as_json:
        print_json(found)
        return
    for u in found:
        projects = ", ".join(u["projects"]) or "-"
        out().print(
            f"{u['user']}  {u['domain']}  {u['role']}  projects: {projects}", highlight=False
        )


def _role(text: str) -> Any:
    from events import Role

    try:
        return Role(text)
    except ValueError:
        fail(f"a role is one of {', '.join(r.value for r in Role)}; got {text!r}")


# ---- keypairs ---------------------------------------------------------------------------


@keypair_app.command("create")
def keypair_create(
    ctx: typer.Context,
    user: Annotated[
        str | None, typer.Option(help="Whose keypair it is (a person's: --role user).")
    ] = None,
    role: Annotated[
        str,
        typer.Option(
            help="user: a person's keypair; reader: an integration's, which reads the log "
            "(a domain's part of it with --domain) through a consumer of its own, and "
            "nothing else."
        ),
    ] = "user",
    domain: Annotated[
        str | None, typer.Option(help="The domain a reader reads (none: the whole log).")
    ] = None,
    save: Annotated[
        bool, typer.Option("--save", help="Also store it as the keypair this CLI speaks as.")
    ] = False,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Make a keypair: its secret is shown here, once, and never again. A reader's is made
    by a superadmin (any domain's, or the whole log's) or a domain admin (its domain's)."""
    from events import AdminCommand, CreateKeypair, CreateServiceKey
    from events import subjects as subj
    from services.domain.access.keys import hash_secret, new_access_key, new_secret

    key, secret = new_access_key(), new_secret()
    command: AdminCommand
    extra: dict[str, str] = {}
    if role == "user":
        if user is None or domain is not None:
            fail("a person's keypair names its --user (and no --domain)")
        command = CreateKeypair(access_key=key, user=user, secret_hash=hash_secret(secret))
    elif role == "reader":
        if user is not None or save:
            fail("a reader's keypair is no person's: no --user, no --save")
        service = "reader" if domain is None else f"reader:{domain}"
        command = CreateServiceKey(access_key=key, service=service, secret_hash=hash_secret(secret))
        stream = subj.STREAM if domain is None else subj.DOMAINS_STREAM
        extra = {"deliver_subject": subj.reader_out(key), "stream": stream}
    else:
        fail(f"no role {role!r}: user or reader")
    answer = ask(ctx, command, timeout)
    if save:
        store_keypair(key, secret)
    if as_json:
        print_json({**answer, "access_key": key, "secret_key": secret, **extra})
        return
    out().print(f"access key {key}\nsecret key {secret}", highlight=False)
    if extra:
        out().print(
            f"reads {extra['stream']} through consumer {key}, delivered to "
            f"{extra['deliver_subject']} (docs/integrations.md)",
            highlight=False,
        )
    warn("the secret is shown this once: keep it (fgpu login stores it)")


@keypair_app.command("revoke")
def keypair_revoke(
    ctx: typer.Context, access_key: str, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False
) -> None:
    """Revoke a keypair: it connects no more, and its requests are refused."""
    from events import RevokeKeypair

    answer = ask(ctx, RevokeKeypair(access_key=access_key), timeout)
    said(answer, f"keypair {access_key} revoked", as_json)


@keypair_app.command("ls")
def keypair_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Keypairs (never a secret): whose, and whether revoked."""
    found = listed(ctx, "/v1/keypairs")
    if as_json:
        print_json(found)
        return
    for k in found:
        whose = k["user"] or f"service {k['service']}"
        state = "revoked" if k["revoked"] else "active"
        out().print(f"{k['access_key']}  {whose}  {state}", highlight=False)


def store_keypair(access_key: str, secret: str) -> None:
    """Keep ``access_key`` and its secret as the keypair this CLI speaks as (0600); a
    failure to write exits 1 with where and why."""
    from services.cli.credentials import Credentials, credentials_file, save
    from services.cli.home import home_hint

    try:
        path = save(Credentials(access_key, secret))
    except OSError as e:
        where = e.filename or credentials_file()
        fail(
            f"cannot store the keypair in {credentials_file()}: {e.strerror} ({where}): "
            f"{home_hint()}",
            code=1,
        )
    warn(f"stored in {path}: this CLI now speaks as {access_key}")


# ---- policies ---------------------------------------------------------------------------


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    keypair: Annotated[str | None, typer.Option(help="A keypair's policy.")] = None,
    user: Annotated[str | None, typer.Option(help="A user's policy.")] = None,
    project: Annotated[str | None, typer.Option(help="A project's (DOMAIN/PROJECT).")] = None,
    domain: Annotated[str | None, typer.Option(help="A domain's policy.")] = None,
    max_sessions: Annotated[int | None, typer.Option(min=0, help="Sessions held at once.")] = None,
    max_pending_sessions: Annotated[
        int | None, typer.Option(min=0, help="Sessions waiting to be placed (keypair).")
    ] = None,
    max_pending_fgpu: Annotated[str | None, typer.Option(help="fGPU waiting (keypair).")] = None,
    max_fgpu: Annotated[str | None, typer.Option(help="Total fGPU held at once.")] = None,
    max_cpu: Annotated[str | None, typer.Option(help="Total CPU held at once.")] = None,
    max_mem: Annotated[str | None, typer.Option(help="Total memory held at once.")] = None,
    max_priority: Annotated[int | None, typer.Option(min=0, max=100, help="(keypair)")] = None,
    timeout: TimeoutOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Set the policy of one keypair, user, project or domain; what is not given is not
    limited. It acts on admission: sessions already admitted run on."""
    from events import PolicyLevel, SetPolicy

    given = {
        PolicyLevel.KEYPAIR: keypair,
        PolicyLevel.USER: user,
        PolicyLevel.PROJECT: project,
        PolicyLevel.DOMAIN: domain,
    }
    named = [(level, target) for level, target in given.items() if target is not None]
    if len(named) != 1:
        fail("name one of --keypair, --user, --project, --domain")
    level, target = named[0]
    policy = _policy(
        max_sessions,
        max_pending_sessions,
        max_pending_fgpu,
        (max_fgpu, max_cpu, max_mem),
        max_priority,
    )
    answer = ask(ctx, SetPolicy(level=level, target=target, policy=policy), timeout)
    said(answer, f"policy of {level} {target} set", as_json)


def _policy(
    sessions: int | None,
    pending: int | None,
    pending_fgpu: str | None,
    total: tuple[str | None, str | None, str | None],
    priority: int | None,
) -> "ResourcePolicy":
    from events import ResourcePolicy, Slots
    from services.domain.resources import UNLIMITED, InvalidAmount, parse_cpu, parse_fgpu, parse_mem

    fgpu, cpu, mem = total
    try:
        totals = (
            Slots(
                fgpu=parse_fgpu(fgpu) if fgpu else UNLIMITED,
                cpu=parse_cpu(cpu) if cpu else UNLIMITED,
                mem=parse_mem(mem) if mem else UNLIMITED,
            )
            if fgpu or cpu or mem
            else None
        )
        waiting = (
            Slots(fgpu=parse_fgpu(pending_fgpu), cpu=UNLIMITED, mem=UNLIMITED)
            if pending_fgpu
            else None
        )
    except InvalidAmount as e:
        fail(str(e))
    return ResourcePolicy(
        max_sessions=sessions,
        max_pending_sessions=pending,
        max_pending_slots=waiting,
        total_slots=totals,
        max_priority=priority,
    )


@policy_app.command("ls")
def policy_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every resource policy."""
    found = listed(ctx, "/v1/policies")
    if as_json:
        print_json(found)
        return
    for p in found:
        limits = {k: v for k, v in p.items() if k not in ("level", "target") and v is not None}
        shown = ", ".join(f"{k}={v}" for k, v in limits.items()) or "no limit"
        out().print(f"{p['level']} {p['target']}: {shown}", highlight=False)


@app.command("server-auth")
def server_auth(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the secrets.")],
    force: Annotated[bool, typer.Option("--force", help="Replace secrets already there.")] = False,
) -> None:
    """Write a NATS server's auth part (auth.conf, that nats.conf includes) and its
    secrets (auth.json), both readable by their owner only: the auth callout's issuer key
    and the static users' passwords. Once, before the server first starts."""
    from services.adapters.nats_auth import ServerAuth

    if (directory / "auth.json").exists() and not force:
        out().print(f"{directory / 'auth.json'} exists: kept (--force replaces it)")
        return
    path = ServerAuth.generate().save(directory)
    out().print(f"wrote {directory / 'auth.conf'} and {path}")


@app.command("init")
def init(
    ctx: typer.Context,
    secrets_dir: Annotated[
        Path | None,
        typer.Option(
            "--secrets",
            help="The server's secrets (fgpu admin server-auth): act as its setup user.",
        ),
    ] = None,
    service: Annotated[
        list[str] | None,
        typer.Option(help="A keypair for this service (quota, agent:ID, ...); repeat."),
    ] = None,
    user: Annotated[str, typer.Option(help="The superadmin's user name.")] = "admin",
    save: Annotated[
        bool, typer.Option("--save", help="Store its keypair as the one this CLI speaks as.")
    ] = False,
    replicas: Annotated[
        int | None,
        typer.Option(min=1, max=5, help="The stream's copies on a cluster (3 for a real one)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a cluster up on --nats URL, once (again, it changes nothing made already): the
    stream, the default domain and project, a superadmin (its secret shown once), and
    keypairs for the services named (kept in --secrets DIR/services.json, 0600).
    `fgpu up` does all of it for its own cluster."""
    from services.actors.bootstrap import FirstAdmin, bootstrap
    from services.adapters.nats_auth import SETUP_USER, ServerAuth
    from services.adapters.system_clock import SystemClock
    from services.cli.identities import service_keys
    from services.wiring.identity import Identity
    from services.wiring.parts import connected

    settings = _settings(ctx)
    me = settings.identity()
    if secrets_dir is not None:
        try:
            me = Identity(SETUP_USER, ServerAuth.load(secrets_dir).setup_password)
        except (OSError, ValueError) as e:
            fail(f"no server secrets in {secrets_dir}: {e} (fgpu admin server-auth writes them)")
    if service and secrets_dir is None:
        fail("--service needs --secrets DIR, where the services' keypairs are kept")

    async def go() -> FirstAdmin | None:
        async with connected(settings.url, "fgpu-admin-init", me) as conn:
            await conn.log.create_or_update_stream(replicas)
            first = await bootstrap(conn.log, SystemClock(), user=user)
            if service and secrets_dir is not None:
                await service_keys(conn.log, secrets_dir, list(service))
            return first

    first = run_async(go)
    if first is None:
        out().print("this cluster has a tenancy already: no superadmin was made")
        return
    if save:
        store_keypair(first.access_key, first.secret)
    if as_json:
        print_json({"user": first.user, "access_key": first.access_key, "secret_key": first.secret})
        return
    out().print(
        f"superadmin {first.user}\naccess key {first.access_key}\nsecret key {first.secret}"
    )
    warn("the secret is shown this once: keep it (fgpu login stores it)")
