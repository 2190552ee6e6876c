"""The CLI starts fast (issue 13 item 8): each command imports only what it needs.

Whole processes, as a user runs them: ``evstore --help`` imports no command module, and
``append``, ``log`` and ``replay`` on a SQLite store import neither SQLAlchemy nor Alembic (the
store opens its connection with the stdlib ``sqlite3`` module), nor DuckDB, Arrow, jsonschema,
the terminal libraries or a dialect's simulator.  On PostgreSQL, ``log``, ``replay`` and ``append``
import psycopg but not SQLAlchemy either (the backend connects with psycopg until something needs
the engine: SQLAlchemy's import and first connect doubled the CPU of a ``log``), nor
``importlib.metadata`` (which psycopg's version modules would import).  The timings themselves are ``benchmarks/bench_cli.py``'s, not a test's.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventstore.cli import COMMANDS, _plugin_commands, register
from eventstore.dialects.mapipe import MapipeDialect

#: Runs the console script's main() and writes the imported module names to the file in $MODULES_OUT.
PROBE = """
import os, sys
sys.argv = ["evstore", *sys.argv[1:]]
from eventstore.entry import main
try:
    main()
finally:
    with open(os.environ["MODULES_OUT"], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
"""

#: Top-level packages a command on the append/read path must not import.
HEAVY = ("sqlalchemy", "alembic", "duckdb", "pyarrow", "jsonschema", "fastjsonschema", "rich", "pygments")


def run(tmp_path: Path, url: str | None, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``evstore ARGS`` in a fresh interpreter; (the result, the modules it imported)."""
    out = tmp_path / "modules.txt"
    env = {**os.environ, "MODULES_OUT": str(out)}
    env.pop("EVSTORE_URL", None)
    if url is not None:
        env["EVSTORE_URL"] = url
    r = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=120)
    return r, set(out.read_text().split("\n"))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/store/events.db"
    runner = CliRunner()
    cli = register()
    for args in (["init"], ["append", "ONE", "demo.note", "--data", '{"n": 0}']):
        r = runner.invoke(cli, ["--url", url, *args])
        assert r.exit_code == 0, r.output
    versions = tmp_path / "versions"
    versions.mkdir()
    for i in range(5):
        (versions / f"{i:03d}.json").write_text(json.dumps({"task": "RUN-5", "step": i}) + "\n")
    r = runner.invoke(cli, ["--url", url, "ingest", "generic", "--stream", "RUN-5", str(versions)])
    assert r.exit_code == 0, r.output
    # A run of a dialect that validates with jsonschema and has a simulator: reading it needs neither.
    snaps = list(MapipeDialect().simulate(random.Random(3), run_id="MAP-1", start=datetime(2026, 1, 5)))[:4]
    mapipe = tmp_path / "mapipe"
    mapipe.mkdir()
    for i, snap in enumerate(snaps):
        (mapipe / f"{i:03d}-agent-state.json").write_text(json.dumps(snap.doc, indent=2) + "\n")
    r = runner.invoke(cli, ["--url", url, "ingest", "mapipe", str(mapipe)])
    assert r.exit_code == 0, r.output
    return url


@pytest.mark.parametrize("args, printed", [
    (["append", "ONE", "demo.note", "--data", '{"n": 1}', "--json"], '"version": 2'),
    (["replay", "RUN-5", "--json"], '{"task": "RUN-5", "step": 4}'),
    (["replay", "RUN-5", "--upto", "2"], '"step": 1'),
    (["log", "RUN-5"], "    5  "),
    (["replay", "MAP-1", "--json"], '"taskId": "MAP-1"'),
    (["log", "MAP-1"], "    4  "),
    (["runs", "--limit", "5"], "MAP-1"),
    (["runs", "--json", "--dialect", "generic"], '"stream_id": "RUN-5"'),
], ids=["append", "replay", "replay-upto", "log", "replay-mapipe", "log-mapipe", "runs", "runs-json"])
def test_append_and_reads_on_sqlite_import_no_sqlalchemy(tmp_path: Path, sqlite_store: str, args: list[str],
                                                         printed: str) -> None:
    r, modules = run(tmp_path, sqlite_store, *args)
    assert r.returncode == 0, r.stderr
    assert printed in r.stdout  # the command did its work (on the stdlib sqlite3 connection)
    assert heavy(modules) == [], f"evstore {args[0]} imported {heavy(modules)}"
    assert not [m for m in modules if m.endswith(".simulate")]


