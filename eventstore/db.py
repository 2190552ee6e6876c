"""SQLAlchemy engines for a database URL (the backend modules hold the per-database settings).

Only what needs SQLAlchemy calls this (Alembic, Core queries, PostgreSQL's pool): a store makes
its engine on first use (:attr:`eventstore.backends.base.Backend.engine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.backends import backend_for

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def make_engine(url: str, *, synchronous: str | None = None) -> Engine:
    """A new engine for ``url`` (EvstoreError for a database evstore does not support)."""
    return backend_for(url, synchronous=synchronous).make_engine()
