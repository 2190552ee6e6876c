"""Alembic environment: evstore passes the connection (or URL) in ``config.attributes``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from eventstore.schema import OWNED_TABLES, metadata

config = context.config


def include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # Projection tables (proj_*) are rebuildable data owned by the projections, not Alembic.
    if type_ == "table":
        return name in OWNED_TABLES
    table = getattr(obj, "table", None)
    if table is not None and getattr(table, "name", None) not in OWNED_TABLES:
        return False
    return True


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as conn:
            _run(conn)
        engine.dispose()
    else:
        _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
