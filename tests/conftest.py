"""Shared fixtures: every contract test runs unchanged on SQLite and on PostgreSQL.

PostgreSQL tests use the server named by ``EVSTORE_TEST_POSTGRES_URL`` (``.ci/run`` always sets it).
When it is unset, the session starts a throwaway server from the PostgreSQL binaries on the machine
(``tests/pg_server.py``) and sets the variable for the tests and their child processes; without
binaries the PostgreSQL tests skip, each saying why, and the summary says once how to enable them.
The server starts in ``pytest_configure``, before any test module is imported, so ``PG_URL`` and the
variable are final by then.  Each test gets a private schema, so tests never see each other's rows.

The suite runs on three pytest-xdist workers (``addopts`` in pyproject.toml; ``-n 0`` runs it in one
process).  That is safe because nothing a test writes is shared: SQLite stores and analytics folders
are under each test's ``tmp_path``, PostgreSQL tests each get their own schema (and roles with random
names), and the analytics cache of schema-less stores is one folder per store id.  The server (or the
reason there is none) is settled once, in the controlling process, before the workers start: they
inherit the variable, or the reason to skip.
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pg_server
import pytest
import sqlalchemy
from click.testing import CliRunner, Result
from hypothesis import settings
from sqlalchemy.engine import Engine

from eventstore import migrate
from eventstore.cli import register
from eventstore.db import make_engine
from eventstore.store import EventStore

# A failing property prints the blob that reproduces it (@reproduce_failure) as well as the example.
settings.register_profile("evstore", print_blob=True)
settings.load_profile("evstore")

# Analytics of stores without a file (PostgreSQL) default to the user's cache directory, one folder
# per store id: keep the suite's (a new store per test) out of the real one.
os.environ.setdefault("XDG_CACHE_HOME", os.path.join(tempfile.gettempdir(), f"evstore-tests-cache-{os.getuid()}"))

PG_URL = os.environ.get("EVSTORE_TEST_POSTGRES_URL")
ENABLE_PG = ("To run them, set EVSTORE_TEST_POSTGRES_URL=postgresql+psycopg://USER@HOST:PORT/DB (a database the "
             "tests may create schemas and roles in), or install PostgreSQL's server binaries (Debian: apt-get install "
             "postgresql; elsewhere name their folder in EVSTORE_TEST_POSTGRES_BINDIR) and the suite starts a throwaway "
             "server of its own.")
#: Why the PostgreSQL tests skip, and the fix (set by pytest_configure when no server could be had).
#: The controlling process hands it to its xdist workers in this variable, so they do not try again.
NO_PG_VARIABLE = "EVSTORE_TEST_NO_POSTGRES"
NO_PG = os.environ.get(NO_PG_VARIABLE, "") if "PYTEST_XDIST_WORKER" in os.environ else ""
_pg_started = ""  # what the summary says about a throwaway server


def pytest_configure(config: pytest.Config) -> None:
    global PG_URL, NO_PG, _pg_started
    if PG_URL or NO_PG:
        return
    started = time.monotonic()
    try:
        server = pg_server.start()
    except pg_server.Unavailable as exc:
        NO_PG = (f"no PostgreSQL to test against: EVSTORE_TEST_POSTGRES_URL is not set and {exc}; set it, or "
                 "install PostgreSQL's server binaries (how: the PostgreSQL section above)")
        os.environ[NO_PG_VARIABLE] = NO_PG  # for the xdist workers, started after this
        return
    config.add_cleanup(server.stop)
    PG_URL = os.environ["EVSTORE_TEST_POSTGRES_URL"] = server.url
    _pg_started = (f"PostgreSQL: EVSTORE_TEST_POSTGRES_URL was not set; the tests ran on a throwaway server "
                   f"from {server.bindir} in {server.root} (started in {time.monotonic() - started:.1f} s, removed at the end)")


def _needs_pg(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return "pg_url" in getattr(item, "fixturenames", ()) or (
        callspec is not None and callspec.params.get("store_url") == "postgresql")


#: The test files that take longest, longest first (CPU seconds on the 2-core reference machine, whole
#: suite, a probe around each test: 25, 15, 9 (mypy without its cache), 9, 7, 6, 6, 5, 5, 4, 4), then
#: the two that start Chromium (2-3 s each, mostly waiting on the browser).
#: pytest-xdist hands out a file at a time in the order collected (``--no-loadscope-reorder`` in
#: addopts: its own order, most tests first, put these last), so each worker starts with a long file
#: and the short ones fill the end, instead of one worker running a long file alone at the end.
LONG_FIRST = ("test_analytics_concurrency.py", "test_serve_drain.py", "test_typing.py", "test_analytics.py",
              "test_analytics_binding.py", "test_notebooks.py", "test_pg_throwaway.py", "test_claude_capture.py",
              "test_serve.py", "test_claude_link.py", "test_wheel.py", "test_report_html.py", "test_serve_browser.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    per_file = Counter(item.path.name for item in items)
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    # the rest as xdist would order them (most tests first): a stable sort keeps each file's tests in order
    items.sort(key=lambda item: (rank.get(item.path.name, len(LONG_FIRST)), -per_file[item.path.name], str(item.path)))
    # A skip mark (rather than the pg_url fixture's skip) lets the short summary fold them to a line per file.
    if NO_PG:
        for item in items:
            if _needs_pg(item):
                item.add_marker(pytest.mark.skip(reason=NO_PG))


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection made (the modules, their imports, the test items) lives until the session ends:
    # frozen, the cyclic collector stops walking it again in every full collection (Python's own advice
    # for long-lived heaps; the workers' full collections took 5.5 s of CPU in all without it).
    gc.freeze()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if NO_PG:
        skipped = sum(1 for r in terminalreporter.stats.get("skipped", [])
                      if isinstance(r.longrepr, tuple) and NO_PG in str(r.longrepr[2]))
        terminalreporter.write_sep("=", "PostgreSQL", yellow=True)
        terminalreporter.write_line(f"{skipped} PostgreSQL tests skipped: {NO_PG.split(': ', 1)[1].split('; ')[0]}.")
        terminalreporter.write_line(ENABLE_PG)
    elif _pg_started:
        terminalreporter.write_line(_pg_started)


#: Test sessions commit without waiting for the WAL to reach the disk (the throwaway server runs so for
#: every session): a commit is visible to every other session at once all the same, so no test can tell,
#: but a server with fsync on (CI's) otherwise spends 3-6 ms of wall time on each of the suite's commits.
#: Only a crash of the server itself could lose them, and no test crashes the server.
PG_SESSION = "-csynchronous_commit=off"


def _pg_url_with_schema(schema: str) -> str:
    assert PG_URL
    url = PG_URL
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}%20{PG_SESSION.replace('=', '%3D')}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, private schema."""
    if not PG_URL:
        pytest.skip(NO_PG)
    with pg_schema() as url:
        yield url


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A new, private schema on the test server (dropped on exit); the URL whose search_path it is."""
    schema = "t_" + uuid.uuid4().hex[:16]
    _pg_admin(f"CREATE SCHEMA {schema}")
    url = _pg_url_with_schema(schema)
    _SCHEMAS[url] = schema
    try:
        yield url
    finally:
        del _SCHEMAS[url]
        _pg_admin(f"DROP SCHEMA {schema} CASCADE")


#: The schema of each URL pg_schema() has made and not yet dropped (migrated() fills them over _admin).
_SCHEMAS: dict[str, str] = {}


_admin: list[Any] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    for conn in _admin:  # closed before the session ends: an unclosed one warns, and warnings are errors
        conn.close()
    _admin.clear()


def _pg_admin(sql: str) -> None:
    """Run ``sql`` on the process's one connection for making, filling and dropping the tests' schemas (a
    new session for each would cost the server a backend process three times a test)."""
    _pg_admin_do(lambda conn: conn.execute(sql))


def _pg_admin_do(work: Callable[[Any], Any]) -> Any:
    """``work(connection)`` on the process's admin connection (autocommit); a new one if it was lost."""
    import psycopg

    for attempt in (1, 2):
        if not _admin or _admin[0].closed:
            assert PG_URL
            _admin[:] = [psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True,
                                         options=PG_SESSION)]
        try:
            return work(_admin[0])
        except psycopg.OperationalError:
            _admin[0].close()
            if attempt == 2:
                raise


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/store/events.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database at the migration head, on each backend in turn."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/store/events.db"
    else:
        url = request.getfixturevalue("pg_url")
    return migrated(url)


