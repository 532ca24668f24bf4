"""Time travel: the cluster as it was at a past sequence or instant, from the tables.

The state at sequence N is the fold of every record up to N. It is computed from the
newest snapshot at or below N and the stored events after it, so on a log of a million
events it folds at most one snapshot interval. Sessions that had ended before the
snapshot are not in the state (they never change again); ``ended_counts`` counts them.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from projections.queries import naive_utc
from projections.schema import ENDED_SQL
from projections.store import applied_seq, restore_state
from services.domain.fold.cluster import ClusterState
from services.domain.records import SessionView

__all__ = ["PastState", "seq_at", "state_at"]


@dataclass
class PastState:
    seq: int  # the last record folded
    at: datetime | None  # when that record's event happened (None: none, or malformed)
    state: ClusterState
    ended_counts: dict[str, int]  # sessions ended by then, by final status

    def sessions(self) -> list[SessionView]:
        """The sessions the state holds in full (live ones and recently ended ones)."""
        return list(self.state.sessions.values())


def seq_at(con: duckdb.DuckDBPyConnection, at: datetime) -> int:
    """The last sequence whose event happened at or before ``at`` (0: none did).

    Events carry their writer's clock; the log's order is the truth. The state "at T" is
    the log up to the newest event stamped at or before T.
    """
    row = con.execute(
        "SELECT coalesce(max(seq), 0) FROM events WHERE happened_at <= ?", [naive_utc(at)]
    ).fetchone()
    return int(row[0]) if row else 0


def state_at(con: duckdb.DuckDBPyConnection, seq: int) -> PastState:
    """The cluster after record ``seq`` (clamped to what the tables hold)."""
    seq = max(0, min(seq, applied_seq(con)))
    state = restore_state(con, seq)
    counts = dict(
        con.execute(
            "SELECT status, count(*) FROM session_history "
            f"WHERE seq <= ? AND status IN ({ENDED_SQL}) GROUP BY status ORDER BY status",
            [seq],
        ).fetchall()
    )
    row = con.execute("SELECT happened_at FROM events WHERE seq = ?", [seq]).fetchone()
    at = row[0].replace(tzinfo=UTC) if row and row[0] is not None else None
    return PastState(seq=seq, at=at, state=state, ended_counts=counts)
