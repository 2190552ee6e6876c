"""Simulated runs ingested into a store, with their raw snapshot documents kept for the tests
that recompute every metric independently (tests/test_metrics.py, tests/test_analytics.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore.dialects import get_dialect
from eventstore.dialects.base import Snapshot
from eventstore.ingest import Ingestor
from eventstore.store import EventStore

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class SimulatedPortfolio:
    """stream id -> (dialect, snapshots) for every run written to the store."""

    runs: dict[str, tuple[str, list[Snapshot]]] = field(default_factory=dict)

    def of(self, dialect: str) -> dict[str, list[Snapshot]]:
        return {sid: snaps for sid, (d, snaps) in self.runs.items() if d == dialect}

    def docs(self, dialect: str) -> dict[str, list[Any]]:
        return {sid: [s.doc for s in snaps if s.doc is not None] for sid, snaps in self.of(dialect).items()}


def simulate_into(store: EventStore, counts: dict[str, int], *, seed: int = 11,
                  transform: Callable[[list[Snapshot], int], list[Snapshot]] | None = None) -> SimulatedPortfolio:
    """Simulate ``counts[dialect]`` runs of each dialect and ingest them (the public path)."""
    out = SimulatedPortfolio()
    rng = random.Random(seed)
    n = 0
    for name, count in counts.items():
        dialect = get_dialect(name)
        for _ in range(count):
            n += 1
            run_rng = random.Random(rng.getrandbits(64))
            snaps = list(dialect.simulate(run_rng, run_id=f"T-{n:04d}", start=START + timedelta(hours=3 * n)))
            if transform is not None and name == "mapipe":
                snaps = transform(snaps, n)
            ing = Ingestor(store, dialect)
            stream = ""
            for snap in snaps:
                stream = ing.ingest(snap).stream
            out.runs[stream] = (name, snaps)
    return out
