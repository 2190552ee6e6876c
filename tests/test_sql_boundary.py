"""One boundary for SQL: only the backends (``eventstore/backends``) and the migrations run
statements against the log's tables; everything else calls the recorder's typed methods.

The check reads every module of ``eventstore`` and ``projections`` (its string literals, docstrings
left out) for a statement naming a log table (``FROM events``, ``JOIN streams``,
``UPDATE projection_checkpoints``, ...) and for SQLAlchemy Core built on the log's ``Table``
objects.  The analytics (modules under ``projections/analytics``, a dialect's ``analytics.py``, or
any module importing DuckDB or Arrow) query DuckDB over Parquet files, with views named ``events`` and ``streams`` of their own; there a
statement may name those, but never a column only the log has (``stream_pk``) nor the log's
other tables.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("eventstore", "projections")
ALLOWED = ("eventstore/backends/", "eventstore/schema.py", "eventstore/migrate.py")
LOG_TABLES = ("events", "streams", "projection_checkpoints", "replay_cache", "store_identity", "blobs",
              "source_versions", "tree_nodes", "tree_checkpoints")
ONLY_IN_THE_LOG = ("projection_checkpoints", "replay_cache", "store_identity", "blobs", "source_versions",
                   "tree_nodes", "tree_checkpoints")

_KEYWORD = r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|TRUNCATE|ON)\s+"
LOG_SQL = re.compile(_KEYWORD + r"(?:" + "|".join(LOG_TABLES) + r")\b", re.IGNORECASE)
LOG_ONLY_SQL = re.compile(_KEYWORD + r"(?:" + "|".join(ONLY_IN_THE_LOG) + r")\b|\bstream_pk\b", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


ANALYTICS_LIBRARIES = ("duckdb", "pyarrow")


def _analytics(path: Path, tree: ast.AST) -> bool:
    """Whether the module's SQL runs on DuckDB over the analytics files."""
    where = path.as_posix()
    if where.startswith("projections/analytics/") or re.fullmatch(r"eventstore/dialects/[^/]+/analytics\.py", where):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ANALYTICS_LIBRARIES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ANALYTICS_LIBRARIES:
            return True
    return False


def violations(path: Path, source: str) -> list[str]:
    """Where ``source`` (the module at ``path``) names the log's tables in SQL, one line each."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    pattern = LOG_ONLY_SQL if _analytics(path, tree) else LOG_SQL
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for m in pattern.finditer(node.value):
                out.append(f"{path}:{node.lineno}: {m.group(0)!r}")
        elif isinstance(node, ast.ImportFrom) and node.module == "eventstore.schema":
            for alias in node.names:
                if alias.name in LOG_TABLES:
                    out.append(f"{path}:{node.lineno}: imports the log's table {alias.name} (SQLAlchemy Core)")
        elif isinstance(node, ast.Attribute) and node.attr in LOG_TABLES and isinstance(node.value, ast.Name) \
                and node.value.id == "schema":
            out.append(f"{path}:{node.lineno}: uses schema.{node.attr} (SQLAlchemy Core)")
    return out


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(ALLOWED)]


def test_no_module_outside_the_backends_writes_sql_against_the_log() -> None:
    modules = _modules()
    assert len(modules) > 50  # the walk really found the packages
    found = [v for p in modules for v in violations(p.relative_to(ROOT), p.read_text(encoding="utf-8"))]
    assert found == [], "SQL against the log's tables outside eventstore/backends:\n" + "\n".join(found)


def test_the_backends_hold_the_log_sql_the_check_looks_for() -> None:
    """The pattern matches the statements it exists to keep in the backends (so the check above
    can fail): every log table appears in a statement of backends/base.py."""
    base = ROOT / "eventstore" / "backends" / "base.py"
    found = " ".join(violations(base.relative_to(ROOT), base.read_text(encoding="utf-8")))
    for table in LOG_TABLES:
        assert re.search(_KEYWORD + table + r"\b", found), table


@pytest.mark.parametrize("source", [
    'cur.execute("SELECT version, position FROM projection_checkpoints WHERE name = ?", (n,))',
    'cur.execute(f"SELECT COUNT(*) FROM events WHERE position > {p}", (pos,))',
    'SQL = "select e.hash from streams s join events e on e.stream_pk = s.stream_pk"',
    'cur.execute("INSERT INTO replay_cache (stream_pk) VALUES (?)", (1,))',
    'x = "SELECT store_id FROM store_identity"',
    "from eventstore.schema import events, NAMING",
    "from eventstore import schema\nq = select(schema.streams.c.stream_id)",
    # In a DuckDB module the analytics' own views are fine, the log's tables and columns are not.
    'import duckdb\ncon.execute("SELECT * FROM replay_cache")',
    'import duckdb\ncon.execute("SELECT stream_pk FROM events")',
    'import pyarrow\nVIEW = "SELECT * FROM events e JOIN streams s ON s.stream_pk = e.stream_pk"',
])
def test_the_check_catches(source: str) -> None:
    assert violations(Path("m.py"), source)


@pytest.mark.parametrize("source", [
    '"""Folded from events, then updated into streams."""',  # a docstring is prose
    'cur.execute("INSERT INTO proj_runs (stream_id) VALUES (?)", (sid,))',  # a projection's own table
    'import duckdb\ncon.execute("SELECT stream_id, count(*) FROM events GROUP BY stream_id")',  # the view
    'msg = {"events": 3, "streams": 1}',
])
def test_the_check_lets_pass(source: str) -> None:
    assert violations(Path("m.py"), source) == []


def test_analytics_modules_are_told_apart_by_place_and_imports() -> None:
    view = 'V = "SELECT stream_id, count(*) FROM events GROUP BY stream_id"'
    assert violations(Path("projections/analytics/facts.py"), view) == []
    assert violations(Path("eventstore/dialects/taskmaster/analytics.py"), view) == []
    assert violations(Path("projections/runs.py"), view)  # the same text elsewhere is the log
    assert violations(Path("eventstore/dialects/taskmaster/lens.py"), view)
