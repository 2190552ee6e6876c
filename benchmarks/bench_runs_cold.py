"""A process's first append to a long stream: what the inline runs index spends folding the stream's
history when it has not seen the stream yet (a server's worker just started), against a warm append.

Each store is new (a database of its own on PostgreSQL, a file on SQLite), migrated by the checkout
on ``PYTHONPATH``: ``--streams`` Claude Code session streams of ``--events`` hook calls each (about
the size of the team benchmark's sessions at its restart) are appended in requests of 20 events with
the runs index inline; then a fresh store object (an empty document cache, as a fresh worker has) appends
20 events to each stream (cold), and 20 more (warm).  Printed: the medians of wall and CPU time an
append, cold and warm (CPU: this process's; PostgreSQL's backend is not counted).

    python benchmarks/bench_runs_cold.py                      # PostgreSQL ($EVSTORE_BENCH_PG_URL)
    python benchmarks/bench_runs_cold.py --sqlite
    PYTHONPATH=OTHER_CHECKOUT python OTHER_CHECKOUT/benchmarks/bench_runs_cold.py   # the other code
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log, pg_database  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import NewEvent  # noqa: E402
from projections.runs import IndexedEventStore  # noqa: E402


def _hook(i: int) -> NewEvent:
    tool = ("Bash", "Read", "Edit", "Grep")[i % 4]
    body = {"session_id": "s", "hook_event_name": "PostToolUse" if i % 2 else "PreToolUse", "tool_name": tool,
            "tool_input": {"command": f"pytest -q tests/test_{i % 37}.py", "description": "run the tests"},
            "cwd": "/home/dev/project"}
    return NewEvent("claude.hook", {"hook_event_name": body["hook_event_name"], "tool_name": tool,
                                    "tool_use_id": f"toolu_{i:08d}", "input": json.dumps(body),
                                    "received_at": 1764800000.0 + i})


@contextmanager
def _store_url(sqlite: bool) -> Iterator[str]:
    if sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/events.db"
    else:
        with pg_database("bench_runs_cold_") as url:
            yield url


def _timed(store: IndexedEventStore, sid: str, start: int, n: int) -> tuple[float, float]:
    events = [_hook(start + i) for i in range(n)]
    w0, c0 = time.perf_counter(), time.process_time()
    store.append(sid, events, expected_version=start, dialect="claude")
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--events", type=int, default=2500, help="events in each stream before the cold append")
    ap.add_argument("--sqlite", action="store_true", help="a SQLite file instead of PostgreSQL")
    args = ap.parse_args()
    with _store_url(args.sqlite) as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        sids = [f"session-{i:03d}" for i in range(args.streams)]
        log(f"filling {args.streams} streams of {args.events} events")
        with IndexedEventStore(url) as store:
            for start in range(0, args.events, 20):
                for sid in sids:
                    store.append(sid, [_hook(start + i) for i in range(min(20, args.events - start))],
                                 expected_version=start, dialect="claude")
        cold, warm = [], []
        with IndexedEventStore(url) as fresh:  # an empty document cache: a fresh worker's
            fresh.append("warm-up", [NewEvent("note", {})])  # its connections opened
            for sid in sids:
                cold.append(_timed(fresh, sid, args.events, 20))
            for sid in sids:
                warm.append(_timed(fresh, sid, args.events + 20, 20))

    def ms(rows: list[tuple[float, float]], i: int) -> str:
        return f"{statistics.median(r[i] for r in rows) * 1e3:.1f} ms"

    print(f"{'sqlite' if args.sqlite else 'postgresql'}, {args.streams} streams of {args.events} events, "
          f"20 events an append: cold (first append of a fresh process) wall {ms(cold, 0)}, CPU {ms(cold, 1)}; "
          f"warm wall {ms(warm, 0)}, CPU {ms(warm, 1)}")


if __name__ == "__main__":
    main()
