"""benchmarks/bench_verify.py's limit computes exactly what verify checks: each event's stored hash,
from the salted digests of its data and meta (a schema change that adds a column, or a new digest
rule, must change the limit too, or its ratio measures something else)."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import migrated

from eventstore.store import EventStore, NewEvent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_verify  # noqa: E402


def test_the_limit_recomputes_every_stored_event_hash(store_url: str) -> None:
    url = migrated(store_url)
    with EventStore(url) as store:
        for s in range(3):
            store.append(f"S-{s}", [NewEvent("demo.note", {"i": i, "s": s}) for i in range(4)])
    _wall, _cpu, n = bench_verify.limit(url)
    assert n == 12
