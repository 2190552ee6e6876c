"""The ``evstore`` command line: a thin click layer over the library.

Data goes to stdout (``--json`` / NDJSON for machines, tables for people); progress, warnings
and errors go to stderr.  Expected failures print ``Error: ...`` and exit 1 (no traceback
unless ``--traceback``); usage errors exit 2.

A dialect contributes top-level commands through the entry-point group ``evstore.commands``
(``name = "module:click_command"``, the module in the dialect's folder, e.g.
``eventstore/dialects/<name>/commands.py``): :class:`EvstoreGroup` lists them and imports one
when it is invoked (or ``--help`` shows it).  The dependency runs one way: a command module
imports this package (:func:`open_store`), this package only reads entry points, so the CLI
names no dialect.
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


#: The entry-point group through which a dialect (any distribution) contributes top-level commands.
COMMANDS_GROUP = "evstore.commands"


_plugins: tuple[tuple[str, ...], dict[str, Any]] | None = None


def _plugin_commands() -> dict[str, Any]:
    """``evstore.commands`` entry points by name (a name two distributions register: the first on
    ``sys.path``), read once per ``sys.path``."""
    global _plugins
    key = tuple(sys.path)
    if _plugins is None or _plugins[0] != key:
        from eventstore.plugins import entry_points

        found: dict[str, Any] = {}
        for reg in entry_points(COMMANDS_GROUP):
            found.setdefault(reg.name, reg)
        _plugins = (key, found)
    return _plugins[1]


def _broken_command(name: str, why: str) -> click.Command:
    def fail() -> None:
        raise click.ClickException(why)

    return click.Command(name, callback=fail, help=f"(broken plugin) {why}", add_help_option=False,
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


class EvstoreGroup(click.Group):
    """Adds the commands dialects register (:data:`COMMANDS_GROUP`), each imported when first
    asked for, and translates library errors into ``Error: ...`` + exit 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_plugin_commands()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self.load_plugin(cmd_name)
        return super().get_command(ctx, cmd_name)

    def load_plugin(self, cmd_name: str) -> None:
        """Add the command an ``evstore.commands`` entry point names ``cmd_name`` (if one does and
        no command of that name is on the group yet)."""
        reg = _plugin_commands().get(cmd_name)
        if reg is None or cmd_name in self.commands:
            return
        try:
            command = reg.load()
            problem = "" if isinstance(command, click.Command) else "it names no click command"
        except Exception as exc:  # a broken plugin names itself and breaks no other command
            problem = f"{type(exc).__name__}: {exc}"
        if problem:  # listed by --help as broken; running it says why
            command = _broken_command(cmd_name, f"command {cmd_name!r} could not be loaded from its "
                                                f"{reg.where()}: {problem}")
        self.add_command(command, cmd_name)

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
    _built_in()
    cli(prog_name="evstore")  # a dialect's command loads when it is run or --help lists it


def _built_in() -> None:
    from eventstore.cli import core, documents  # noqa: F401

    try:  # commands that live in the projections layer (the CLI is the top layer)
        import projections.cli  # noqa: F401
    except ImportError as exc:  # pragma: no cover
        if "projections.cli" not in str(exc):
            raise


def register() -> click.Group:
    """The fully populated group, the dialects' commands loaded too (tests:
    ``CliRunner().invoke(register(), [...])``)."""
    _built_in()
    for name in _plugin_commands():  # the dialects' commands (entry points)
        cli.load_plugin(name)
    return cli
