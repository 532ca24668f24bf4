"""Where the projections live by default."""

from pathlib import Path

__all__ = ["default_db_path"]


def default_db_path(home: Path) -> Path:
    """The DuckDB file of ``fgpu up``'s projector: beside its state file (``up.json``)."""
    return home / "projections.duckdb"
