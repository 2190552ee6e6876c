"""What the one-place-only locks cost on PostgreSQL (eventstore.locks): a drain or runner round's
acquire and release on a kept connection, the holder's check that its session still holds the lock,
and a one-shot lock (connect, acquire, release, close: what `evstore hook drain` pays when it has
something to drain).  Compared with one append of one event, the work a round guards at the least.

    EVSTORE_BENCH_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python benchmarks/bench_team_locks.py
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import psycopg

from eventstore import migrate
from eventstore.db import make_engine
from eventstore.locks import ExclusiveLock
from eventstore.store import EventStore, NewEvent


def per_call(n: int, body: object) -> float:
    started = time.perf_counter()
    for _ in range(n):
        body()  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=500, help="rounds of each")
    args = ap.parse_args()
    base_url = os.environ.get("EVSTORE_BENCH_PG_URL") or os.environ.get("EVSTORE_TEST_POSTGRES_URL")
    if not base_url:
        raise SystemExit("set EVSTORE_BENCH_PG_URL (or EVSTORE_TEST_POSTGRES_URL) to a PostgreSQL server")
    schema = "bench_locks_" + uuid.uuid4().hex[:8]
    admin_url = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{base_url}{'&' if '?' in base_url else '?'}options=-csearch_path%3D{schema}"
    try:
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
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
