"""The group commit of ``evstore serve``'s appends, without HTTP: ``EventStore.append_group`` on PostgreSQL.

    python benchmarks/bench_team_group.py                    # groups of 1, 4, 16 requests of 20 events
    python benchmarks/bench_team_group.py --groups 2 8 --batch 20 --rounds 30
    EVSTORE_BENCH_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python benchmarks/bench_team_group.py

What one worker's committer does with the requests queued while the previous group committed: a group of
``G`` requests, each ``--batch`` events to a stream of its own machine (four hook-call batches to a
session stream for each batch of state-file versions, every event with its client event id and the
``sent_by`` stamp, as ``benchmarks/bench_team.py`` sends them), on the store ``evstore serve`` opens (the
runs and writers indexes inline), in a database of its own.  Printed per group size: wall milliseconds
and CPU milliseconds of this process per group (the append lock is held for the wall time: with N
workers, what bounds the groups per second), CPU microseconds per event, and the statements the group
sent (counted at psycopg's cursor; a pipeline's statements go in one round trip).  Compare two checkouts
with ``PYTHONPATH=<checkout>``; the machine's load average is printed with each line.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg  # noqa: E402
from _common import pg_database  # noqa: E402

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import GroupAppend, NewEvent, stamped  # noqa: E402
from projections.runs import IndexedEventStore  # noqa: E402

STATEMENTS: collections.Counter[str] = collections.Counter()


def _count_statements() -> None:
    for name in ("execute", "executemany", "copy"):
        original = getattr(psycopg.Cursor, name)

        def counted(self: Any, query: Any, *args: Any, _original: Any = original, _name: str = name,
                    **kwargs: Any) -> Any:
            STATEMENTS[f"{_name}: {str(query)[:70]}"] += 1
            return _original(self, query, *args, **kwargs)

        setattr(psycopg.Cursor, name, counted)


def _event(kind: str, n: int) -> NewEvent:
    if kind == "session":
        return NewEvent("claude.hook", {"hook_event_name": "PostToolUse", "tool_name": "Edit", "n": n,
                                        "input": "{" + "x" * 400 + "}"}, event_id=str(uuid.uuid4()))
    return NewEvent("state.version", {"path": ".taskmaster/tasks.json", "version": n,
                                      "doc": {"tasks": [{"id": t, "title": f"task {t}", "status": "pending",
                                                         "details": "z" * 80} for t in range(10)]}},
                    event_id=str(uuid.uuid4()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16], help="requests per group")
    ap.add_argument("--batch", type=int, default=20, help="events per request")
    ap.add_argument("--rounds", type=int, default=30, help="groups timed per group size")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the statements of a group")
    args = ap.parse_args()
    _count_statements()
    with pg_database("bench_group_") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        store = IndexedEventStore(url)
        versions: dict[str, int] = {}

        def group(size: int, turn: int) -> list[GroupAppend]:
            items = []
            for g in range(size):
                kind = "state" if (turn + g) % 5 == 4 else "session"
                stream = f"m{g:02d}/{kind}"
                at = versions.get(stream, 0)
                with stamped({"sent_by": {"token": f"m{g:02d}", "machine": f"m{g:02d}"}}):
                    items.append(GroupAppend.of(stream, [_event(kind, at + i) for i in range(args.batch)],
                                                expected_version=at if at else "no stream"))
                versions[stream] = at + args.batch
            return items

        try:
            for size in args.groups:
                for turn in range(5):  # every stream created, the connections warm
                    store.append_group(group(size, turn))
                STATEMENTS.clear()
                wall = cpu = 0.0
                for turn in range(5, 5 + args.rounds):
                    items = group(size, turn)
                    t0, c0 = time.perf_counter(), time.process_time()
                    out = store.append_group(items)
                    wall += time.perf_counter() - t0
                    cpu += time.process_time() - c0
                    failed = [r for r in out if isinstance(r, Exception)]
                    if failed:
                        raise SystemExit(f"an append failed: {failed[0]}")
                n = args.rounds
                print(f"{size:3d} requests x {args.batch} events: {wall / n * 1000:7.2f} ms wall, "
                      f"{cpu / n * 1000:6.2f} ms CPU a group, {cpu / n / size / args.batch * 1e6:6.1f} us CPU an event, "
                      f"{sum(STATEMENTS.values()) / n:5.1f} statements a group; load average "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
                if args.verbose:
                    for what, count in STATEMENTS.most_common():
                        print(f"    {count / n:5.1f}  {what}")
        finally:
            store.close()


if __name__ == "__main__":
    main()
