"""Read queries over the projection tables: plain rows (dicts) for the read API and the CLI.

Each function takes its own connection (``ProjectionStore.cursor()``) and blocks: call it
from a worker thread. Values are bound as parameters, never pasted into SQL.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from services.domain.access.visibility import Scope
from services.domain.status import HOLDS_ALLOCATION, SessionStatus

__all__ = [
    "EventFilter",
    "admin_answer_row",
    "agent_rows",
    "busy_between",
    "destroy_row",
    "event_rows",
    "held_by",
    "last_gpu_memory",
    "owner_usage",
    "session_events",
    "session_rows",
    "session_scope",
    "session_transitions",
    "tenancy_rows",
    "visible_sessions",
    "write_events_parquet",
]

Row = dict[str, Any]


def _rows(result: duckdb.DuckDBPyConnection) -> list[Row]:
    names = [d[0] for d in result.description or ()]
    out = []
    for values in result.fetchall():
        row = dict(zip(names, values, strict=True))
        for k, v in row.items():
            if isinstance(v, datetime) and v.tzinfo is None:
                row[k] = v.replace(tzinfo=UTC)  # stored as naive UTC
        out.append(row)
    return out


def naive_utc(at: datetime) -> datetime:
    """``at`` as the naive UTC the tables hold (a naive ``at`` is taken to be UTC)."""
    return at if at.tzinfo is None else at.astimezone(UTC).replace(tzinfo=None)


def last_gpu_memory(
    con: duckdb.DuckDBPyConnection, session_ids: Sequence[str]
) -> dict[str, list[Row]]:
    """The last usage sample of each device of each of ``session_ids``, by session:
    ``gpu_index``, ``mem_used``, ``mem_limit``, ``at``, ``charged_ns`` (None: not
    counted) and ``busy``: how much of the device the session kept busy between its last
    two samples (``busy_between``; None with only one, or uncounted). One query for a
    page of sessions, however many it holds (never one a row)."""
    if not session_ids:
        return {}
    rows = _rows(
        con.execute(
            # The last two samples of a device, newest first: a struct keeps a null
            # ``charged_ns`` in its place (arg_max's list skips null arguments).
            "SELECT session_id, gpu_index, arg_max({'mem_used': mem_used,"
            " 'mem_limit': mem_limit, 'at': happened_at, 'charged_ns': charged_ns}, seq, 2)"
            # A semi-join rather than ``list_contains`` on every row: the table keeps every
            # sample ever taken, and each page of the list reads it.
            " AS samples FROM gpu_usage WHERE session_id IN (SELECT unnest(?))"
            " GROUP BY session_id, gpu_index ORDER BY session_id, gpu_index",
            [list(session_ids)],
        )
    )
    found: dict[str, list[Row]] = {}
    for r in rows:
        last, *before = r["samples"]
        at = last["at"].replace(tzinfo=UTC)  # stored as naive UTC
        busy = busy_between(before[0], last) if before else None
        row = {"session_id": r["session_id"], "gpu_index": r["gpu_index"], **last}
        found.setdefault(r["session_id"], []).append(row | {"at": at, "busy": busy})
    return found


def busy_between(before: Row, after: Row) -> float | None:
    """The part of the device's time (0 to 1) charged to the session between two of its
    samples (``charged_ns`` and ``at``, a datetime each): the charged time's growth over
    the time between them. None where either sample lacks the counter or they are not
    apart in time. An estimate settled late may step the counter back (0 then) or put a
    little more than the time between in it (1 then)."""
    if before["charged_ns"] is None or after["charged_ns"] is None:
        return None
    wall_ns: float = (after["at"] - before["at"]).total_seconds() * 1e9
    if wall_ns <= 0:
        return None
    charged: int = after["charged_ns"] - before["charged_ns"]
    return min(1.0, max(0.0, charged / wall_ns))


def session_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    session_id: str | None = None,
    session_ids: Sequence[str] = (),
    statuses: Sequence[str] = (),
    owner: str | None = None,
    agent: str | None = None,
    scope: Scope | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[int, list[Row]]:
    """How many sessions match (and are in ``scope``), and one page of them, newest
    request first."""
    where: list[str] = ["TRUE"]
    args: list[object] = []
    if scope is not None and not scope.everything:
        cond, given = session_scope(scope)
        where.append(cond)
        args += given
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    if session_ids:
        where.append("list_contains(?, session_id)")
        args.append(list(session_ids))
    if statuses:
        where.append("list_contains(?, status)")
        args.append(list(statuses))
    if owner is not None:
        where.append("owner = ?")
        args.append(owner)
    if agent is not None:
        where.append("agent_id = ?")
        args.append(agent)
    cond = " AND ".join(where)
    total_row = con.execute(f"SELECT count(*) FROM sessions WHERE {cond}", args).fetchone()
    total = int(total_row[0]) if total_row else 0
    page = _rows(
        con.execute(
            f"SELECT * FROM sessions WHERE {cond} ORDER BY arrival_seq DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        )
    )
    return total, page


def session_scope(scope: Scope) -> tuple[str, list[object]]:
    """A condition on the ``sessions`` table's rows, and its arguments: the session is in
    ``scope`` (which does not cover everything)."""
    keys = sorted(scope.keys)
    if scope.domain is not None:
        return "(domain = ? OR list_contains(?, owner))", [scope.domain, keys]
    return '("user" = ? OR list_contains(?, owner))', [scope.user, keys]


def visible_sessions(
    con: duckdb.DuckDBPyConnection, session_ids: Sequence[str], scope: Scope
) -> set[str]:
    """Those of ``session_ids`` that are in ``scope``."""
    if scope.everything:
        return set(session_ids)
    cond, args = session_scope(scope)
    found = con.execute(
        f"SELECT session_id FROM sessions WHERE list_contains(?, session_id) AND {cond}",
        [list(session_ids), *args],
    ).fetchall()
    return {r[0] for r in found}


def session_transitions(con: duckdb.DuckDBPyConnection, session_id: str) -> list[Row]:
    return _rows(
        con.execute(
            "SELECT h.seq, h.happened_at, h.status, h.event_id, e.actor, e.type "
            "FROM session_history h LEFT JOIN events e ON e.seq = h.seq "
            "WHERE h.session_id = ? ORDER BY h.seq",
            [session_id],
        )
    )


# A record the fold refused (``error``: undecodable, on a subject not its own, a request
# for a session id taken already) is of no session, whichever it names: it is in no
# session's story.
_OF_SESSION = "error IS NULL AND session_id"


def session_events(con: duckdb.DuckDBPyConnection, session_id: str) -> list[Row]:
    """Every event of the session (naming it, not refused by the fold), in log order."""
    return _rows(
        con.execute(f"SELECT * FROM events WHERE {_OF_SESSION} = ? ORDER BY seq", [session_id])
    )


def agent_rows(con: duckdb.DuckDBPyConnection, agent_id: str | None = None) -> list[Row]:
    """Agents with their GPUs (``gpus``) and each GPU's shares (``shares``, with the owner
    of each session), by id."""
    cond, args = ("WHERE agent_id = ?", [agent_id]) if agent_id is not None else ("", [])
    agents = _rows(con.execute(f"SELECT * FROM agents {cond} ORDER BY agent_id", args))
    owners = dict(
        con.execute(
            "SELECT session_id, owner FROM sessions WHERE session_id IN "
            f"(SELECT session_id FROM gpu_shares {cond})",
            args,
        ).fetchall()
    )
    for a in agents:
        for g in a["gpus"]:
            for share in g["shares"]:
                share["owner"] = owners.get(share["session_id"])
    return agents


def owner_usage(con: duckdb.DuckDBPyConnection) -> list[Row]:
    """Per access key: what its sessions hold on agents now, and the quota it holds."""
    return _rows(
        con.execute(
            """
            WITH alloc AS (
                SELECT owner, count(*) AS sessions, sum(req_cpu) AS cpu,
                       sum(req_mem) AS mem, sum(req_fgpu) AS fgpu
                FROM sessions WHERE holds_allocation GROUP BY owner
            )
            SELECT coalesce(o.owner, a.owner) AS owner,
                   coalesce(a.sessions, 0) AS alloc_sessions,
                   coalesce(a.cpu, 0)::BIGINT AS alloc_cpu,
                   coalesce(a.mem, 0)::BIGINT AS alloc_mem,
                   coalesce(a.fgpu, 0)::BIGINT AS alloc_fgpu,
                   coalesce(o.sessions, 0) AS quota_sessions,
                   coalesce(o.cpu, 0) AS quota_cpu,
                   coalesce(o.mem, 0) AS quota_mem,
                   coalesce(o.fgpu, 0) AS quota_fgpu
            FROM owners o FULL OUTER JOIN alloc a ON a.owner = o.owner
            ORDER BY owner
            """
        )
    )


_HELD = sorted(s.value for s in HOLDS_ALLOCATION | {SessionStatus.PENDING})
_HOLDERS = ("owner", "user", "project", "domain")  # a keypair's, a user's, ...


def held_by(con: duckdb.DuckDBPyConnection, column: str, value: str) -> Row:
    """What the sessions whose ``column`` (owner, user, project or domain) is ``value``
    hold against a policy, as the quota actor counts it (from admission until they end):
    ``sessions``, ``cpu``, ``mem``, ``fgpu``; and of them those still pending (admitted,
    not yet placed): ``pending_sessions``, ``pending_cpu``, ``pending_mem``,
    ``pending_fgpu``."""
    if column not in _HOLDERS:
        raise ValueError(f"no holder column {column!r}")
    marks = ", ".join("?" for _ in _HELD)
    held = f"status IN ({marks})"
    pending = "status = 'PENDING'"
    [row] = _rows(
        con.execute(
            f"""
            SELECT count(*) FILTER (WHERE {held})::INTEGER AS sessions,
                   coalesce(sum(req_cpu) FILTER (WHERE {held}), 0)::BIGINT AS cpu,
                   coalesce(sum(req_mem) FILTER (WHERE {held}), 0)::BIGINT AS mem,
                   coalesce(sum(req_fgpu) FILTER (WHERE {held}), 0)::BIGINT AS fgpu,
                   count(*) FILTER (WHERE {pending})::INTEGER AS pending_sessions,
                   coalesce(sum(req_cpu) FILTER (WHERE {pending}), 0)::BIGINT AS pending_cpu,
                   coalesce(sum(req_mem) FILTER (WHERE {pending}), 0)::BIGINT AS pending_mem,
                   coalesce(sum(req_fgpu) FILTER (WHERE {pending}), 0)::BIGINT AS pending_fgpu
            FROM sessions WHERE "{column}" = ?
            """,
            [*_HELD, *_HELD, *_HELD, *_HELD, value],
        )
    )
    return row


@dataclass(frozen=True)
class EventFilter:
    after: int = 0
    since: datetime | None = None
    until: datetime | None = None
    session: str | None = None
    owner: str | None = None
    agent: str | None = None
    types: tuple[str, ...] = ()
    scope: Scope | None = None  # None: every event


def event_rows(con: duckdb.DuckDBPyConnection, f: EventFilter, limit: int) -> list[Row]:
    """Events matching ``f`` after sequence ``f.after``, oldest first, at most ``limit``.

    ``owner`` matches events that name the key and events of the key's sessions;
    ``scope``, events that name one of its keys and events of sessions in it; a record the
    fold refused is in no scope but everything's (whose it says it is, or whose session it
    names, is not to be believed).
    """
    cond, args = _event_where(f)
    sql = f"SELECT * FROM events WHERE {cond} ORDER BY seq LIMIT ?"
    return _rows(con.execute(sql, [*args, limit]))


# The audit log's columns as an export holds them: the message itself as its bytes (the
# event's JSON; a malformed one as it came).
_EXPORTED = (
    "seq, subject, type, event_id, happened_at, actor, causation_id, correlation_id,"
    " session_id, agent_id, owner, error, payload"
)


def write_events_parquet(con: duckdb.DuckDBPyConnection, f: EventFilter, path: str) -> int:
    """Write the events matching ``f`` (oldest first) to a Parquet file at ``path``; how
    many. Read back before it returns: a file that does not hold them all raises
    RuntimeError."""
    import pyarrow.parquet as pq

    cond, args = _event_where(f)
    relation = con.sql(f"SELECT {_EXPORTED} FROM events WHERE {cond} ORDER BY seq", params=args)
    table = relation.to_arrow_table()
    pq.write_table(table, path, compression="zstd")
    back = pq.read_metadata(path).num_rows
    if back != table.num_rows:
        raise RuntimeError(f"{path} holds {back} events of {table.num_rows} written")
    return int(table.num_rows)


def _event_where(f: EventFilter) -> tuple[str, list[object]]:
    where: list[str] = ["seq > ?"]
    args: list[object] = [f.after]
    if f.since is not None:
        where.append("happened_at >= ?")
        args.append(naive_utc(f.since))
    if f.until is not None:
        where.append("happened_at <= ?")
        args.append(naive_utc(f.until))
    if f.session is not None:
        where.append("session_id = ?")
        args.append(f.session)
    if f.agent is not None:
        where.append("agent_id = ?")
        args.append(f.agent)
    if f.owner is not None:
        where.append(
            f"(owner = ? OR {_OF_SESSION} IN (SELECT session_id FROM sessions WHERE owner = ?))"
        )
        args += [f.owner, f.owner]
    if f.types:
        where.append("list_contains(?, type)")
        args.append(list(f.types))
    if f.scope is not None and not f.scope.everything:
        cond, given = session_scope(f.scope)
        where.append(
            "error IS NULL AND (list_contains(?, owner) OR session_id IN "
            f"(SELECT session_id FROM sessions WHERE {cond}))"
        )
        args += [sorted(f.scope.keys), *given]
    return " AND ".join(where), args


def destroy_row(con: duckdb.DuckDBPyConnection, request_id: str) -> Row | None:
    """The answer to destroy request ``request_id``; None while it has none."""
    found = _rows(con.execute("SELECT * FROM destroys WHERE request_id = ?", [request_id]))
    return found[0] if found else None


def admin_answer_row(con: duckdb.DuckDBPyConnection, request_id: str) -> Row | None:
    """The registrar's answer to admin request ``request_id``; None while it has none."""
    found = _rows(con.execute("SELECT * FROM admin_answers WHERE request_id = ?", [request_id]))
    return found[0] if found else None


def tenancy_rows(con: duckdb.DuckDBPyConnection, table: str) -> list[Row]:
    """Every row of one tenancy table (``domains``, ``users``, ``keypairs``,
    ``level_policies``), in key order."""
    order = {
        "domains": "domain, project",
        "users": "user",
        "keypairs": "access_key",
        "level_policies": "level, target",
    }[table]
    return _rows(con.execute(f"SELECT * FROM {table} ORDER BY {order}"))
