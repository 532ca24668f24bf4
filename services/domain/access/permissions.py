"""What each identity may publish and subscribe to on the bus, as concrete subject lists.

The server enforces these (the auth callout hands them out with each connection), so a
confinement holds whatever a client's code does. Users publish only their own request and
admin subjects and read only their own inbox (and the channels into sessions they opened,
``fgpu.tty.*.<key>.*``: up to send, down to hear): they read the cluster through the read API,
never through consumers of their own. Each part of the cluster publishes only what it
decides; all of them read the log through JetStream consumers of their own names alone
(``log_reads``): one identity can make, change, delete, pull from or look at no other's
consumer. Nobody may delete or purge the stream or its messages; only a superadmin (the
administrator's step) may create or update it, and the archiver alone purge what it
archived from a stream made with retention (one made without refuses purges for good).
Actors that fold the log start from a snapshot: the scheduler and quota write their own
kind's (nobody else may), the other actors read the scheduler's, which they already obey.
"""

from collections.abc import Callable
from dataclasses import dataclass

from events import Role
from events import subjects as subj

__all__ = [
    "PEOPLE_ACCOUNT",
    "PEOPLE_SERVICE_IMPORTS",
    "PEOPLE_STREAM_IMPORTS",
    "PROVISION_READERS",
    "READERS_ACCOUNT",
    "READERS_SERVICE_IMPORTS",
    "READERS_STREAM_IMPORTS",
    "READER_STREAMS",
    "READS_AT_ONCE",
    "SERVICES_ACCOUNT",
    "SNAPSHOT_BUCKETS_ADMIN",
    "STREAM_ADMIN",
    "Permissions",
    "durables",
    "inbox",
    "log_reads",
    "reader_names",
    "reader_permissions",
    "service_permissions",
    "user_permissions",
]

# Two NATS accounts: the cluster's services and its log live in one, people in the other,
# which reaches the first only through the subjects it imports (``PEOPLE_IMPORTS``). A
# reply subject is an account's own: whatever reply a person names, the server's
# acknowledgement or an agent's answer travels back to the person's account on a mapped
# subject, never onto a subject the stream or a bucket captures.
SERVICES_ACCOUNT = "FGPU"
PEOPLE_ACCOUNT = "USERS"
# Readers (integrations' keypairs) live in an account of their own too: it reaches FGPU
# only through their consumers' deliveries and acknowledgements, so nothing a reader
# names as a reply lands where the log or a bucket would store it.
READERS_ACCOUNT = "READERS"
_STREAM = subj.STREAM
_JS = "$JS.API"
# Consumers are named by their permissions, one name at a time: the server answers a
# consumer's API on subjects that carry its name (``CONSUMER.CREATE.<stream>.<name>.<filter>``,
# ``INFO``, ``DELETE``, ``MSG.NEXT``, ``$JS.ACK.<stream>.<name>.``), and takes the name of
# one made there from the subject, refusing a body whose durable name is another (tried on
# 2.15.1). Never the unnamed ``CONSUMER.CREATE.<stream>`` (nats-py's ordered consumers), whose
# consumer the server names from the body: it makes or changes any consumer; nor
# ``DURABLE.CREATE``. A name is one token, and permissions pin whole tokens only (no
# prefix), so each identity has a fixed list: its reader names and its kind's durables.
READS_AT_ONCE = 8  # reads at once of one access key, all its processes together
_DURABLES = 4  # an actor kind's durables: <kind>, <kind>-2 .. <kind>-4
_SEVERAL = ("scheduler", "quota", "agent-host")  # kinds of which a cluster may run several


def reader_names(access_key: str) -> tuple[str, ...]:
    """The consumers ``access_key`` reads through (a replay, a tail, the bulk reader, a
    snapshot's chunks), one a read at once: made for the read, deleted after, the only
    ones but its durables that its permissions let it make, pull from or delete."""
    return tuple(f"{access_key}-r{i}" for i in range(READS_AT_ONCE))


def durables(service: str) -> tuple[str, ...]:
    """The durable consumers a service of kind ``service`` may follow the log through:
    ``<kind>`` and ``<kind>-2`` to ``-4`` for the kinds a cluster may run several of (each
    needs its own: two sharing one would each see half the log), ``registrar`` for the
    registrar, ``agent-<id>`` for agent ``<id>``; none for the others, which only read. The
    processes of one kind share them, whichever keypair of the kind each holds."""
    kind, _, agent_id = service.partition(":")
    if service in _SEVERAL:
        return (service, *(f"{service}-{n}" for n in range(2, _DURABLES + 1)))
    if service in ("registrar", "serving", "pipeline"):
        return (service,)
    if kind == "agent" and subj.is_token(agent_id):
        return (f"agent-{agent_id}",)
    return ()


