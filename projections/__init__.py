"""Projections: DuckDB tables kept in step with the log, for every query and for audits.

The DuckDB adapter of the project. It folds the log with the same pure function the actors
use (``services.domain.fold.state``), so every reader agrees with them, and it imports no other
adapter library. ``Projector`` keeps a ``ProjectionStore`` current; ``rebuild`` makes one
from the start of the log; ``queries`` and ``replay`` answer the read API and the audit.

Names are imported on first use, so ``projections.story`` (pure) loads no DuckDB.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from projections.paths import default_db_path
    from projections.projector import Projector, RebuildResult, rebuild
    from projections.store import (
        ProjectionError,
        ProjectionStore,
        SchemaMismatch,
        StoreLocked,
        connect_reader,
    )

__all__ = [
    "ProjectionError",
    "ProjectionStore",
    "Projector",
    "RebuildResult",
    "SchemaMismatch",
    "StoreLocked",
    "connect_reader",
    "default_db_path",
    "rebuild",
]

_WHERE = {
    "Projector": "projections.projector",
    "RebuildResult": "projections.projector",
    "rebuild": "projections.projector",
    "ProjectionError": "projections.store",
    "ProjectionStore": "projections.store",
    "SchemaMismatch": "projections.store",
    "StoreLocked": "projections.store",
    "connect_reader": "projections.store",
    "default_db_path": "projections.paths",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'projections' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
