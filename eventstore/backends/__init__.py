"""Database quirks, one small module per backend (SQLite pragmas, PostgreSQL locks)."""

from __future__ import annotations

from eventstore.backends.base import Backend
from eventstore.errors import EvstoreError


def backend_for(url: str, *, synchronous: str | None = None) -> Backend:
    """The backend for a database URL (nothing is connected yet; no SQLAlchemy imported)."""
    if url.startswith("sqlite"):
        from eventstore.backends.sqlite import SQLiteBackend

        return SQLiteBackend(url, synchronous=synchronous)
    if url.startswith(("postgresql", "postgres")):
        from eventstore.backends.postgres import PostgresBackend

        return PostgresBackend(url)
    raise EvstoreError(f'Unsupported database URL "{url}"; use sqlite:///PATH or postgresql+psycopg://...')


__all__ = ["Backend", "backend_for"]