def migrated(url: str) -> str:
    """``url`` with the evstore schema at the migration head (tests that need a fresh database).

    The first empty database of each backend in a process is migrated by Alembic, and the statements it
    sends are kept; every later one gets those statements again, in one transaction, with a new store
    identity (the one value a migration makes up).  That skips Alembic's own work per test (loading the
    revisions, reflecting, a round trip per operation): a PostgreSQL test's fresh database took 108 ms
    of CPU, client and server, through Alembic, 70 ms replayed a statement at a time, and takes 16-19 ms
    (schema made, filled and dropped) as one script without what the migrations make and later drop
    (:func:`_without_undone`, :func:`_one_script`).  The schema is the same, which
    ``test_a_replayed_schema_is_the_one_alembic_builds`` checks on both backends, and the migrations
    themselves are tested through ``evstore db`` (tests/test_schema_revision.py, tests/test_wheel.py).
    A schema of pg_schema()'s is filled over the admin connection it was made on (no session of its own)."""
    schema = _SCHEMAS.get(url)
    if schema is not None and "postgresql" in _MIGRATION:
        if _pg_admin_do(lambda conn: _pg_replay(conn, schema, _MIGRATION["postgresql"])):
            return url
    engine = make_engine(url)
    try:
        statements = _MIGRATION.get(engine.dialect.name)
        if sqlalchemy.inspect(engine).has_table("alembic_version"):
            migrate.upgrade(engine)  # not a fresh database: Alembic takes it from its revision
        elif statements is None:
            _MIGRATION[engine.dialect.name] = _alembic_statements(engine)
        else:
            _replay(engine, statements)
    finally:
        engine.dispose()
    return url


