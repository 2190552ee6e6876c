"""What salting the payload digests costs the append path: the same appends with salted digests
(the default since migration 0010) and with plain ones (``EventStore(plain_digests=True)``, as
before), interleaved, each on a fresh SQLite store (synchronous=NORMAL); CPU time per event.

    python benchmarks/bench_digests.py            # 20,000 events of ~450 bytes, 100 per append, 3 rounds
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's eventstore

from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402

PAYLOAD = {"text": "x" * 400, "n": 1, "tags": ["a", "b"]}


def run(plain: bool, events: int, per_call: int) -> float:
    """CPU microseconds per appended event."""
    folder = tempfile.mkdtemp(prefix="evbench-digests-")
    try:
        url = f"sqlite:///{folder}/events.db"
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        with EventStore(url, synchronous="NORMAL", plain_digests=plain) as store:
            batches = [[NewEvent("t.x", PAYLOAD) for _ in range(per_call)] for _ in range(events // per_call)]
            start = time.process_time()
            for i, batch in enumerate(batches):
                store.append(f"S{i // 10}", batch)
            return (time.process_time() - start) / (len(batches) * per_call) * 1e6
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--per-call", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    got: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for plain in (True, False):
            got[plain].append(run(plain, args.events, args.per_call))
    plain, salted = min(got[True]), min(got[False])
    print(f"{args.events} events, {args.per_call} per append, best of {args.rounds} (CPU µs per event)")
    print(f"  plain SHA-256 digests   {plain:6.2f}  {[round(x, 2) for x in got[True]]}")
    print(f"  salted digests          {salted:6.2f}  {[round(x, 2) for x in got[False]]}")
    print(f"  salted / plain          {salted / plain:6.3f}x")


if __name__ == "__main__":
    main()
