"""One worker process of the concurrency tests (tests/test_analytics_concurrency.py).

    python tests/concurrent_worker.py SECONDS URL cli ARGS...   # `evstore --url URL ARGS...` in a loop
    python tests/concurrent_worker.py SECONDS URL ingest SEED   # ingest one simulated run per turn

Imports first and prints ``ready``; then reads a wall-clock start time from stdin (the test sends it
once every worker is ready) and waits for it, so that every worker starts together; loops for SECONDS
(and at least MIN_TURNS turns), and prints one JSON line: {"turns": n, "failures": [{"exit": .., "output": ..}]}.
A turn fails when the command exits non-zero or raises (the CLI's own ``Error:`` included).
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from typing import Any

#: Every worker runs at least this many turns, however slow a busy machine makes them.
MIN_TURNS = 3


def main(argv: list[str]) -> int:
    seconds, url, kind, *rest = argv
    import importlib

    from click.testing import CliRunner

    from eventstore.cli import register
    from eventstore.store import EventStore

    for module in ("duckdb", "pyarrow.parquet", "projections.analytics", "projections.metrics", "projections.report",
                   "projections.replay", "eventstore.verify", "eventstore.ingest"):
        importlib.import_module(module)  # commands import these lazily: not inside the race's time

    cli = register()
    runner = CliRunner()
    store = EventStore(url) if kind == "ingest" else None
    seed = int(rest[0]) if kind == "ingest" else 0
    turns, failures = 0, []  # type: int, list[dict[str, Any]]
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    end = time.time() + float(seconds)
    while time.time() < end or turns < MIN_TURNS:
        turns += 1
        if store is not None:
            try:
                _ingest_one(store, seed * 100_000 + turns)
            except Exception:
                failures.append({"exit": None, "output": traceback.format_exc()})
            continue
        r = runner.invoke(cli, ["--url", url, *rest])
        if r.exit_code != 0 or r.exception is not None and not isinstance(r.exception, SystemExit):
            detail = r.output
            if r.exc_info and not isinstance(r.exception, SystemExit):
                detail += "".join(traceback.format_exception(*r.exc_info))
            failures.append({"exit": r.exit_code, "output": detail[-4000:]})
    if store is not None:
        store.close()
    print(json.dumps({"turns": turns, "failures": failures}))
    return 0


def _ingest_one(store: Any, n: int) -> None:
    """One simulated run of a random dialect, ingested snapshot by snapshot (the public path)."""
    from datetime import UTC, datetime, timedelta

    from eventstore.dialects import get_dialect
    from eventstore.ingest import Ingestor

    rng = random.Random(n)
    name = rng.choice(["mapipe", "mapipe", "taskflow", "friday", "envelope"])
    dialect = get_dialect(name)
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC) + timedelta(hours=n % 10_000)
    ing = Ingestor(store, dialect)
    for snap in dialect.simulate(rng, run_id=f"W-{n}", start=start):
        ing.ingest(snap)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
