"""The DuckDB tables the projector maintains, and their Arrow shapes.

Every table is a pure function of the log up to ``meta.last_seq``: rebuilding from the
start of the log gives the same rows (``tests/adapters/test_projections_rebuild.py``). Times are
``TIMESTAMP`` in UTC; resource amounts are exact integers (milli-cores, bytes, fGPU quanta).
"""

from collections.abc import Iterable

import pyarrow as pa

from services.domain.status import ENDED, HOLDS_ALLOCATION, SessionStatus

__all__ = [
    "ARROW",
    "DDL",
    "ENDED_SQL",
    "INSERTS",
    "ROWS",
    "SCHEMA_VERSION",
    "SERVING_WHOLE",
    "STORED",
    "TABLES",
    "VIEWS",
    "WHOLE",
]

# Bumped whenever a table changes shape or meaning; a store of another version is rebuilt.
SCHEMA_VERSION = 13

_TS = pa.timestamp("us")
_DEVICE = pa.struct([("gpu_index", pa.int32()), ("fgpu", pa.int64())])
_MOUNT = pa.struct([("name", pa.string()), ("read_only", pa.bool_()), ("at", pa.string())])
_SHARE = pa.struct([("session_id", pa.string()), ("fgpu", pa.int64())])
_GPU = pa.struct(
    [
        ("gpu_index", pa.int32()),
        ("uuid", pa.string()),
        ("model", pa.string()),
        ("mem", pa.int64()),
        ("sm_count", pa.int32()),
        ("capacity", pa.int64()),  # fGPU quanta this device is worth
        ("allocated", pa.int64()),
        ("free", pa.int64()),
        ("shares", pa.list_(_SHARE)),
    ]
)


_IMAGE = pa.struct(
    [("ref", pa.string()), ("id", pa.string()), ("digest", pa.string()), ("size", pa.int64())]
)


def _schema(columns: list[tuple[str, pa.DataType]]) -> pa.Schema:
    return pa.schema([pa.field(name, kind) for name, kind in columns])


