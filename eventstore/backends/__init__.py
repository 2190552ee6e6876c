"""Database quirks, one small module per backend (SQLite pragmas, PostgreSQL locks)."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from eventstore.backends.base import Backend


def backend_for(engine: Engine) -> Backend:
    name = engine.dialect.name
    if name == "sqlite":
        from eventstore.backends.sqlite import SQLiteBackend

        return SQLiteBackend(engine)
    if name == "postgresql":
        from eventstore.backends.postgres import PostgresBackend

        return PostgresBackend(engine)
    from eventstore.errors import EvstoreError

    raise EvstoreError(f'Database "{name}" is not supported; use sqlite:/// or postgresql+psycopg://.')


__all__ = ["Backend", "backend_for"]
