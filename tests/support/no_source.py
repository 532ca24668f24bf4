"""A read source that is never read: the read API built over it to look at its routes
(``create_app(NoSource())``), not to answer them."""

import duckdb

from services.domain.tenancy.model import Tenancy

__all__ = ["NoSource"]


class NoSource:
    last_seq = 0

    def cursor(self) -> duckdb.DuckDBPyConnection:
        raise AssertionError("not read")

    async def wait_beyond(self, seq: int) -> int:
        raise AssertionError("not read")

    def tenancy(self) -> Tenancy:
        return Tenancy()
