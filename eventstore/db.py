"""Engines for a database URL (the backend modules hold the per-database settings)."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from eventstore.errors import EvstoreError


def make_engine(url: str, *, synchronous: str | None = None) -> Engine:
    if url.startswith("sqlite"):
        from eventstore.backends.sqlite import make_engine as sqlite_engine

        return sqlite_engine(url, synchronous=synchronous)
    if url.startswith(("postgresql", "postgres")):
        from eventstore.backends.postgres import make_engine as pg_engine

        return pg_engine(url)
    raise EvstoreError(f'Unsupported database URL "{url}"; use sqlite:///PATH or postgresql+psycopg://...')