ARROW: dict[str, pa.Schema] = {
    # The audit log: every message of the stream, in order, as it was decoded.
    "events": _schema(
        [
            ("seq", pa.int64()),
            ("subject", pa.string()),
            ("type", pa.string()),  # the event's tag, or "malformed"
            ("event_id", pa.string()),
            ("happened_at", _TS),
            ("actor", pa.string()),  # who: an access key, quota, scheduler, agent:<id>
            ("causation_id", pa.string()),
            ("correlation_id", pa.string()),
            ("session_id", pa.string()),
            ("agent_id", pa.string()),
            ("owner", pa.string()),  # the access key an event names (owner or requester)
            # Why the fold refused it (undecodable, wrong subject, a session id taken
            # already): such a record is of no session, whichever it names.
            ("error", pa.string()),
            ("payload", pa.binary()),  # the event as JSON
        ]
    ),
    "sessions": _schema(
        [
            ("session_id", pa.string()),
            ("name", pa.string()),
            ("owner", pa.string()),
            ("image", pa.string()),
            ("command", pa.list_(pa.string())),
            ("priority", pa.int32()),
            ("status", pa.string()),
            ("req_cpu", pa.int64()),
            ("req_mem", pa.int64()),
            ("req_fgpu", pa.int64()),
            ("holds_allocation", pa.bool_()),  # SCHEDULED, PREPARING, RUNNING, TERMINATING
            ("agent_id", pa.string()),
            ("devices", pa.list_(_DEVICE)),  # fGPU quanta per GPU index of ``agent_id``
            ("mounts", pa.list_(_MOUNT)),  # the virtual folders it asked to mount
            ("container_id", pa.string()),
            ("exit_code", pa.int32()),
            ("reason", pa.string()),  # rejection, cancellation, stop or error reason
            ("user", pa.string()),  # its access key's user when asked for (null: none)
            ("project", pa.string()),  # domain/project
            ("domain", pa.string()),
            ("resource_group", pa.string()),  # the resource group it runs in
            ("session_type", pa.string()),  # batch or interactive
            ("waiting", pa.string()),  # why the scheduler could not place it at first
            ("pulled", pa.int64()),  # bytes of its image its agent pulled so far
            ("pull_total", pa.int64()),  # of how many (0: not known, or no pull)
            ("invalid", pa.string()),  # why the request can never be accepted as written
            ("request_id", pa.string()),
            ("correlation_id", pa.string()),
            ("arrival_seq", pa.int64()),
            ("last_seq", pa.int64()),  # sequence of its latest transition
            ("requested_at", _TS),
            ("admitted_at", _TS),
            ("scheduled_at", _TS),
            ("preparing_at", _TS),
            ("pulling_at", _TS),
            ("running_at", _TS),
            ("terminating_at", _TS),
            ("ended_at", _TS),
        ]
    ),
    "session_history": _schema(
        [
            ("session_id", pa.string()),
            ("seq", pa.int64()),
            ("happened_at", _TS),
            ("status", pa.string()),
            ("event_id", pa.string()),
        ]
    ),
    "agents": _schema(
        [
            ("agent_id", pa.string()),
            ("runtime", pa.string()),
            ("resource_group", pa.string()),  # the resource group it serves
            ("lost", pa.bool_()),
            ("fgpu_per_gpu", pa.int64()),
            ("cap_cpu", pa.int64()),
            ("cap_mem", pa.int64()),
            ("cap_fgpu", pa.int64()),
            ("alloc_cpu", pa.int64()),
            ("alloc_mem", pa.int64()),
            ("alloc_fgpu", pa.int64()),
            ("free_cpu", pa.int64()),
            ("free_mem", pa.int64()),
            ("free_fgpu", pa.int64()),
            ("sessions", pa.int32()),  # sessions holding an allocation here
            ("images", pa.list_(pa.string())),
            # The same with the engine's image id, the registry's digest and the size.
            ("image_details", pa.list_(_IMAGE)),
            ("registry", pa.string()),  # where it pulls what it lacks (null: nowhere)
            # Its GPUs, each with its fGPU shares by session (views ``gpus`` and
            # ``gpu_shares`` give them as rows): an agent is one row, written at once.
            ("gpus", pa.list_(_GPU)),
        ]
    ),
    "policies": _schema(
        [
            ("owner", pa.string()),
            ("max_sessions", pa.int64()),
            ("max_cpu", pa.int64()),
            ("max_mem", pa.int64()),
            ("max_fgpu", pa.int64()),
            ("set_at", _TS),
        ]
    ),
    # What the GPU shim measured inside each session's container (gpu.usage-sampled):
    # bytes, and totals since the session started (``charged_ns``: null where not counted).
    "gpu_usage": _schema(
        [
            ("seq", pa.int64()),
            ("happened_at", _TS),
            ("agent_id", pa.string()),
            ("session_id", pa.string()),
            ("gpu_index", pa.int32()),
            ("mem_used", pa.int64()),
            ("mem_peak", pa.int64()),
            ("mem_limit", pa.int64()),
            ("launches", pa.int64()),
            ("throttled_ns", pa.int64()),
            ("oom_refusals", pa.int64()),
            ("charged_ns", pa.int64()),
        ]
    ),
    # The fold's state at fixed points of the log, for time travel and fast restarts.
    "snapshots": _schema([("seq", pa.int64()), ("state", pa.binary())]),
    # Serving endpoints that are not removed, one row each, written whole when any
    # changes; ``detail`` is the read API's shape of it, as JSON (its revisions, targets,
    # replicas and tokens: never a token's hash).
    "endpoints": _schema(
        [
            ("endpoint_id", pa.string()),
            ("name", pa.string()),
            ("owner", pa.string()),
            ("domain", pa.string()),
            ("project", pa.string()),
            ("detail", pa.string()),
        ]
    ),
    # Each admin request once answered (by the registrar): applied, or refused and why.
    "admin_answers": _schema(
        [
            ("request_id", pa.string()),
            ("requester", pa.string()),
            ("command", pa.string()),  # what was asked: the command's tag
            ("applied", pa.bool_()),
            ("code", pa.string()),  # forbidden, invalid or conflict; null: applied
            ("reason", pa.string()),
            ("answered_seq", pa.int64()),
        ]
    ),
    # The tenancy as it stands: rewritten whole whenever it changes (it is small).
    "domains": _schema([("domain", pa.string()), ("project", pa.string())]),
    "users": _schema(
        [
            ("user", pa.string()),
            ("domain", pa.string()),
            ("role", pa.string()),
            ("projects", pa.list_(pa.string())),
            ("default_project", pa.string()),
        ]
    ),
    # Keypairs without their secrets' hashes: those stay in the fold.
    "keypairs": _schema(
        [
            ("access_key", pa.string()),
            ("user", pa.string()),  # null: a service's
            ("service", pa.string()),
            ("revoked", pa.bool_()),
        ]
    ),
    "level_policies": _schema(
        [
            ("level", pa.string()),  # keypair, user, project or domain
            ("target", pa.string()),
            ("max_sessions", pa.int64()),
            ("max_pending_sessions", pa.int64()),
            ("max_pending_cpu", pa.int64()),
            ("max_pending_mem", pa.int64()),
            ("max_pending_fgpu", pa.int64()),
            ("total_cpu", pa.int64()),
            ("total_mem", pa.int64()),
            ("total_fgpu", pa.int64()),
            ("max_priority", pa.int64()),
        ]
    ),
    # Each destroy request once answered: by the first event naming it as its cause.
    "destroys": _schema(
        [
            ("request_id", pa.string()),
            ("session_id", pa.string()),
            ("requester", pa.string()),
            ("answered_seq", pa.int64()),
            ("refused", pa.string()),  # why it was refused; null: carried out
        ]
    ),
}

