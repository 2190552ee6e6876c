"""Simulated runs ingested into a store, with their raw snapshot documents kept for the tests
that recompute every metric independently (tests/test_metrics.py, tests/test_analytics.py), and the
per-run check of run views (tests/test_metrics_partial.py, tests/test_dialect_contract.py)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from eventstore.dialects import get_dialect
from eventstore.dialects.base import Snapshot
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections.analytics.files import sql_string

if TYPE_CHECKING:
    import duckdb

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class SimulatedPortfolio:
    """stream id -> (dialect, snapshots) for every run written to the store."""

    runs: dict[str, tuple[str, list[Snapshot]]] = field(default_factory=dict)

    def of(self, dialect: str) -> dict[str, list[Snapshot]]:
        return {sid: snaps for sid, (d, snaps) in self.runs.items() if d == dialect}

    def docs(self, dialect: str) -> dict[str, list[Any]]:
        return {sid: [s.doc for s in snaps if s.doc is not None] for sid, snaps in self.of(dialect).items()}


def simulate_into(store: EventStore, counts: dict[str, int], *, seed: int = 11,
                  transform: Callable[[list[Snapshot], int], list[Snapshot]] | None = None) -> SimulatedPortfolio:
    """Simulate ``counts[dialect]`` runs of each dialect and ingest them (the public path)."""
    out = SimulatedPortfolio()
    rng = random.Random(seed)
    n = 0
    for name, count in counts.items():
        dialect = get_dialect(name)
        for _ in range(count):
            n += 1
            run_rng = random.Random(rng.getrandbits(64))
            snaps = list(dialect.simulate(run_rng, run_id=f"T-{n:04d}", start=START + timedelta(hours=3 * n)))
            if transform is not None and name == "mapipe":
                snaps = transform(snaps, n)
            ing = Ingestor(store, dialect)
            stream = ""
            for snap in snaps:
                stream = ing.ingest(snap).stream
            out.runs[stream] = (name, snaps)
    return out


def rows_of(con: duckdb.DuckDBPyConnection, sql: str) -> list[str]:
    """The rows of ``sql``, each as its repr, sorted: a view's rows whatever order they come in."""
    return sorted(repr(r) for r in con.execute(sql).fetchall())


def one_stream_rows(con: duckdb.DuckDBPyConnection, run_views: Iterable[str], tables: Iterable[str],
                    stream: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(each of ``run_views``' rows of ``stream`` over every fact, its rows over ``stream``'s facts alone):
    equal when the views are per run, as ``kept`` computes a touched run's rows (from its facts only).

    ``con``'s default database holds the fact ``tables`` and the views as views: the facts are narrowed by
    temporary views of the same names (read before the default database's), then dropped again."""
    run_views, tables = list(run_views), list(tables)
    full = {v: rows_of(con, f"SELECT * FROM {v} WHERE stream_id = {sql_string(stream)}") for v in run_views}
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    made = []
    try:
        for table in tables:
            con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {db}.main.{table} "
                        f"WHERE stream_id = {sql_string(stream)}")
            made.append(table)
        narrowed = {v: rows_of(con, f"SELECT * FROM {db}.main.{v}") for v in run_views}
    finally:
        for table in made:
            con.execute(f"DROP VIEW temp.main.{table}")
    return full, narrowed
