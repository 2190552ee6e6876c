"""Who wrote each state version: the matching (``projections.writers.match``) on a synthetic store.

    python benchmarks/bench_writers.py                 # 500 runs x 20 versions, 10,000 tool calls
    python benchmarks/bench_writers.py --runs 2000

Each run's state file is written by one session, one call per version, 5 s before the version;
two calls in three give the file's bytes (a content match), the third does not (path and time).
Every state file has the same name, the worst case for the index by name.  Prints the median of
three matches and checks every version found its call the expected way.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from projections import writers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--versions", type=int, default=20)
    args = ap.parse_args()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    versions, calls = [], []
    for run in range(args.runs):
        path = f"/work/run{run}/agent-state.json"
        for v in range(1, args.versions + 1):
            at = t0 + timedelta(minutes=run * (args.versions + 10) + v)
            sha = f"{run}-{v}"
            versions.append(writers._Version(f"R{run}", v, path, sha, at, None, None, None))
            calls.append(writers._Call(f"S{run}", f"c{run}-{v}", path, sha if v % 3 else None, "Write", "m",
                                       at - timedelta(seconds=5), False))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        got = writers.match(versions, calls)
        times.append(time.perf_counter() - start)
    wrong = [k for k, w in got.items() if w.tool_use_id != f"c{k[0][1:]}-{k[1]}"
             or w.established_by != ("content" if k[1] % 3 else "path+time")]
    assert len(got) == len(versions) and not wrong, wrong[:5]
    median = statistics.median(times)
    print(f"{len(versions)} versions, {len(calls)} calls: match {median:.3f} s "
          f"({len(versions) / median:,.0f} versions/s)")


if __name__ == "__main__":
    main()