@pytest.mark.parametrize("args, printed", [
    (["append", "ONE", "demo.note", "--data", '{"n": 1}', "--json"], '"version": 2'),
    (["replay", "RUN-5", "--json"], '{"task": "RUN-5", "step": 4}'),
    (["log", "RUN-5"], "    5  "),
    (["runs", "--limit", "5"], "RUN-5"),
    (["runs", "--json", "--limit", "1", "--page", "2"], '"stream_id": "'),
], ids=["append", "replay", "log", "runs", "runs-json-page"])
def test_append_and_reads_on_postgresql_import_no_sqlalchemy(tmp_path: Path, pg_url: str, args: list[str],
                                                             printed: str) -> None:
    from conftest import migrated

    url = migrated(pg_url)
    versions = tmp_path / "versions"
    versions.mkdir()
    for i in range(5):
        (versions / f"{i:03d}.json").write_text(json.dumps({"task": "RUN-5", "step": i}) + "\n")
    runner, cli = CliRunner(), register()
    for setup in (["append", "ONE", "demo.note", "--data", '{"n": 0}'],
                  ["ingest", "generic", "--stream", "RUN-5", str(versions)]):
        r = runner.invoke(cli, ["--url", url, *setup])
        assert r.exit_code == 0, r.output
    r, modules = run(tmp_path, url, *args)
    assert r.returncode == 0, r.stderr
    assert printed in r.stdout  # the command did its work, on a psycopg connection of its own
    assert "psycopg" in modules
    assert heavy(modules) == [], f"evstore {args[0]} imported {heavy(modules)}"
    # psycopg's version modules are given their versions from the .dist-info folders' names: the
    # standard library's importlib.metadata (a sixth of the process's CPU) is not imported either
    assert "importlib.metadata" not in modules


