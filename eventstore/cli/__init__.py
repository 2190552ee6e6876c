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

Commands are loaded lazily (click's documented ``LazyGroup`` pattern): :data:`COMMANDS` names
the module that defines each command and its one-line help, so ``evstore --help`` lists them
all without importing any, and ``evstore append`` imports only the module defining ``append``.
The modules register their commands on :data:`cli` with the usual decorators.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from eventstore.errors import EvstoreError, database_failure


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


#: Every top-level command: name -> (the module defining it, its one-line help as its docstring's
#: first paragraph; None: a hidden command).  ``tests/test_cli_startup.py`` holds this table to the commands.
COMMANDS: dict[str, tuple[str, str | None]] = {
    "append": ("eventstore.cli.core", "Append one event to STREAM (or a JSONL --batch file)."),
    "checkpoint": ("eventstore.cli.proofs", "Sign the log's Merkle tree head as a C2SP checkpoint (a signed note), "
                                            "record it in the store and write it to --out; with --witness, add the "
                                            "witnesses' cosignatures (a refusal is an error)."),
    "db": ("eventstore.cli.core", "Schema migrations (Alembic)."),
    "init": ("eventstore.cli.core", "Create the store (or bring it to the latest schema)."),
    "keygen": ("eventstore.cli.core", "Create an Ed25519 key pair and its signed-note verifier keys (PREFIX.key, "
                                      ".pub, .vkey, .witness.vkey)."),
    "prove": ("eventstore.cli.proofs", "Print an RFC 9162 proof as JSON: an event's inclusion in a checkpoint "
                                       "(STREAM --version V --checkpoint FILE), or --consistency OLD NEW; `evstore "
                                       "verify-proof` checks it offline."),
    "seal": ("eventstore.cli.core", None),
    "verify-proof": ("eventstore.cli.proofs", "Check an inclusion or consistency proof file with nothing but the file and "
                                              "the log's key (no store, no network); exit 1 saying what does not "
                                              "hold."),
    "tokens": ("eventstore.cli.team", "Named tokens of `evstore serve`: who may read, append or administer (stored "
                                      "as hashes)."),
    "witness": ("eventstore.cli.proofs", "Run a C2SP tlog-witness that cosigns checkpoints of the logs it trusts."),
    "verify": ("eventstore.cli.core", "Recompute every hash chain (or STREAM's), the Merkle tree and the replay "
                                      "cache; exit 1 naming what fails."),
    "erase": ("eventstore.cli.retention", "Erase payloads on request (a leaked secret, a person's data): headers, "
                                          "digests and chain hashes stay, so verify, checkpoints and proofs stay "
                                          "valid."),
    "hold": ("eventstore.cli.retention", "Legal holds: nothing under a hold is purged or erased."),
    "retention": ("eventstore.cli.retention", "Retention policies: how long payloads are kept (headers, digests and "
                                              "hashes are kept for good)."),
    "ingest": ("eventstore.cli.documents", "Ingest state-file snapshots with DIALECT (a directory: its files in "
                                           "name order)."),
    "log": ("eventstore.cli.documents", "Show TASK's events as a timeline (version, time, type, summary)."),
    "push": ("eventstore.cli.team", "Send the local events not sent yet to the team server now (in order; exit 1 "
                                    "if a batch is refused)."),
    "remote": ("eventstore.cli.team", "The team server this machine sends its records to (`evstore push`)."),
    "replay": ("eventstore.cli.documents", "Rebuild TASK's state document (a stream id or a task id)."),
    "watch": ("eventstore.cli.documents", "Follow a state file (or folder) and ingest each new write; Ctrl-C "
                                          "stops."),
    "coverage": ("projections.cli.runs", "What the store has seen of each source, and which have gone."),
    "demo": ("projections.cli.runs", "Create the store if needed and fill it with a realistic simulated portfolio."),
    "projections": ("projections.cli.runs", "Projection status, rebuilds and the async runner."),
    "runs": ("projections.cli.runs", "List runs (one per stream), newest activity first."),
    "search": ("projections.cli.runs", "Full-text search over event payloads, transcripts, hook calls and state "
                                       "documents, newest first."),
    "export": ("projections.cli.analytics", "Export the events and the analytics tables for other tools."),
    "metrics": ("projections.cli.analytics", "Cross-run metrics (reviewer acceptance, review deltas, gates, "
                                             "breaker trips, phases, ...), or with TASK the same for one run (its "
                                             "timeline, iterations and deltas)."),
    "query": ("projections.cli.analytics", "Run DuckDB SQL over the analytics views (runs, phases, "
                                           "review_findings, review_deltas, gates, ...)."),
    "usage": ("projections.cli.analytics", "Tokens and cost of the agent sessions in the store, by session, task, "
                                           "model, subagent, day, project or writer (token and machine that sent "
                                           "them to a team server)."),
    "serve": ("projections.cli.serve", "Serve runs, states, diffs, metrics and integrity in a browser, and a JSON "
                                       "API (writes need a token)."),
}


class EvstoreGroup(click.Group):
    """Loads each built-in command's module on first use (:data:`COMMANDS`), adds the commands
    dialects register (:data:`COMMANDS_GROUP`), each imported when first asked for, and translates
    library errors into ``Error: ...`` + exit 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands) | set(_plugin_commands()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in COMMANDS:
                importlib.import_module(COMMANDS[cmd_name][0])  # its decorators register it on cli
            else:
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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, with the help of a command not imported yet taken from :data:`COMMANDS`."""
        entries: list[tuple[str, click.Command | None]] = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is None and name not in COMMANDS:  # a dialect's command: --help loads it
                cmd = self.get_command(ctx, name)
            if (cmd.hidden if cmd is not None else COMMANDS[name][1] is None):
                continue
            entries.append((name, cmd))
        if not entries:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in entries)
        rows = []
        for name, cmd in entries:
            if cmd is None:  # click's own shortening, on the help the table holds
                cmd = click.Command(name, help=COMMANDS[name][1])
            rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvstoreError as exc:
            if ctx.obj and ctx.obj.get("traceback"):
                raise
            from eventstore.display import printable

            click.echo(f"Error: {printable(str(exc), multiline=True)}", err=True)
            ctx.exit(1)
        except (BrokenPipeError, KeyboardInterrupt):  # before Exception: a closed pipe is an OSError
            ctx.exit(130 if sys.exc_info()[0] is KeyboardInterrupt else 1)
        except Exception as exc:
            if ctx.obj and ctx.obj.get("traceback"):
                raise
            known = database_failure(exc, store_file(ctx))  # the URL is right: the disk is full, the file damaged
            if known is not None:
                click.echo(f"Error: {known}", err=True)
                ctx.exit(1)
            if not _database_error(exc):
                raise
            reason = (str(getattr(exc, "orig", exc)).strip() or type(exc).__name__).splitlines()[0]
            click.echo(f"Error: cannot use the database ({reason}); check --url / EVSTORE_URL.", err=True)
            ctx.exit(1)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the package's version, and which hashing keeps the Merkle tree (C when the
    extension was built at install, else Python: eventstore/tree.py)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    from eventstore import tree

    try:
        number = version("evstore")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        number = "unknown (not installed)"
    click.echo(f"evstore, version {number}\nMerkle tree hashing: {tree.HASHING}")
    ctx.exit()