def _consumers(stream: str, names: tuple[str, ...], *, durable: bool) -> tuple[str, ...]:
    """Making, pulling from and deleting consumers ``names`` of ``stream``; a durable's
    info and acknowledgements too (a read's consumer acknowledges nothing)."""
    api = f"{_JS}.CONSUMER"
    each = ("CREATE.{}.{}.>", "MSG.NEXT.{}.{}", "DELETE.{}.{}")
    subjects = [f"{api}.{op.format(stream, n)}" for n in names for op in each]
    if durable:
        subjects += [f"{api}.INFO.{stream}.{n}" for n in names]
        subjects += [f"$JS.ACK.{stream}.{n}.>" for n in names]
    return tuple(subjects)


def log_reads(access_key: str, follows: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Reading the log as ``access_key``: the stream's info, reads through its reader names,
    and following it through the durables ``follows``."""
    return (
        f"{_JS}.STREAM.INFO.{_STREAM}",
        *_consumers(_STREAM, reader_names(access_key), durable=False),
        *_consumers(_STREAM, follows, durable=True),
    )


# Never anyone's: deny wins over allow. (A snapshot bucket's writer purges that bucket's
# old chunks, and its readers get its meta message: those are granted per bucket.)
_NEVER = (
    f"{_JS}.STREAM.DELETE.>",
    f"{_JS}.STREAM.PURGE.{_STREAM}",
    f"{_JS}.STREAM.MSG.DELETE.>",
    f"{_JS}.STREAM.MSG.GET.{_STREAM}",
    f"{_JS}.DIRECT.GET.{_STREAM}",
    f"{_JS}.DIRECT.GET.{_STREAM}.>",
)
_MAKE = ("INFO", "CREATE", "UPDATE")
# Making the actors' snapshot buckets: the administrator's step, with the stream.
SNAPSHOT_BUCKETS_ADMIN = tuple(
    f"{_JS}.STREAM.{op}.{subj.snapshot_stream(kind)}"
    for kind in subj.SNAPSHOT_KINDS
    for op in ("INFO", "CREATE")
)
STREAM_ADMIN = (
    *(
        f"{_JS}.STREAM.{op}.{s}"
        for s in (_STREAM, subj.INTAKE_STREAM, subj.DOMAINS_STREAM)
        for op in _MAKE
    ),
    *SNAPSHOT_BUCKETS_ADMIN,
)


# What people's account reaches of the services' account: requests answered by the
# intake stream (a JetStream publish: its acknowledgement comes back) or by an agent, and
# the up side of channels (service imports); and the down side of channels (a stream
# import). Who of the people may use which is each one's permissions.
PEOPLE_SERVICE_IMPORTS = (
    subj.INTAKE_WILDCARD,
    f"{subj.AGENT_RPC_PREFIX}.>",
    f"{subj.CHANNEL_PREFIX}.*.*.*.up",
)
PEOPLE_STREAM_IMPORTS = (f"{subj.CHANNEL_PREFIX}.*.*.*.down",)
# The streams readers read (the whole log; each domain's part of it), what their
# account imports of them, and what provisions their consumers (the gatekeeper's static
# user: a reader may not create, change or delete a consumer, so it cannot have one
# deliver elsewhere or filter beyond its scope).
READER_STREAMS = (_STREAM, subj.DOMAINS_STREAM)
READERS_STREAM_IMPORTS = (subj.reader_out(">"),)
READERS_SERVICE_IMPORTS = tuple(f"$JS.ACK.{s}.>" for s in READER_STREAMS)
PROVISION_READERS = tuple(
    f"{_JS}.CONSUMER.{op}.{s}.*{rest}"
    for s in READER_STREAMS
    for op, rest in (("CREATE", ".>"), ("INFO", ""), ("DELETE", ""))
)


def _snapshot_reads(kind: str, access_key: str) -> tuple[str, ...]:
    """Reading the snapshot of ``kind``: the bucket's info, its meta message (a message
    get), its chunks (through the reader's names, as the log)."""
    stream = subj.snapshot_stream(kind)
    return (
        f"{_JS}.STREAM.INFO.{stream}",
        f"{_JS}.STREAM.MSG.GET.{stream}",
        *_consumers(stream, reader_names(access_key), durable=False),
    )


def _snapshot_writes(kind: str, access_key: str) -> tuple[str, ...]:
    """Reading and writing the snapshot of ``kind``: its chunks and meta, and the purge of
    the chunks a new snapshot replaces."""
    return (
        *_snapshot_reads(kind, access_key),
        f"$O.{subj.snapshot_bucket(kind)}.>",
        f"{_JS}.STREAM.PURGE.{subj.snapshot_stream(kind)}",
    )


@dataclass(frozen=True)
class Permissions:
    """Subjects an identity may publish to and subscribe to (``*`` one token, ``>`` the
    rest), what it never may, and whether it may answer requests sent to it."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    deny_publish: tuple[str, ...] = _NEVER
    responds: bool = False
    account: str = SERVICES_ACCOUNT


def inbox(access_key: str) -> str:
    """The inbox prefix of ``access_key``: replies to it come here, and nowhere else it
    may read (a shared ``_INBOX.>`` would show every user every other's replies)."""
    return f"_INBOX.{access_key}"


def user_permissions(access_key: str, role: Role) -> Permissions:
    """A person's: its own requests (sessions, administration: handed to the intake, which
    writes them on the log; questions to agents)."""
    publish: tuple[str, ...] = (
        subj.intake(access_key),
        f"{subj.AGENT_RPC_PREFIX}.*.{access_key}",
        # Its own channels into sessions (terminal, app ports): the up side of its key's.
        f"{subj.CHANNEL_PREFIX}.*.{access_key}.*.up",
    )
    subscribe = (f"{inbox(access_key)}.>", f"{subj.CHANNEL_PREFIX}.*.{access_key}.*.down")
    if role is Role.SUPERADMIN:
        # The stream's administrator: JetStream's API answers only connections of the
        # log's own account (an account without JetStream answers ``$JS.API`` itself,
        # "not enabled", whatever it imports), so a superadmin is placed there. It is
        # trusted with the log as the administrator's setup step is.
        publish += STREAM_ADMIN
        return Permissions(publish=publish, subscribe=subscribe, account=SERVICES_ACCOUNT)
    return Permissions(publish=publish, subscribe=subscribe, account=PEOPLE_ACCOUNT)


def reader_permissions(access_key: str, domain: str | None) -> Permissions:
    """A reader's (of ``domain``'s part of the log; None: of all of it): it hears what
    its consumer (named by its key, made by the gatekeeper) delivers, and acknowledges."""
    stream = _STREAM if domain is None else subj.DOMAINS_STREAM
    return Permissions(
        publish=(f"$JS.ACK.{stream}.{access_key}.>",),
        subscribe=(subj.reader_out(access_key), f"{inbox(access_key)}.>"),
        account=READERS_ACCOUNT,
    )


def service_permissions(access_key: str, service: str) -> Permissions | None:
    """A part of the cluster's: what it decides, and reading the log; None for a service
    of no known kind."""
    kind, _, agent_id = service.partition(":")
    if kind == "reader":
        return reader_permissions(access_key, agent_id or None)
    grant = _SERVICES.get(service)
    if grant is not None:
        return grant(access_key)
    if kind == "agent" and subj.is_token(agent_id):
        return _agent(access_key, agent_id)
    if kind == "router" and subj.is_token(agent_id):
        return _router(access_key, agent_id)
    return None


def _follower(
    access_key: str,
    service: str,
    own: tuple[str, ...],
    listens: tuple[str, ...] = (),
    *,
    responds: bool = False,
) -> Permissions:
    """A service that publishes ``own``, follows the log through its kind's durables and
    hears its inbox and ``listens``; ``responds``: it answers requests sent there."""
    return Permissions(
        publish=own + log_reads(access_key, durables(service)),
        subscribe=(f"{inbox(access_key)}.>", *listens),
        responds=responds,
    )


def _quota(access_key: str) -> Permissions:
    own = (subj.ADMISSION, subj.SYS, *_snapshot_writes("quota", access_key))
    return _follower(access_key, "quota", own)


def _scheduler(access_key: str) -> Permissions:
    own = (subj.LEDGER, *_snapshot_writes("scheduler", access_key))
    return _follower(access_key, "scheduler", own, (subj.HEARTBEAT_WILDCARD,))


def _domain_feed(access_key: str) -> Permissions:
    # Each domain's records of the log, into the domains' stream; where it stopped is
    # that stream's last message (its info, and a message get: its own stream's).
    own = (
        subj.DOMAINS_WILDCARD,
        f"{_JS}.STREAM.INFO.{subj.DOMAINS_STREAM}",
        f"{_JS}.STREAM.MSG.GET.{subj.DOMAINS_STREAM}",
    )
    return _follower(access_key, "domain-feed", own)


def _registrar(access_key: str) -> Permissions:
    own = (subj.TENANCY, *_snapshot_reads("scheduler", access_key))
    return _follower(access_key, "registrar", own)


def _pipeline(access_key: str) -> Permissions:
    # Its answers on each run's subject, and the requests of a run's tasks in the run
    # owner's name (sessions asked for, destroys at a cancel), which the quota actor
    # judges against that owner's rights: as the intake, it writes people's requests.
    own = (
        subj.pipeline_run("*"),
        subj.request("*", "*"),
        *_snapshot_writes("pipeline", access_key),
    )
    return _follower(access_key, "pipeline", own)


def _serving(access_key: str) -> Permissions:
    # Its decisions and replicas' lifecycle; its replicas' session requests and destroys,
    # in their endpoint owners' names (the fold judges them as any owner's request).
    own = (subj.SERVING, "fgpu.req.>", *_snapshot_reads("scheduler", access_key))
    return _follower(access_key, "serving", own)


def _archiver(access_key: str) -> Permissions:
    # The log's past, once archived and said: removed from the stream (a purge, its
    # alone), what the actors' snapshots cover (read, to know how far it may go); and the
    # log's health, the room on its servers' disks (the watcher beside a server speaks as
    # the archiver: ``fgpu up``). It follows no durable.
    purge = f"{_JS}.STREAM.PURGE.{_STREAM}"
    own = (
        subj.ARCHIVE,
        subj.health("*"),
        purge,
        *_snapshot_reads("scheduler", access_key),
        *_snapshot_reads("quota", access_key),
        *_snapshot_reads("pipeline", access_key),
    )
    return Permissions(
        publish=own + log_reads(access_key),
        subscribe=(f"{inbox(access_key)}.>",),
        deny_publish=tuple(d for d in _NEVER if d != purge),
    )


def _api(access_key: str) -> Permissions:
    # The read API's door, and the storage service beside it (its folders' scans).
    return _follower(access_key, "api", (subj.access("api"), subj.storage("*")))


def _intake(access_key: str) -> Permissions:
    # People's requests: read from the intake stream through its one durable consumer,
    # written on their subjects of the log, and what was dropped said on its own. Of the
    # log it reads the stream's info alone.
    name = f"{subj.INTAKE_STREAM}.intake"
    own = (
        "fgpu.req.>",
        "fgpu.admin.>",
        subj.access("intake"),
        f"{_JS}.CONSUMER.INFO.{name}",
        f"{_JS}.CONSUMER.CREATE.{name}.>",
        f"{_JS}.CONSUMER.MSG.NEXT.{name}",
        f"$JS.ACK.{name}.>",
        f"{_JS}.STREAM.INFO.{_STREAM}",
    )
    return Permissions(publish=own, subscribe=(f"{inbox(access_key)}.>",))


def _auth(access_key: str) -> Permissions:
    return _follower(access_key, "auth", (subj.access("nats"),))


def _agent_host(access_key: str) -> Permissions:
    # Any agent's subjects: a process hosting many (``fgpu sim agents``).
    own = (
        "fgpu.agent.>",
        "fgpu.usage.>",
        subj.HEARTBEAT_WILDCARD,
        f"{subj.CHANNEL_PREFIX}.*.*.*.down",
        *_snapshot_reads("scheduler", access_key),
    )
    listens = (f"{subj.AGENT_RPC_PREFIX}.*.*", f"{subj.CHANNEL_PREFIX}.*.*.*.up")
    return _follower(access_key, "agent-host", own, listens, responds=True)


def _router(access_key: str, router: str) -> Permissions:
    # What its health checks found of replicas, on its own subject; it reads the log (the
    # endpoints) through reads of its own, and follows no durable.
    own = (subj.route(router), *_snapshot_reads("scheduler", access_key))
    return _follower(access_key, f"router:{router}", own)


def _agent(access_key: str, agent_id: str) -> Permissions:
    own = (
        subj.agent(agent_id),
        f"{subj.agent(agent_id)}.>",
        f"fgpu.usage.{agent_id}.>",
        subj.heartbeat(agent_id),
        f"{subj.CHANNEL_PREFIX}.{agent_id}.*.*.down",  # its channels' answers
        *_snapshot_reads("scheduler", access_key),
    )
    listens = (f"{subj.agent_rpc(agent_id)}.*", f"{subj.CHANNEL_PREFIX}.{agent_id}.*.*.up")
    return _follower(access_key, f"agent:{agent_id}", own, listens, responds=True)


# The services of which there is one kind by each name; readers and agents are kinds of
# many (``reader:<domain>``, ``agent:<id>``).
_SERVICES: dict[str, Callable[[str], Permissions]] = {
    "quota": _quota,
    "scheduler": _scheduler,
    "pipeline": _pipeline,
    "domain-feed": _domain_feed,
    "registrar": _registrar,
    "serving": _serving,
    "archiver": _archiver,
    "api": _api,
    "intake": _intake,
    "auth": _auth,
    "agent-host": _agent_host,
}
