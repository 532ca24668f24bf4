"""The subject layout of the log: one subject per aggregate.

fgpu.req.<access_key>.<session_id>   user requests (create, destroy; a serve request stands
                                     on its own request id); a NATS user can be
                                     confined to publish on fgpu.req.<its key>.> only
fgpu.admin.<access_key>.<request_id> administrators' requests (tenancy, policies)
                                     (with tenancy, people's requests reach both only
                                     through the intake, which writes them there)
fgpu.tenancy                         the registrar's answers to them: the tenancy ledger,
                                     written with optimistic concurrency on this subject
fgpu.admission                       the quota actor's admissions and rejections, every
                                     owner's on one subject, written with optimistic
                                     concurrency: limits shared by many keys (a user's,
                                     a project's, a domain's) hold whatever the actors
fgpu.quota.<access_key>              a key's admissions, rejections and policies before
                                     fgpu.admission existed (read, no longer written)
fgpu.sched                           the allocation ledger: every placement, cancel and
                                     stop order; the scheduler writes with optimistic
                                     concurrency on this one subject
fgpu.agent.<agent_id>                an agent's registrations
fgpu.agent.<agent_id>.s.<session_id> what an agent reports of one session
fgpu.agent.<agent_id>.exec.<session_id> commands run in one session (fgpu session exec)
fgpu.serving                         the serving actor's decisions on endpoints (answers to
                                     people's serve requests) and its replicas' lifecycle,
                                     written with optimistic concurrency on this subject
fgpu.route.<router>                  what one router's health checks found of replicas
fgpu.sys                             refused payloads
fgpu.access.<door>                   the access audit of one door (nats: the gatekeeper,
                                     api: the read API): sign-ins, refusals
fgpu.storage.<host>                  what the storage service of one storage host found
                                     in its virtual folders (scans)
fgpu.health.<server>                 the log's health: the room on the disk under one
                                     server's store, said by the watcher beside it
fgpu.pipe.<run_id>                   the pipeline actor's answers about one run (its tasks'
                                     requests and ends, retries, cancel, end), written with
                                     optimistic concurrency on this subject
fgpu.hb.<agent_id>                   heartbeats: core NATS, not stored in the log
fgpu.in.<access_key>                 people's requests on their way to the log: the intake
                                     stream (FGPU_IN, a work queue holding a few per key),
                                     read by the intake, which writes each on its subject
                                     above or drops it (rate, refusal)
fgpu.d.<domain>.<subject>            the log's records of one domain, for its readers: the
                                     domain feed (stream FGPU_DOMAINS, not the log)
                                     writes each record of the log that belongs to a
                                     domain there, under its own subject
fgpu.out.<access_key>                where a reader keypair's consumer delivers (a reader
                                     only listens, and acknowledges)
fgpu.rpc.<agent_id>.<access_key>     requests to one agent (logs, exec) by an access
                                     key: core NATS request and reply, not stored in the
                                     log; the server confines a user to its own key here
"""

import re

__all__ = [
    "ADMISSION",
    "AGENT_RPC_PREFIX",
    "ARCHIVE",
    "CHANNEL_PREFIX",
    "DOMAINS_STREAM",
    "DOMAINS_WILDCARD",
    "HEARTBEAT_WILDCARD",
    "INTAKE_STREAM",
    "INTAKE_WILDCARD",
    "KEPT_SUBJECTS",
    "LEDGER",
    "SERVING",
    "SNAPSHOT_KINDS",
    "STREAM",
    "STREAM_SUBJECTS",
    "STREAM_WILDCARD",
    "SYS",
    "TENANCY",
    "access",
    "admin",
    "agent",
    "agent_exec",
    "agent_request",
    "agent_rpc",
    "agent_session",
    "channel",
    "domain_feed",
    "health",
    "heartbeat",
    "intake",
    "is_token",
    "pipeline_run",
    "quota",
    "reader_out",
    "request",
    "route",
    "snapshot_bucket",
    "snapshot_stream",
    "storage",
    "usage",
]

