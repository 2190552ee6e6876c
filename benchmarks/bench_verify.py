"""Verify against its limit: one scan of the log plus the three SHA-256 per event it must compute.

    python benchmarks/bench_verify.py                          # 200,000 events, SQLite
    python benchmarks/bench_verify.py --events 1000000
    python benchmarks/bench_verify.py --url sqlite:////path/to/store.db   # an existing store (left as it is)

The store is the demo's simulated runs copied under fresh stream ids (``bench_projections.build_store``)
with its inline indexes caught up, as a user's store has them.  Rows:

- **limit**: this process reads the rows verify reads (its chain query: every event with its
  stream's head, by stream and version) and computes, per event, the salted SHA-256 of ``data``, of
  ``meta`` (:func:`eventstore.chain.payload_digest`) and the event hash (:func:`eventstore.chain.event_hash`, its canonical header included);
  nothing else.  Best of two.
- **`evstore verify`**: the whole command in a child process (wall and CPU seconds of that process and
  the one it forks, peak RSS), what a user runs: the engine's file check, the chains, blobs, sources, replay cache, the
  Merkle tree recomputed from every leaf and the runs index re-derived from the events.
- **its parts** in this process (CPU seconds): the eventstore checks alone (``verify.verify``), the
  runs index derived in the same scan (``projections.runs.IndexCheck``) on top, and the index derived
  by a forked process beside the scan (``projections.runs.fork_index_check``, what ``evstore verify``
  does on two cores): this process's CPU, the child's, and the longer of the two (the wall time on two
  idle cores; the command's CPU is their sum).
- **`evstore verify` with EVSTORE_VERIFY_FORK=0**: the whole command with the index derived in its scan.
- **`verify --since`**: a checkpoint signed, ``--append`` events appended (1 %), then
  ``evstore verify --since CHECKPOINT --vkey`` in a child process.

The ratio is the limit's CPU seconds over the row's (1.0: at the limit; the target is >= 0.6).  A
benchmark, not a timed test: the machine is shared, so read CPU seconds and ratios more than wall.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_growth import append_more, catch_up_inline, child  # noqa: E402
from bench_projections import build_store  # noqa: E402


def limit(url: str) -> tuple[float, float, int]:
    """(wall s, CPU s, events) of one scan of verify's chain query and three SHA-256 per event."""
    from eventstore import chain
    from eventstore.store import EventStore

    digest, event_hash = chain.payload_digest, chain.event_hash
    best = (float("inf"), float("inf"), 0)
    with EventStore(url) as store:
        for _ in range(2):
            wall, cpu, n = time.perf_counter(), time.process_time(), 0
            with store.reading() as cur:
                for (sid, _hv, _hh, version, event_id, type_, schema_version, data, meta, occurred_at, recorded_at,
                     _ds, _ms, prev_hash, stored, _pos, salt) in store.backend.chain_rows(cur):
                    if version is None:
                        continue
                    n += 1
                    if event_hash(prev_hash, sid, version, event_id, type_, schema_version, occurred_at, recorded_at,
                                  digest(data, salt), digest(meta, salt)) != stored:
                        raise AssertionError(f"{sid} v{version}: the limit's hash is not the stored one")
            got = (time.perf_counter() - wall, time.process_time() - cpu, n)
            best = min(best, got, key=lambda r: r[1])
    return best


def parts(url: str) -> tuple[float, float, float, float]:
    """CPU s of ``verify.verify`` alone, with the runs index derived in its scan, and the two processes of
    the forked derivation (this one's verify and comparison, the child's scan and fold)."""
    from eventstore import verify
    from eventstore.store import EventStore
    from projections.runs import IndexCheck, fork_index_check

    with EventStore(url) as store:
        cpu = time.process_time()
        assert verify.verify(store).ok
        alone = time.process_time() - cpu
        cpu = time.process_time()
        derive = IndexCheck(store)
        assert verify.verify(store, sink=derive).ok and not derive.problems()
        in_scan = time.process_time() - cpu
        cpu = time.process_time()
        forked = fork_index_check(store)
        if forked is None:
            return alone, in_scan, 0.0, 0.0
        try:
            assert verify.verify(store).ok and not forked.problems()
        finally:
            forked.close()
        return alone, in_scan, time.process_time() - cpu, forked.cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000, help="events in the store built")
    ap.add_argument("--pool-runs", type=int, default=200, help="distinct simulated runs copied to reach the size")
    ap.add_argument("--url", default=None, help="measure this store instead of building one (not changed: "
                                                "--since is skipped)")
    ap.add_argument("--append", type=float, default=0.01, help="--since: events appended after the checkpoint, "
                                                               "as a share of the store")
    opts = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "EVSTORE_PROGRESS": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        url = opts.url
        if url is None:
            url = f"sqlite:///{tmp}/verify.db"
            started = time.perf_counter()
            build_store(url, opts.events, opts.pool_runs)
            catch_up_inline(url)
            print(f"built {opts.events:,} events in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        lw, lc, n = limit(url)
        rows = [("limit: one scan + 3 SHA-256 per event", lw, lc, 0.0)]
        rows.append(("`evstore verify`", *child(url, ["verify"], env)))
        alone, with_index, parent, child_cpu = parts(url)
        rows.append(("  its eventstore checks (in process)", 0.0, alone, 0.0))
        rows.append(("  the same with the runs index derived in its scan", 0.0, with_index, 0.0))
        if child_cpu:
            rows.append(("  the same with the index derived by a forked process: this one", 0.0, parent, 0.0))
            rows.append(("  ... and the forked one (its own scan and fold)", 0.0, child_cpu, 0.0))
            rows.append(("  ... the longer of the two (wall on two idle cores)", 0.0, max(parent, child_cpu), 0.0))
        rows.append(("`evstore verify`, index in its scan (EVSTORE_VERIFY_FORK=0)",
                     *child(url, ["verify"], {**env, "EVSTORE_VERIFY_FORK": "0"})))
        if opts.url is None:
            prefix = f"{tmp}/log"
            for args in (["keygen", "--out", prefix, "--name", "bench.example/log"],
                         ["checkpoint", "--key-file", f"{prefix}.key", "--out", f"{tmp}/cp"]):
                child(url, args, env)
            more = max(1, int(n * opts.append))
            append_more(url, more)
            catch_up_inline(url)
            rows.append((f"`verify --since` ({more:,} new events)",
                         *child(url, ["verify", "--since", f"{tmp}/cp", "--vkey", f"{prefix}.vkey"], env)))
            rows.append(("`evstore verify` (the grown store)", *child(url, ["verify"], env)))
    print(f"\n{n:,} events, SQLite; the ratio is the limit's CPU over the row's (target >= 0.6)")
    print("| | wall s | CPU s | peak MB | limit / row (CPU) |")
    print("|---|---|---|---|---|")
    for label, wall, cpu, rss in rows:
        print(f"| {label} | {f'{wall:.2f}' if wall else ''} | {cpu:.2f} | {f'{rss:.0f}' if rss else ''} | "
              f"{lc / cpu:.2f} |")


if __name__ == "__main__":
    main()