_SQL_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.string(): "VARCHAR",
    pa.bool_(): "BOOLEAN",
    pa.binary(): "BLOB",
    _TS: "TIMESTAMP",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.list_(_DEVICE): "STRUCT(gpu_index INTEGER, fgpu BIGINT)[]",
    pa.list_(_MOUNT): 'STRUCT(name VARCHAR, read_only BOOLEAN, "at" VARCHAR)[]',
    pa.list_(_IMAGE): "STRUCT(ref VARCHAR, id VARCHAR, digest VARCHAR, size BIGINT)[]",
    pa.list_(_GPU): (
        "STRUCT(gpu_index INTEGER, uuid VARCHAR, model VARCHAR, mem BIGINT, sm_count INTEGER,"
        " capacity BIGINT, allocated BIGINT, free BIGINT,"
        " shares STRUCT(session_id VARCHAR, fgpu BIGINT)[])[]"
    ),
}

# List columns of the tables rewritten at every batch are stored as JSON text, and views of
# the tables' own names give them back as typed lists. DuckDB's write-ahead log writes a
# table's list data not yet checkpointed again at every append: the agents' GPUs added
# about 8 KB to every batch after the last, so the log filled, and forced a checkpoint
# (tens of milliseconds), every few dozen batches. Text columns cost the same every time.
_AS_JSON: dict[str, tuple[str, ...]] = {
    "sessions": ("command", "devices", "mounts"),
    "agents": ("images", "image_details", "gpus"),
}

# The table each kind of row is stored in.
STORED: dict[str, str] = {name: f"{name}_rows" if name in _AS_JSON else name for name in ARROW}

# The shapes of the stored rows: ARROW's, with the JSON columns as text.
_STORED_ROWS: dict[str, pa.Schema] = {
    name: pa.schema(
        [pa.field(f.name, pa.string()) if f.name in _AS_JSON.get(name, ()) else f for f in schema]
    )
    for name, schema in ARROW.items()
}

# The audit rows' other columns DuckDB reads from the payload itself, outside the GIL,
# where building them in Python would hold it (bench/rebuild.py, stages_us_per_event).
_AUDIT_BUILT = ("seq", "subject", "type", "error", "payload")
_AUDIT_READ = {  # column -> where in the payload (the first found)
    "type": ("type",),  # the tag; the batch gives "malformed" where there is none
    "event_id": ("id",),
    "happened_at": ("at",),
    "actor": ("actor",),
    "causation_id": ("causation_id",),
    "correlation_id": ("correlation_id",),
    "session_id": ("session_id",),
    "agent_id": ("agent_id",),
    "owner": ("owner", "requester"),
}

# The shapes of the rows a batch hands to DuckDB (``projections.rows``).
ROWS: dict[str, pa.Schema] = {
    **_STORED_ROWS,
    # The payloads as large binary: a bulk batch's arrive end to end with int64 offsets.
    "events": pa.schema(
        [
            pa.field(c, pa.large_binary()) if c == "payload" else ARROW["events"].field(c)
            for c in _AUDIT_BUILT
        ]
    ),
}


