"""What the one-place-only locks cost on PostgreSQL (eventstore.locks): a drain or runner round's
acquire and release on a kept connection, the holder's check that its session still holds the lock,
and a one-shot lock (connect, acquire, release, close: what `evstore hook drain` pays when it has
something to drain).  Compared with one append of one event, the work a round guards at the least.

    EVSTORE_BENCH_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python benchmarks/bench_team_locks.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from eventstore import migrate
from eventstore.db import make_engine
from eventstore.locks import ExclusiveLock
from eventstore.store import EventStore, NewEvent

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import pg_schema  # noqa: E402


def per_call(n: int, body: object) -> float:
    started = time.perf_counter()
    for _ in range(n):
        body()  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=500, help="rounds of each")
    args = ap.parse_args()
    with pg_schema("bench_locks_") as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        with EventStore(url) as store:
            lock = ExclusiveLock(store, "bench")

            def round_trip() -> None:
                assert lock.acquire()
                lock.release()

            kept = per_call(args.n, round_trip)
            lock.acquire()

            def check_held() -> None:
                assert lock.still_held()

            check = per_call(args.n, check_held)
            lock.close()

            def one_shot() -> None:
                fresh = ExclusiveLock(store, "bench")
                assert fresh.acquire()
                fresh.close()

            shot = per_call(max(args.n // 10, 10), one_shot)
            append = per_call(args.n, lambda: store.append("bench", [NewEvent(type="bench.note", data={})]))
        print(f"acquire + release, kept connection: {kept:.2f} ms ({kept / append:.2f}x one append of one event)")
        print(f"still_held check:                   {check:.2f} ms ({check / append:.2f}x)")
        print(f"one-shot lock (connect ... close):  {shot:.2f} ms ({shot / append:.2f}x)")
        print(f"one append of one event:            {append:.2f} ms")


if __name__ == "__main__":
    main()