#: Per backend: what Alembic's upgrade to head sent to an empty database (statement, parameters).
_MIGRATION: dict[str, list[tuple[str, Any]]] = {}


def _alembic_statements(engine: Engine) -> list[tuple[str, Any]]:
    """Upgrade ``engine``'s empty database with Alembic; the statements that changed it."""
    sent: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        assert not many, "a migration sent an executemany: replaying it is not implemented"
        if not statement.lstrip().upper().startswith(("SELECT", "PRAGMA", "BEGIN")):  # reads, not changes
            sent.append((statement, parameters))

    sqlalchemy.event.listen(engine, "before_cursor_execute", keep)
    try:
        migrate.upgrade(engine)
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", keep)
    return _without_undone(sent)


_MADE = re.compile(r"\s*(CREATE|DROP)\s+(TABLE|INDEX)\s+(\w+)", re.IGNORECASE)


def _without_undone(statements: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``statements`` less each table or index that a later one drops, when nothing between the two
    names it: they leave the same database behind (``test_a_replayed_schema_is_the_one_alembic_builds``
    compares it with Alembic's own on both backends).  The migrations' history (an index made in 0001 and
    dropped in 0002, a table made in 0001 and dropped in 0003) was a third of a PostgreSQL schema's cost."""
    kept: list[tuple[str, Any]] = []
    for statement, parameters in statements:
        made = _MADE.match(statement)
        if made and made[1].upper() == "DROP":
            kind, name = made[2].upper(), made[3]
            word = re.compile(rf"\b{re.escape(name)}\b")
            creates = [i for i, (s, _) in enumerate(kept) if (m := _MADE.match(s)) and m[1].upper() == "CREATE"
                       and m[2].upper() == kind and m[3] == name]
            if creates and not any(word.search(s) for s, _ in kept[creates[-1] + 1:]):
                del kept[creates[-1]]
                continue
        kept.append((statement, parameters))
    return kept


def _replay(engine: Engine, statements: list[tuple[str, Any]]) -> None:
    with engine.begin() as conn:
        for statement, parameters in _fresh_identity(statements):
            conn.exec_driver_sql(statement, parameters)


def _pg_replay(conn: Any, schema: str, statements: list[tuple[str, Any]]) -> bool:
    """:func:`_replay` over a psycopg connection, in ``schema`` (False, and nothing done, if it is not empty)."""
    import psycopg

    with conn.transaction():
        if conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = %s", (schema,)).fetchone()[0]:
            return False  # not a fresh schema: Alembic takes it from its revision
        script, parameters = _one_script(_fresh_identity(statements))
        psycopg.ClientCursor(conn).execute(f"SET LOCAL search_path TO {schema};\n{script}", parameters)
    return True


def _one_script(statements: Iterable[tuple[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``statements`` as one script and its parameters, for a client-side binding cursor: the server
    gets one message instead of one a statement (a round trip and a parse each: 31 -> 22 ms of server
    CPU a schema)."""
    script, merged = [], {}
    for statement, parameters in statements:
        assert isinstance(parameters, dict), f"positional parameters in a migration: {statement}"
        assert all(merged.get(k, v) == v for k, v in parameters.items()), f"a parameter name clashes: {statement}"
        merged.update(parameters)
        script.append(statement)  # "%%" in each, as SQLAlchemy escaped it for a bound execution
    return ";\n".join(script), merged


def _fresh_identity(statements: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """``statements`` with a new store identity and creation time in place of the recorded ones."""
    [(identity, created)] = [_identity(p) for s, p in statements if "INSERT INTO store_identity" in s]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # as migrations/versions/0003 writes it
    fresh = {identity: str(uuid.uuid4()), created: now}
    for statement, parameters in statements:
        if isinstance(parameters, dict):
            yield statement, {k: fresh.get(v, v) for k, v in parameters.items()}
        else:
            yield statement, tuple(fresh.get(v, v) for v in parameters)


def _identity(parameters: Any) -> tuple[str, str]:
    values = list(parameters.values()) if isinstance(parameters, dict) else list(parameters)
    [store_id] = [v for v in values if isinstance(v, str) and len(v) == 36 and v.count("-") == 4]
    [created] = [v for v in values if v != store_id]
    return store_id, created


@pytest.fixture
def run(store_url: str) -> Callable[..., Result]:
    """``evstore --url <store> ARGS...`` through click's CliRunner (exceptions propagate)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        return runner.invoke(register(), ["--url", store_url, *args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    s = EventStore(store_url)
    try:
        yield s
    finally:
        s.close()


#: Real files from public projects, kept in the repository (``tests/data/README.md`` names each origin),
#: in the layout of the workplace corpus they were copied from: ``real/``, ``friday/``, ``agentic-workflow/``.
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def corpus() -> Path:
    """``tests/data``: the real files tests read (in the repository, so they never skip)."""
    return DATA


EVSTORE = str(Path(sys.executable).parent / "evstore")


class Child:
    """An ``evstore`` child process for a test (see :func:`evstore_child`): its stdout lines come
    with a deadline, so a silent child fails the test instead of hanging it."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def readline(self, timeout: float = 20) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from {self.proc.args} within {timeout} s") from None
        if line is None:
            raise AssertionError(f"{self.proc.args} closed its output (exit {self.proc.poll()})")
        return line

    def interrupt(self, timeout: float = 20) -> tuple[list[str], str]:
        """Ctrl-C: SIGINT, wait for the exit; the stdout lines not read yet and all of stderr."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=timeout)
        out = []
        while (line := self._lines.get(timeout=timeout)) is not None:
            out.append(line)
        assert self.proc.stderr is not None
        return out, self.proc.stderr.read()


@contextlib.contextmanager
def evstore_child(*args: str, cwd: Path | None = None) -> Iterator[Child]:
    """Run ``evstore ARGS`` in its own process group and stop it whatever the test does.

    Ctrl-C reaches the child even when pytest itself runs as a background job (whose shell
    starts it with SIGINT ignored, a disposition children inherit).  On the way out the child,
    and anything it started, gets SIGTERM, then SIGKILL after 5 s: no test leaks a process.
    """
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:  # SIG_DFL across exec: the child's Python turns Ctrl-C into KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen([EVSTORE, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield Child(proc)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def exec_sql(store: EventStore, sql: str, **params: object) -> None:
    """Run one statement behind the store's back (tamper tests), in its own transaction."""
    from sqlalchemy import text

    with store.engine.begin() as conn:
        conn.execute(text(sql), params)


def drop_append_only_triggers(store: EventStore) -> None:
    """Disarm the triggers that keep ``events`` append-only, as someone with owner rights could."""
    if store.engine.dialect.name == "sqlite":
        exec_sql(store, "DROP TRIGGER events_no_update")
        exec_sql(store, "DROP TRIGGER events_no_delete")
    else:
        exec_sql(store, "DROP TRIGGER events_no_update_delete ON events")
        exec_sql(store, "DROP TRIGGER events_no_truncate ON events")


def run_in_terminal(*args: str, columns: int = 120, rows: int = 40, env: dict[str, str] | None = None,
                    timeout: float = 60) -> str:
    """``evstore ARGS`` with stdout (and stdin) on a pseudo-terminal of ``columns`` x ``rows``: what a
    person at a terminal sees (stderr apart).  The output with CR LF turned back into LF."""
    import fcntl
    import pty
    import struct
    import termios

    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {**os.environ, "COLUMNS": str(columns), "LINES": str(rows), "TERM": "xterm", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "eventstore", *args], stdin=child_fd, stdout=child_fd,
                            stderr=subprocess.PIPE, env=full_env, close_fds=True)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.stderr is not None
    with proc.stderr:
        proc.stderr.read()
    proc.wait(timeout=timeout)
    os.close(main_fd)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
