"""The ``evstore`` command line: a thin click layer over the library.

Data goes to stdout (``--json`` / NDJSON for machines, tables for people); progress, warnings
and errors go to stderr.  Expected failures print ``Error: ...`` and exit 1 (no traceback
unless ``--traceback``); usage errors exit 2.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from eventstore.errors import EvstoreError, is_disk_full


def _database_error(exc: BaseException) -> bool:
    """A driver error SQLAlchemy raised, or an operational one the driver raised on the store's
    own connection (checked without importing SQLAlchemy or the drivers: ``--help`` and commands
    that never open a store should not pay their import)."""
    kinds = [getattr(sys.modules.get(name), attr, None) for name, attr in (
        ("sqlalchemy.exc", "OperationalError"), ("sqlalchemy.exc", "InterfaceError"),
        ("sqlite3", "OperationalError"), ("psycopg", "OperationalError"))]
    return isinstance(exc, tuple(k for k in kinds if isinstance(k, type)))


class EvstoreGroup(click.Group):
    """Translates library errors into ``Error: ...`` + exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvstoreError as exc:
            if ctx.obj and ctx.obj.get("traceback"):
                raise
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)
        except (BrokenPipeError, KeyboardInterrupt):  # before Exception: a closed pipe is an OSError
            ctx.exit(130 if sys.exc_info()[0] is KeyboardInterrupt else 1)
        except Exception as exc:
            full = is_disk_full(exc)
            if not (full or _database_error(exc)) or (ctx.obj and ctx.obj.get("traceback")):
                raise
            reason = (str(getattr(exc, "orig", exc)).strip() or type(exc).__name__).splitlines()[0]
            if full:  # the URL is right: the disk under it is full
                click.echo(f"Error: no space left ({reason}); free space and retry.", err=True)
            else:
                click.echo(f"Error: cannot use the database ({reason}); check --url / EVSTORE_URL.", err=True)
            ctx.exit(1)


@click.group(cls=EvstoreGroup)
@click.option("--url", envvar="EVSTORE_URL", default=None, metavar="URL",
              help="Database URL (default: $EVSTORE_URL or sqlite:///./.evstore/events.db).")
@click.option("--synchronous", type=click.Choice(["NORMAL", "FULL"], case_sensitive=False), default=None,
              help="SQLite durability (default NORMAL; FULL syncs every commit).")
@click.option("--traceback", is_flag=True, help="Show Python tracebacks for errors.")
@click.version_option(package_name="evstore")
@click.pass_context
def cli(ctx: click.Context, url: str | None, synchronous: str | None, traceback: bool) -> None:
    """evstore: the append-only, hash-chained audit store for AI coding-agent runs."""
    ctx.ensure_object(dict)
    ctx.obj.update(url=url, synchronous=synchronous, traceback=traceback)


def store_url(ctx: click.Context, *, create: bool = False) -> str:
    """This invocation's database URL; unless ``create``, a SQLite file that does not exist is an
    error (read commands must not make a store, see :func:`open_store`)."""
    from eventstore import config

    url = config.database_url(ctx.find_root().obj.get("url"))
    path = config.sqlite_file(url)
    if not create and path is not None and not path.exists():
        raise EvstoreError(f"No store at {path}: create one with `evstore init` (or `evstore demo`), "
                           "or point --url / EVSTORE_URL at an existing store.")
    return url


def open_store(ctx: click.Context, *, check_schema: bool = True, create: bool = False) -> Any:
    """The store for this invocation; at the schema head it keeps the runs index inline.

    Only commands that write (``create=True``: init, demo, append, ingest, watch) may create a
    store: a SQLite file that does not exist yet gets the latest schema.  A read command on a
    missing file fails before anything is made, so a mistyped ``--url`` never leaves directories
    and an empty database behind.  (A PostgreSQL database without the schema is refused by the
    schema check, which says to run ``evstore init``.)
    """
    from eventstore import config
    from eventstore.store import EventStore

    root = ctx.find_root()
    obj = root.obj
    url = store_url(ctx, create=create)
    path = config.sqlite_file(url)
    if path is not None and not path.exists():
        if check_schema:
            from eventstore import migrate

            with EventStore(url, synchronous=obj.get("synchronous"), check_schema=False) as fresh:
                migrate.upgrade(fresh.engine)
    if check_schema:
        from projections.runs import IndexedEventStore  # the CLI is the top layer

        store: EventStore = IndexedEventStore(url, synchronous=obj.get("synchronous"))
    else:
        store = EventStore(url, synchronous=obj.get("synchronous"), check_schema=False)
    root.call_on_close(store.close)
    return store


def main() -> None:
    register()(prog_name="evstore")


def register() -> click.Group:
    """The fully populated group (tests: ``CliRunner().invoke(register(), [...])``)."""
    from eventstore.cli import claude, core, documents  # noqa: F401

    try:  # commands that live in the projections layer (the CLI is the top layer)
        import projections.cli  # noqa: F401
    except ImportError as exc:  # pragma: no cover
        if "projections.cli" not in str(exc):
            raise
    return cli