STREAM = "FGPU"
# People's requests wait here, a few per key, until the intake reads them (a work queue:
# read once, then gone); never part of the log.
INTAKE_STREAM = "FGPU_IN"
INTAKE_WILDCARD = "fgpu.in.*"
# Each domain's records of the log, for the domain's readers (written by the domain feed).
DOMAINS_STREAM = "FGPU_DOMAINS"
DOMAINS_WILDCARD = "fgpu.d.>"
LEDGER = "fgpu.sched"
SYS = "fgpu.sys"
TENANCY = "fgpu.tenancy"
ADMISSION = "fgpu.admission"
ARCHIVE = "fgpu.archive"
SERVING = "fgpu.serving"
STREAM_SUBJECTS = (
    "fgpu.req.>",
    "fgpu.quota.>",
    LEDGER,
    "fgpu.agent.>",
    "fgpu.usage.>",
    SYS,
    "fgpu.admin.>",
    TENANCY,
    ADMISSION,
    "fgpu.access.>",
    ARCHIVE,
    "fgpu.storage.>",
    "fgpu.health.>",
    "fgpu.pipe.>",
    SERVING,
    "fgpu.route.>",
)
# Kept in the stream for good when the past leaves it for the archive: few records, read
# from the start by those who fold them alone (the gatekeeper folds the tenancy).
KEPT_SUBJECTS = (TENANCY, ARCHIVE)
# Every subject of the stream, as a consumer's or a tail's filter: the stream stores only
# STREAM_SUBJECTS, all under it (heartbeats match it too, but are never stored).
STREAM_WILDCARD = "fgpu.>"
HEARTBEAT_WILDCARD = "fgpu.hb.*"
AGENT_RPC_PREFIX = "fgpu.rpc"
# A channel into a session (terminal, app port), on core NATS, never stored:
# ``<this>.<agent>.<requester's key>.<channel>.up`` from the requester to the agent and
# ``... .down`` back. A user may use its own key's alone, an agent its own id's.
CHANNEL_PREFIX = "fgpu.tty"
# Actor snapshots: one object store bucket per kind of actor that writes them, so that a
# service can be given the right to write its own kind's and nobody else's.
SNAPSHOT_KINDS = ("scheduler", "quota", "pipeline")

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def snapshot_bucket(kind: str) -> str:
    """The object store bucket of ``kind``'s snapshots (a name in SNAPSHOT_KINDS)."""
    return f"fgpu-snap-{kind}"


def snapshot_stream(kind: str) -> str:
    """The stream under ``snapshot_bucket(kind)``, as JetStream names it."""
    return f"OBJ_{snapshot_bucket(kind)}"


def is_token(value: str) -> bool:
    """Whether ``value`` may stand as one subject token (access key, session or agent id)."""
    # fullmatch: ``$`` would also match before a trailing newline (``alice\n``).
    return _TOKEN.fullmatch(value) is not None


def intake(access_key: str) -> str:
    """Where ``access_key`` hands its requests to the intake (one subject per key: the
    stream bounds each key's waiting requests by subject)."""
    return f"fgpu.in.{access_key}"


def domain_feed(domain: str, subject: str = ">") -> str:
    """Where the domain feed writes a record of ``domain`` that stands on ``subject`` (a
    subject of the log); with ``>``, every one of the domain's."""
    return f"fgpu.d.{domain}.{subject}"


def reader_out(access_key: str) -> str:
    """Where the consumer of reader keypair ``access_key`` delivers."""
    return f"fgpu.out.{access_key}"


def request(access_key: str, session_id: str) -> str:
    return f"fgpu.req.{access_key}.{session_id}"


def pipeline_run(run_id: str) -> str:
    """The subject of the pipeline actor's answers about run ``run_id``."""
    return f"fgpu.pipe.{run_id}"


def quota(access_key: str) -> str:
    return f"fgpu.quota.{access_key}"


def access(door: str) -> str:
    """The access audit subject of ``door`` (``nats``, ``api``)."""
    return f"fgpu.access.{door}"


def admin(access_key: str, request_id: str) -> str:
    return f"fgpu.admin.{access_key}.{request_id}"


def agent(agent_id: str) -> str:
    return f"fgpu.agent.{agent_id}"


def agent_session(agent_id: str, session_id: str) -> str:
    return f"fgpu.agent.{agent_id}.s.{session_id}"


def agent_exec(agent_id: str, session_id: str) -> str:
    return f"fgpu.agent.{agent_id}.exec.{session_id}"


def usage(agent_id: str, session_id: str) -> str:
    return f"fgpu.usage.{agent_id}.{session_id}"


def health(server: str) -> str:
    """The subject of the log's health at ``server`` (its name: the disk under its store)."""
    return f"fgpu.health.{server}"


def storage(host: str) -> str:
    """The subject of the storage service of ``host`` (a storage host of virtual folders)."""
    return f"fgpu.storage.{host}"


def route(router: str) -> str:
    """The subject of router ``router``'s health reports on serving replicas."""
    return f"fgpu.route.{router}"


def heartbeat(agent_id: str) -> str:
    return f"fgpu.hb.{agent_id}"


def agent_rpc(agent_id: str) -> str:
    """The requests to one agent are ``<this>.<requester's access key>``."""
    return f"{AGENT_RPC_PREFIX}.{agent_id}"


def agent_request(agent_id: str, requester: str) -> str:
    return f"{agent_rpc(agent_id)}.{requester}"


def channel(agent_id: str, requester: str, channel_id: str) -> tuple[str, str]:
    """The subjects of a channel into a session: (up, to the agent; down, to the requester)."""
    base = f"{CHANNEL_PREFIX}.{agent_id}.{requester}.{channel_id}"
    return f"{base}.up", f"{base}.down"
