"""Projections: DuckDB tables kept in step with the log, for every query and for audits.

The DuckDB adapter of the project. It folds the log with the same pure function the actors
use (``services.domain.state``), so every reader agrees with them, and it imports no other
adapter library. ``Projector`` keeps a ``ProjectionStore`` current; ``rebuild`` makes one
from the start of the log; ``queries`` and ``replay`` answer the read API and the audit.
"""

from projections.projector import DURABLE, Projector, RebuildResult, rebuild
from projections.store import (
    ProjectionError,
    ProjectionStore,
    SchemaMismatch,
    StoreLocked,
    connect_reader,
)

__all__ = [
    "DURABLE",
    "ProjectionError",
    "ProjectionStore",
    "Projector",
    "RebuildResult",
    "SchemaMismatch",
    "StoreLocked",
    "connect_reader",
    "rebuild",
]
