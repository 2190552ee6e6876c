"""What erasure costs (issue 38): erasing one stream, purging nearly the whole log in bounded batches,
scrubbing the file, and verify afterwards.

    python benchmarks/bench_erasure.py                       # 100 streams x 200 events of ~1 KB, SQLite
    python benchmarks/bench_erasure.py --streams 20 --events 100 --url postgresql+psycopg://...

The store is filled with ``--streams`` streams of ``--events`` events (``{"i", "text"}``, ~1 KB), then
it times ``erasure.erase`` of one stream, the backend's scrub (SQLite: VACUUM and a TRUNCATE
checkpoint of the WAL; PostgreSQL: VACUUM FULL), a purge of every other payload (``--batch`` events a
transaction) and ``verify``.  The CLI adds a rebuild of every projection, which grows with the log.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from eventstore import migrate
from eventstore.erasure import erase
from eventstore.store import EventStore, NewEvent
from eventstore.verify import verify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--url", default=None, help="an empty database (default: a SQLite file in a temporary folder)")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-erasure-")
    url = args.url or f"sqlite:///{folder}/events.db"
    try:
        with EventStore(url, check_schema=False) as s:
            migrate.upgrade(s.engine)
        with EventStore(url) as s:
            text = "lorem ipsum " * 80
            for i in range(args.streams):
                s.append(f"S{i}", [NewEvent("demo.note", {"i": k, "text": text}) for k in range(args.events)])
            size = os.path.getsize(f"{folder}/events.db") / 1e6 if args.url is None else 0.0
            print(f"{s.max_position()} events" + (f", a {size:.0f} MB file" if size else ""))
            t = time.perf_counter()
            r = erase(s, reason="one stream", stream_ids=["S1"], scrub=False, batch=args.batch)
            print(f"erase one stream ({r.events} events): {(time.perf_counter() - t) * 1000:.0f} ms")
            t = time.perf_counter()
            s.backend.scrub(s._raw())
            print(f"scrub: {(time.perf_counter() - t) * 1000:.0f} ms")
            t = time.perf_counter()
            r = erase(s, reason="all", recorded_before="9999", kind="purged", scrub=False, batch=args.batch)
            took = time.perf_counter() - t
            print(f"purge {r.events} events in {r.batches} batches of {args.batch}: {took:.2f} s "
                  f"({took / max(r.events, 1) * 1e6:.0f} us an event)")
            t = time.perf_counter()
            rep = verify(s)
            print(f"verify: ok={rep.ok}, {rep.purged} purged, {rep.erased} erased: {time.perf_counter() - t:.2f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
