"""What the read API's routes share: how they read the projections, the bounds of their
query parameters, their 404 answer, and times made UTC."""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import duckdb
from fastapi import HTTPException, Query

from services.api import models
from services.domain.request_ids import new_request_id, request_id_problem

__all__ = ["MAX_SEQ", "NOT_FOUND", "Ask", "Limit", "form_request_id", "utc"]

T = TypeVar("T")
# A read: ``fn`` run on a connection of its own in a worker thread, in one snapshot.
Ask = Callable[[Callable[[duckdb.DuckDBPyConnection], T]], Awaitable[T]]
MAX_SEQ = (1 << 63) - 1  # the projections hold sequences as int64 (schema.py)
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": models.Problem}}


def utc(at: datetime | None, name: str) -> datetime | None:
    """``at`` in UTC (a time without offset is taken as UTC); 422 if it has none there."""
    if at is None:
        return None
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (OverflowError, ValueError) as e:
        raise HTTPException(422, f"{name}: {at.isoformat()} is out of range in UTC") from e


def form_request_id(given: str | None) -> str:
    """A UI form's request id (a retry of the form sends the same, and is one request),
    or a new one; 422 (HTTPException) for one that could never name a request."""
    rid = given or new_request_id()
    problem = request_id_problem(rid)
    if problem is not None:
        raise HTTPException(422, problem)
    return rid
