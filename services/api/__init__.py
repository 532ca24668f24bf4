"""The read API (FastAPI) and the audit console: an entry point over the projections.

Read only; it lives in the projector's process (``serve_read_api``), since only one
process may write the DuckDB file and readers use cursors of the same database.
"""

from services.api.app import create_app
from services.api.serve import ReadApi, open_store, serve_read_api

__all__ = ["ReadApi", "create_app", "open_store", "serve_read_api"]