def _audit_insert() -> str:
    keys = [k for where in _AUDIT_READ.values() for k in where]
    paths = ", ".join(f"'$.{k}'" for k in keys)
    found: dict[str, str] = {}
    for column, where in _AUDIT_READ.items():
        picks = [f"f[{keys.index(k) + 1}]" for k in where]
        value = picks[0] if len(picks) == 1 else f"coalesce({', '.join(picks)})"
        if column == "type":
            value = f"coalesce(type, {value})"
        elif column == "happened_at":
            # An ``at`` without an offset would be read in the session's time zone: the
            # store's connections are set to UTC (``store._connect``), as Python reads it.
            value = f"timezone('UTC', {value}::TIMESTAMPTZ)"
        found[column] = value
    columns = ", ".join(found.get(f.name, f.name) for f in ARROW["events"])
    return (
        f"SELECT {columns} FROM (SELECT *, CASE WHEN type IS NULL THEN "
        f"json_extract_string(decode(payload), [{paths}]) END AS f FROM _events)"
    )


# How each table's batch rows (``_<table>`` in the script) become its stored rows.
INSERTS: dict[str, str] = {name: f"SELECT * FROM _{name}" for name in ARROW}
INSERTS["events"] = _audit_insert()

TABLES: tuple[str, ...] = tuple(STORED.values())


# Compressing payloads costs more than a third of a rebuild for a factor of two on disk.
_UNCOMPRESSED = {("events", "payload")}


def _create(name: str, schema: pa.Schema) -> str:
    cols = ", ".join(
        f"{f.name} {_SQL_TYPES[f.type]}"
        + (" USING COMPRESSION uncompressed" if (name, f.name) in _UNCOMPRESSED else "")
        for f in schema
    )
    return f"CREATE TABLE IF NOT EXISTS {STORED[name]} ({cols})"


def _typed(name: str) -> str:
    """The rows of ``name`` with its JSON columns as the typed lists ARROW describes."""
    casts = ", ".join(
        f"{c}::JSON::{_SQL_TYPES[ARROW[name].field(c).type]} AS {c}" for c in _AS_JSON[name]
    )
    return f"SELECT * REPLACE ({casts}) FROM {STORED[name]}"


def _sql_list(statuses: Iterable[SessionStatus]) -> str:
    return ", ".join(f"'{s.value}'" for s in sorted(statuses))


ENDED_SQL = _sql_list(ENDED)  # the ended statuses, for ``status IN (...)``
_HELD = _sql_list(HOLDS_ALLOCATION | {SessionStatus.PENDING})  # quota held, as the actor counts

# Tables written whole when what they describe changes (``Batch.replaced``).
WHOLE = frozenset({"domains", "users", "keypairs", "level_policies"})
SERVING_WHOLE = frozenset({"endpoints"})

# Derived tables, computed when read (nothing to write per batch).
VIEWS: dict[str, str] = {
    **{name: _typed(name) for name in _AS_JSON},
    "gpus": """
        SELECT agent_id, g.gpu_index, g.uuid, g.model, g.mem, g.sm_count, g.capacity,
               g.allocated, g.free
        FROM (SELECT agent_id, unnest(gpus) AS g FROM agents)""",
    "gpu_shares": """
        SELECT agent_id, gpu_index, s.session_id, s.fgpu
        FROM (SELECT agent_id, g.gpu_index, unnest(g.shares) AS s
              FROM (SELECT agent_id, unnest(gpus) AS g FROM agents))""",
    # Quota held per access key, as the quota actor counts it: a session holds its
    # request against its owner's policy from admission until it ends.
    "owners": f"""
        SELECT owner,
               count(*) FILTER (WHERE status IN ({_HELD}))::INTEGER AS sessions,
               coalesce(sum(req_cpu) FILTER (WHERE status IN ({_HELD})), 0)::BIGINT AS cpu,
               coalesce(sum(req_mem) FILTER (WHERE status IN ({_HELD})), 0)::BIGINT AS mem,
               coalesce(sum(req_fgpu) FILTER (WHERE status IN ({_HELD})), 0)::BIGINT AS fgpu
        FROM sessions GROUP BY owner""",
}

DDL: tuple[str, ...] = (
    # The last sequence applied is max(events.seq): written with the batch's other rows.
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR, value BIGINT)",
    # The log the tables are of (EventLog.identity): tables of another log are no use.
    "CREATE TABLE IF NOT EXISTS log_identity (identity VARCHAR)",
    *(_create(name, schema) for name, schema in _STORED_ROWS.items()),
    *(f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()),
)
