"""Secrets: ``/v1/secrets`` (the viewer's own: names, versions, when set; never a value,
sealed or not) and ``/v1/secrets/key`` (the public key values are sealed to).

Who may read: each person its own secrets alone, by the keypair it reads with (nobody,
an administrator included, lists another's: a name can say too much). The key: anyone
signed in, as ``fgpu secret set`` needs it. Both are folds of the projection's audit table
(``services.domain.secrets``); a request standing on another key's subject counts for
nothing, as in every fold.
"""

import base64
from datetime import datetime
from typing import Any

import duckdb
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from events import SecretRemoved, SecretSet, SecretsKeySet, decode
from events import subjects as subj
from services.api.guard import Who
from services.api.params import NOT_FOUND, Ask
from services.domain.secrets import SecretBook
from services.domain.subject_rules import SUBJECT_OF

__all__ = ["SecretList", "SecretShown", "SecretsKey", "mount"]

_MINE = (
    "SELECT subject, payload FROM events WHERE type IN ('secret.set.v1', 'secret.removed.v1')"
    " AND starts_with(subject, ?) ORDER BY seq"
)
_KEY = (
    "SELECT payload FROM events WHERE type = 'secret.key-set.v1' AND subject = ?"
    " ORDER BY seq DESC LIMIT 1"
)


class SecretShown(BaseModel):
    name: str
    version: int
    set_at: datetime


class SecretList(BaseModel):
    secrets: list[SecretShown]


class SecretsKey(BaseModel):
    public_key: str  # base64 of the 32 bytes


def mount(app: FastAPI, query: Ask[Any]) -> None:
    @app.get("/v1/secrets", tags=["secrets"])
    async def own_secrets(viewer: Who) -> SecretList:
        """The viewer's own secrets (of the keypair it reads with), by name."""
        key = viewer.access_key
        book = await query(lambda con: _book_of(con, key))
        mine = sorted(book.of(key).items())
        shown = [SecretShown(name=n, version=h.version, set_at=h.set_at) for n, h in mine]
        return SecretList(secrets=shown)

    @app.get("/v1/secrets/key", tags=["secrets"], responses=NOT_FOUND)
    async def secrets_key(viewer: Who) -> SecretsKey:
        """The cluster's secrets key (public): what ``fgpu secret set`` seals to.
        404: the log holds none (a cluster not started by ``fgpu up``)."""
        found = await query(_latest_key)
        if found is None:
            raise HTTPException(404, "this cluster has no secrets key")
        return SecretsKey(public_key=base64.b64encode(found).decode())


def _book_of(con: duckdb.DuckDBPyConnection, owner: str) -> SecretBook:
    book = SecretBook()
    for subject, payload in con.execute(_MINE, [subj.request(owner, "")]).fetchall():
        e = decode(bytes(payload))
        if isinstance(e, SecretSet | SecretRemoved) and SUBJECT_OF[type(e)](e) == subject:
            book.evolve(e)
    return book


def _latest_key(con: duckdb.DuckDBPyConnection) -> bytes | None:
    row = con.execute(_KEY, [subj.TENANCY]).fetchone()
    if row is None:
        return None
    e = decode(bytes(row[0]))
    return e.public_key if isinstance(e, SecretsKeySet) else None