@click.group(cls=EvstoreGroup)
@click.option("--url", envvar="EVSTORE_URL", default=None, metavar="URL",
              help="Database URL (default: $EVSTORE_URL or sqlite:///./.evstore/events.db).")
@click.option("--url-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Read the database URL from FILE (no password on the command line).")
@click.option("--synchronous", type=click.Choice(["NORMAL", "FULL"], case_sensitive=False), default=None,
              help="SQLite durability (default NORMAL; FULL syncs every commit).")
@click.option("--traceback", is_flag=True, help="Show Python tracebacks for errors.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (and the Merkle tree's hashing: C or Python) and exit.")
@click.pass_context
def cli(ctx: click.Context, url: str | None, url_file: str | None, synchronous: str | None, traceback: bool) -> None:
    """evstore: the append-only, hash-chained audit store for AI coding-agent runs."""
    ctx.ensure_object(dict)
    if url_file is not None:
        if url is not None and ctx.get_parameter_source("url") is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("give --url or --url-file, not both")
        url = read_url_file(url_file)
    ctx.obj.update(url=url, url_file=url_file, synchronous=synchronous, traceback=traceback)


def read_url_file(path: str) -> str:
    """The database URL a ``--url-file`` holds (its first non-empty line)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh.read().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise EvstoreError(f"--url-file {path}: cannot read it ({exc}); name a file holding the database URL.") from exc
    if not lines:
        raise EvstoreError(f"--url-file {path}: the file is empty; write the database URL into it.")
    return lines[0]


def store_file(ctx: click.Context) -> Any:
    """The SQLite file of this invocation's store (None: not SQLite, or no URL parsed yet)."""
    from eventstore import config

    obj = ctx.find_root().obj
    return config.sqlite_file(config.database_url(obj.get("url"))) if isinstance(obj, dict) else None


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


def open_store(ctx: click.Context, *, check_schema: bool = True, create: bool = False, indexed: bool = True) -> Any:
    """The store for this invocation; at the schema head it keeps the runs index inline (unless not
    ``indexed``: a command that never appends, such as ``metrics``, need not import the index's code).

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
    if check_schema and indexed:
        from projections.runs import IndexedEventStore  # the CLI is the top layer

        store: EventStore = IndexedEventStore(url, synchronous=obj.get("synchronous"))
    else:
        store = EventStore(url, synchronous=obj.get("synchronous"), check_schema=check_schema)
    root.call_on_close(store.close)
    return store


@contextlib.contextmanager
def interruptible(store: Any, said: Callable[[int, int], str]) -> Iterator[None]:
    """Ctrl-C inside: exit 130 with one line on stderr, ``interrupted: said(events, streams)``: the
    events the store holds now that it did not before, and the streams they are in (counted afresh,
    on a connection of its own: the interrupted one may be mid-transaction).  Everything else passes
    through."""
    before = store.max_position()
    try:
        yield
    except KeyboardInterrupt:
        from eventstore.store import EventStore

        with EventStore(store.url, check_schema=False) as fresh:
            streams: set[str] = set()
            written = 0
            for e in fresh.iter_all(after_position=before):
                written += 1
                streams.add(e.stream_id)
        click.echo(f"interrupted: {said(written, len(streams))}", err=True)
        raise click.exceptions.Exit(130) from None


def main() -> None:
    cli(prog_name="evstore")  # a command's module is imported when it is invoked


def register() -> click.Group:
    """The fully populated group: every built-in command's module imported and the dialects'
    commands loaded (tests: ``CliRunner().invoke(register(), [...])``)."""
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        importlib.import_module(module)
    for name in _plugin_commands():  # the dialects' commands (entry points)
        cli.load_plugin(name)
    return cli