def test_psycopg_imported_so_keeps_its_versions() -> None:
    """What ``import_psycopg`` leaves is what a plain ``import psycopg`` gives (fresh interpreters)."""
    def versions(code: str) -> list[str]:
        r = subprocess.run([sys.executable, "-c", code + "\nimport psycopg, psycopg_binary, sys\n"
                            "print(psycopg.__version__, psycopg.version.__version__, psycopg_binary.__version__, "
                            "psycopg.pq.__impl__, 'importlib.metadata' in sys.modules)"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    plain = versions("import psycopg")
    ours = versions("from eventstore.backends.postgres import import_psycopg\nimport_psycopg()")
    assert ours[:4] == plain[:4] and plain[3] == "binary"
    assert (plain[4], ours[4]) == ("True", "False")


def test_the_probe_sees_sqlalchemy_when_it_is_imported(tmp_path: Path, sqlite_store: str) -> None:
    """The check above can fail: ``db current`` needs Alembic, and the probe reports it."""
    r, modules = run(tmp_path, sqlite_store, "db", "current")
    assert r.returncode == 0, r.stderr
    assert {"sqlalchemy", "alembic"} <= {m.split(".")[0] for m in modules}


def test_help_imports_no_command_module_and_lists_every_command(tmp_path: Path) -> None:
    r, modules = run(tmp_path, None, "--help")
    assert r.returncode == 0, r.stderr
    loaded = sorted(m for m in modules if m.startswith(("eventstore.cli.", "projections", "eventstore.store")))
    assert loaded == []
    assert heavy(modules) == []  # (a dialect's command, from an entry point, is loaded for its help)
    # ... and only that module: not the dialect itself, the event model or msgspec (the registry and
    # the dialect's package re-export their names lazily)
    assert "eventstore.dialects.claude.commands" in modules
    assert not {"msgspec", "eventstore.events", "eventstore.dialects.base", "eventstore.dialects.claude.dialect",
                "json", "pathlib"} & modules
    # every command module imported; 78 columns, as click formats help without a terminal (CliRunner forces 80)
    full = CliRunner().invoke(register(), ["--help"], prog_name="evstore", terminal_width=78)
    assert full.exit_code == 0
    assert r.stdout == full.output


def test_the_command_table_is_the_commands() -> None:
    """``COMMANDS`` (what --help lists and where each command lives) matches the commands."""
    cli = register()
    plugins = set(_plugin_commands())  # the dialects' commands come through entry points instead
    built_in = {name: cmd for name, cmd in cli.commands.items() if name not in plugins}
    assert sorted(built_in) == sorted(COMMANDS), "add the command to eventstore.cli.COMMANDS"
    for name, cmd in built_in.items():
        module, text = COMMANDS[name]
        assert cmd.callback is not None and cmd.callback.__module__ == module, name
        assert (None if cmd.hidden else " ".join((cmd.help or "").split("\n\n")[0].split())) == text, name


def test_a_command_runs_with_only_its_module_loaded(tmp_path: Path) -> None:
    """``keygen`` loads eventstore.cli.core and nothing of the other command modules."""
    r, modules = run(tmp_path, None, "keygen", "--out", str(tmp_path / "k"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.pub").exists()
    assert "eventstore.cli.core" in modules
    assert not {"eventstore.cli.documents", "projections.cli.runs"} & modules


def test_metrics_over_tables_that_are_current_imports_no_pyarrow(sqlite_store: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the analytics tables is DuckDB's: pyarrow (with numpy, 0.28 s of CPU) is imported only
    by a refresh that writes facts, and pandas never (projections/analytics/columns.py); `metrics` runs its
    refresh in a forked child (files.refresh_apart), so the command's own process imports neither."""
    r, modules = run(tmp_path, sqlite_store, "metrics")  # the first one builds the tables, in a child
    assert r.returncode == 0, r.stderr
    assert not {m.split(".")[0] for m in modules} & {"pyarrow", "numpy", "pandas"}
    r, _ = run(tmp_path, sqlite_store, "append", "ONE", "demo.note", "--data", '{"n": 1}')
    assert r.returncode == 0, r.stderr
    with monkeypatch.context() as env:  # the refresh in the command's process (run's interpreter inherits it)
        env.setenv("EVSTORE_ANALYTICS_FORK", "0")
        r, modules = run(tmp_path, sqlite_store, "metrics")
    assert r.returncode == 0 and "1 new events applied" in r.stderr, r.stderr
    top = {m.split(".")[0] for m in modules}
    assert "pyarrow" in top and "pandas" not in top
    r, modules = run(tmp_path, sqlite_store, "metrics")
    assert r.returncode == 0 and "reviewer" in r.stdout.lower(), r.stdout + r.stderr
    assert not {m.split(".")[0] for m in modules} & {"pyarrow", "numpy", "pandas"}


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_metrics_on_an_unchanged_store_imports_only_what_reads_the_kept_text(sqlite_store: str, tmp_path: Path,
                                                                              fmt: str) -> None:
    """A later ``metrics`` answers with the text kept at the log's position (projections.metrics.rendered):
    it imports neither DuckDB nor Arrow, SQLAlchemy or the terminal libraries, nor the runs index's code
    (it appends nothing)."""
    first, _ = run(tmp_path, sqlite_store, "metrics", "--format", fmt)
    assert first.returncode == 0, first.stderr
    r, modules = run(tmp_path, sqlite_store, "metrics", "--format", fmt)
    assert r.returncode == 0 and r.stdout == first.stdout and r.stderr == "", r.stderr
    assert heavy(modules) == [], f"evstore metrics imported {heavy(modules)}"
    assert not {"projections.runs", "projections.writers", "eventstore.ingest"} & modules
    # nor any dialect's analytics: while the manifest's code stamp holds, the catalog is not built to key the report
    assert not [m for m in modules if m.startswith("eventstore.dialects.") and m.endswith(".analytics")
                and m.count(".") == 3], modules


def test_projections_status_imports_no_dialect_while_the_code_is_the_manifests(sqlite_store: str,
                                                                               tmp_path: Path) -> None:
    """``projections status`` takes the analytics catalog's version from the manifest while the code that built
    it is unchanged (its stamp: the registered dialects and their files' times and sizes), so it imports no
    dialect's code nor the terminal libraries; its rows are those of a process that builds the catalog."""
    from projections.analytics import facts

    first, _ = run(tmp_path, sqlite_store, "metrics")  # builds the tables, and the manifest keeps the stamp
    assert first.returncode == 0, first.stderr
    r, modules = run(tmp_path, sqlite_store, "projections", "status", "--json")
    assert r.returncode == 0, r.stderr
    assert heavy(modules) == [], f"evstore projections status imported {heavy(modules)}"
    assert not [m for m in modules if m.startswith("eventstore.dialects.") and m.count(".") >= 2
                and m.split(".")[2] not in ("analytics", "base")], modules
    built = CliRunner().invoke(register(), ["--url", sqlite_store, "projections", "status", "--json"])
    facts.catalog()  # (built in this process)
    row = next(x for x in json.loads(r.stdout) if x["name"] == "analytics")
    assert row == next(x for x in json.loads(built.stdout) if x["name"] == "analytics")
    assert row["version"] == facts.catalog().version and row["stale"] is None


def test_a_changed_file_or_dialect_list_breaks_the_code_stamp(tmp_path: Path) -> None:
    from projections.analytics import facts

    stamp = facts.code_stamp()
    assert facts.stamp_holds(json.loads(json.dumps(stamp)))  # as the manifest keeps it
    module = tmp_path / "plugin.py"
    module.write_text("X = 1\n")
    st = module.stat()
    with_file = [stamp[0], stamp[1], {**stamp[2], str(module): [st.st_mtime_ns, st.st_size]}]
    assert facts.stamp_holds(with_file)
    module.write_text("X = 22\n")  # another size
    assert not facts.stamp_holds(with_file)
    now = module.stat()
    assert facts.stamp_holds([stamp[0], stamp[1], {**stamp[2], str(module): [now.st_mtime_ns, now.st_size]}])
    # the same size, another time (an edit that kept the length)
    assert not facts.stamp_holds([stamp[0], stamp[1], {**stamp[2], str(module): [now.st_mtime_ns + 1, now.st_size]}])
    assert not facts.stamp_holds([stamp[0], stamp[1][1:], stamp[2]])  # a dialect no longer registered
    assert not facts.stamp_holds([stamp[0] + 1, stamp[1], stamp[2]])  # another flatten version
    assert not facts.stamp_holds([stamp[0], stamp[1], {str(tmp_path / "gone.py"): [1, 1]}])
    assert not facts.stamp_holds(None) and not facts.stamp_holds("x")
