"""Full-text search (``evstore search``, the ``search`` projection) over a large log on SQLite.

    python benchmarks/bench_search.py                    # 1,000,000 events
    python benchmarks/bench_search.py --events 100000    # quick

1. Appends ``--events`` ~500-byte events (the shared benchmark payloads: words from a 400-word
   vocabulary, ids, paths; 100 per stream, 1,000 per transaction) with ``EventStore.append_many``
   and times it: the ingest.
2. Builds the search index from the log (``ProjectionRunner.catch_up`` of the ``search``
   projection: ``proj_search`` + FTS5) and times it against the ingest (target: under 30 %).
3. Times queries through :func:`projections.search.search` (the index current, no catch-up): a
   word in ten events, a word in ~5 % of them, two common words, a phrase, a prefix, and a word
   within one stream; median of ``--repeat`` runs each (target: under 100 ms).

``--claude-copies N`` instead measures the realistic ingest: N copies of the usage fixture's Claude
Code transcripts through ``evstore ingest claude``, then the index build over them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import _WORDS, log, make_payloads, plan  # noqa: E402
from eventstore import migrate  # noqa: E402
from eventstore.db import make_engine  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402
from projections.engine import ProjectionRunner  # noqa: E402
from projections.search import SEARCH, search  # noqa: E402

RARE = "xylophonequark"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    n = args.events
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'events.db'}"
        eng = make_engine(url)
        migrate.upgrade(eng)
        eng.dispose()
        payloads = make_payloads(n)
        for i in range(0, n, max(n // 10, 1)):  # ten events hold a rare word
            payloads[i] = {**payloads[i], "note": f"found {RARE} here"}
        with EventStore(url) as store:
            log(f"appending {n:,} events ...")
            t0 = time.perf_counter()
            slices = list(plan(n, 100, 100))  # streams of 100 events, appended 1,000 per transaction
            batch: list[tuple[str, NewEvent, None]] = []
            for s in slices:
                batch.extend((f"run-{s.stream:06d}", NewEvent("bench.noted", payloads[i]), None) for i in range(s.lo, s.hi))
                if len(batch) >= 1000:
                    store.append_many(batch)
                    batch = []
            if batch:
                store.append_many(batch)
            ingest = time.perf_counter() - t0
            log("building the search index ...")
            with ProjectionRunner(store) as runner:
                t0 = time.perf_counter()
                runner.catch_up(SEARCH)
                build = time.perf_counter() - t0
            size = Path(tmp, "events.db").stat().st_size
            common = _WORDS[0]
            phrase = " ".join(str(payloads[7]["summary"]).split()[:2])
            queries = [("rare word (10 events)", RARE, {}), ("common word", common, {}),
                       ("two common words", f"{_WORDS[0]} {_WORDS[1]}", {}),
                       ("phrase", f'"{phrase}"', {}), ("prefix", _WORDS[4][:3] + "*", {}),
                       ("word in one stream", "coder", {"stream": f"run-{n // 200:06d}"})]  # in every payload
            print(f"{n:,} events; ingest {ingest:.1f} s ({n / ingest:,.0f} events/s); index build {build:.1f} s "
                  f"({n / build:,.0f} events/s) = {build / ingest:.0%} of ingest (target < 30 %); "
                  f"database {size / 1e6:,.0f} MB")
            print(f"{'query':28}{'hits':>6}{'median ms':>11}{'max ms':>9}")
            for label, q, kw in queries:
                times = []
                hits = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    hits = search(store, q, refresh=False, **kw)  # type: ignore[arg-type]
                    times.append((time.perf_counter() - t0) * 1000)
                print(f"{label:28}{len(hits):>6}{statistics.median(times):>11.1f}{max(times):>9.1f}")


def transcripts(copies: int) -> None:
    """The realistic ingest: Claude Code transcripts (tests/claude_usage_fixtures.py, ``copies`` times)
    through ``evstore ingest claude`` (scrubbing, blobs, subagent links), then the index over them."""
    import os
    import subprocess

    from benchmarks.bench_usage import write_copies

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_copies(work / "projects", copies)
        url = f"sqlite:///{work / 'ev.db'}"
        env = {**os.environ, "EVSTORE_URL": url, "EVSTORE_SCRUB_KEY": "bench"}
        subprocess.run([sys.executable, "-m", "eventstore", "init"], env=env, check=True, capture_output=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "eventstore", "ingest", "claude", str(work / "projects")], env=env,
                       check=True, capture_output=True)
        ingest = time.perf_counter() - t0
        with EventStore(url) as store, ProjectionRunner(store) as runner:
            t0 = time.perf_counter()
            n = runner.catch_up(SEARCH)
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            hits = search(store, "discount field", refresh=False)
            took = (time.perf_counter() - t0) * 1000
        print(f"transcripts: {n:,} events; evstore ingest claude {ingest:.1f} s; index build {build:.1f} s = "
              f"{build / ingest:.0%} of ingest; a two-word query {took:.1f} ms ({len(hits)} hits)")


if __name__ == "__main__":
    if "--claude-copies" in sys.argv:
        transcripts(int(sys.argv[sys.argv.index("--claude-copies") + 1]))
    else:
        main()
