"""One worker process of the concurrency tests (tests/test_analytics_concurrency.py).

``work(peers, index, url, kind, args, conn)`` runs in a process of its own, forked by
multiprocessing's fork server, which has imported PRELOAD once (a new interpreter per worker spent
about 0.25 s of CPU on imports: 22 workers a run).  ``kind`` is ``cli`` (``evstore --url URL ARGS...``
in a loop, in-process) or ``ingest`` (``ARGS == [SEED]``: one simulated run ingested per turn).

It sends ``"ready"`` on ``conn``; then receives a wall-clock start time (the test sends it once every
worker is ready) and waits for it, so that every worker starts together.  A command worker runs
MIN_TURNS turns at full speed.  An appender (``ingest``) runs as many, then goes on at a walking pace
(PACE between turns) until every other worker has run its turns, so the log keeps moving under every
command's turns without taking the cores from the slower ones: each worker writes its count of turns to
the file PEERS/INDEX after every turn, and the appenders read the others' files.  Then it sends a
summary: {"turns": n, "failures": [{"exit": .., "output": ..}], "seconds": s}.  A turn fails when the
command exits non-zero or raises (the CLI's own ``Error:`` included).
"""

from __future__ import annotations

import os
import random
import time
import traceback
from pathlib import Path
from typing import Any

#: Every worker runs this many turns at full speed (an appender goes on until every other worker has).
MIN_TURNS = 3
#: The pause between turns of an appender that has run its own turns and waits for its peers: each turn
#: appends a whole simulated run, and the commands' refreshes read all of them.
PACE = 0.3
#: A worker whose peers never finish (one crashed) stops after this long; the test then fails on the crash.
GIVE_UP = 90.0


def _peers_done(peers: Path, own: int) -> bool:
    """Whether every other worker of the race has written a count of at least MIN_TURNS."""
    for f in peers.iterdir():
        if f.name.isdigit() and f.name != str(own) and int(f.read_text()) < MIN_TURNS:
            return False
    return True


def _count(peers: Path, own: int, turns: int) -> None:
    tmp = peers / f".{own}.tmp"
    tmp.write_text(str(turns))
    os.replace(tmp, peers / str(own))  # readers see the old count or the new, never an empty file


#: What the commands import (lazily, most of them): the fork server imports it once, before any race.
PRELOAD = ("click.testing", "eventstore.cli", "eventstore.store", "eventstore.ingest", "eventstore.verify",
           "eventstore.dialects", "duckdb", "pyarrow.parquet", "projections.analytics", "projections.metrics",
           "projections.report", "projections.replay",
           # the PostgreSQL driver and SQLAlchemy's dialect for it, imported when a store on it opens
           "psycopg", "sqlalchemy.dialects.postgresql.psycopg", "eventstore.backends.postgres",
           # what an ingest imports on first use: the dialects, and jsonschema, which validates their documents
           "jsonschema", *(f"eventstore.dialects.{name}" for name in
                                     ("claude", "envelope", "friday", "generic", "mapipe", "taskflow", "taskmaster")))


def work(peers_dir: str, own: int, url: str, kind: str, rest: list[str], conn: Any) -> None:
    """One worker of a race (the module's docstring); ``conn`` is its end of a multiprocessing Pipe."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)  # done in the fork server already: not inside the race's time
    from click.testing import CliRunner

    from eventstore.cli import register
    from eventstore.store import EventStore

    peers = Path(peers_dir)
    cli = register()
    runner = CliRunner()
    store = EventStore(url) if kind == "ingest" else None
    seed = int(rest[0]) if kind == "ingest" else 0
    turns, failures = 0, []  # type: int, list[dict[str, Any]]
    conn.send("ready")
    start = conn.recv()
    time.sleep(max(0.0, start - time.time()))
    started = time.monotonic()
    give_up = started + GIVE_UP
    while turns < MIN_TURNS or store is not None and not _peers_done(peers, own) and time.monotonic() < give_up:
        turns += 1
        if store is not None:
            try:
                _ingest_one(store, seed * 100_000 + turns)
            except Exception:
                failures.append({"exit": None, "output": traceback.format_exc()})
        else:
            r = runner.invoke(cli, ["--url", url, *rest])
            if r.exit_code != 0 or r.exception is not None and not isinstance(r.exception, SystemExit):
                detail = r.output
                if r.exc_info and not isinstance(r.exception, SystemExit):
                    detail += "".join(traceback.format_exception(*r.exc_info))
                failures.append({"exit": r.exit_code, "output": detail[-4000:]})
        _count(peers, own, turns)
        if turns >= MIN_TURNS:
            time.sleep(PACE)
    if store is not None:
        store.close()
    conn.send({"turns": turns, "failures": failures, "seconds": round(time.monotonic() - started, 2)})


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
