"""``evstore demo``: a realistic portfolio of simulated runs, written through the public API.

Each run is simulated by its dialect (``Dialect.simulate``) and ingested with the same
:class:`~eventstore.ingest.Ingestor` that ``evstore ingest`` uses (observe, lens-law check,
findings in meta), so the demo store looks exactly like one fed by real orchestrators.  The
single-file orchestrators' snapshots are ingested as the bytes they write to their state file
(``Dialect.state_file_names``), so ``evstore replay --raw`` works on demo runs as on real ones.

Determinism: run number ``n`` draws everything (dialect, start time, the simulation, event
ids) from ``random.Random(f"{seed}:{n}")``; a fresh store and the same seed give the same runs.
Run numbers continue after the highest ``demo-NNNNN`` already in the store, so a second demo on
the same store adds fresh runs with fresh ids.

Speed (``--runs 10000``): simulation and observation run in worker processes; the parent only
appends, with :meth:`EventStore.append_many` (one transaction per chunk of runs and dialect)
and the runs index inline.  ``expected_version`` 0 on each stream's first event guarantees a
clash can never merge two runs.

    >>> summary = run_demo(store, runs=40, seed=7)
    >>> summary.events, summary.by_dialect
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import StateVersion
from eventstore.errors import EvstoreError
from eventstore.ingest import Ingestor, render
from eventstore.store import UNKNOWN, EventStore, NewEvent

#: The first demo run starts here; later runs follow every ~40 minutes (deterministic).
EPOCH = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
_ID = re.compile(r"demo-(\d+)$", re.IGNORECASE)

#: How a single-file orchestrator (a dialect with ``state_file_names``) writes its state file: the
#: demo ingests these bytes, 2-space JSON and a final newline as ``JSON.stringify(doc, null, 2)``
#: writes it.  Dialects without state file names (task folders, turn transcripts) are ingested as
#: simulated: ``replay --restore`` and the document are their outputs, not one file's bytes.
STATE_FORMAT = {"renderer": "msgspec", "indent": 2, "newline": "\n"}

Item = tuple[str, NewEvent, "int | None"]


@dataclass
class SimulatedRun:
    number: int
    dialect: str
    stream_id: str
    task_id: str | None
    status: str | None
    items: list[Item]


@dataclass
class DemoSummary:
    runs: int = 0
    events: int = 0
    seconds: float = 0.0
    first_run: int = 0
    by_dialect: Counter[str] = field(default_factory=Counter)
    by_status: Counter[tuple[str, str]] = field(default_factory=Counter)
    example_task: str | None = None
    sessions: int = 0  # agent sessions that wrote some runs' state files

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "events": self.events, "seconds": round(self.seconds, 3),
                "events_per_second": round(self.events_per_second), "first_run": self.first_run,
                "by_dialect": dict(sorted(self.by_dialect.items())),
                "by_status": [{"dialect": d, "status": s, "runs": n} for (d, s), n in sorted(self.by_status.items())],
                "example_task": self.example_task, "sessions": self.sessions}


class _Buffer:
    """Stands in for the store inside :class:`Ingestor`: collects appends instead of writing.

    Demo streams are new by construction, so ``stream_info`` is None and versions are counted
    here; the parent appends the items with the same expected versions.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.items: list[Item] = []

    def stream_info(self, stream_id: str) -> None:
        return None

    def append(self, stream_id: str, events: Sequence[NewEvent], *, expected_version: int,
               dialect: str | None = None) -> Any:
        for i, e in enumerate(events):
            e.event_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))  # deterministic ids
            # Not the folded document: it would cross the process pool pickled, which costs more
            # (measured: 300 runs, +15 % CPU) than the parent's runs index folding the events.
            e.document = UNKNOWN
            self.items.append((stream_id, e, expected_version if i == 0 else None))
        return _Appended(expected_version + len(events))


@dataclass
class _Appended:
    version: int


def demo_dialects() -> list[str]:
    """The registered dialects with a ``demo_weight``, heaviest first (then by name): each dialect
    declares its own weight, so a plugin with a simulator joins the demo without a line here."""
    weighted = [name for name in available() if get_dialect(name).demo_weight > 0]
    return sorted(weighted, key=lambda name: (-get_dialect(name).demo_weight, name))


def pick_dialects(names: Sequence[str] | None = None) -> list[str]:
    have = set(available())
    chosen = [d for d in (names or demo_dialects()) if d in have]
    if not chosen:
        raise EvstoreError("No demo dialect is available in this build: no registered dialect declares a "
                           "demo_weight.")
    return chosen


def simulate_run(seed: int, number: int, dialects: Sequence[str]) -> SimulatedRun:
    """Simulate and ingest (into a buffer) run ``number``: deterministic for ``seed``."""
    rng = random.Random(f"{seed}:{number}")
    name = rng.choices(list(dialects), weights=[get_dialect(d).demo_weight or 1 for d in dialects])[0]
    dialect = get_dialect(name)
    start = EPOCH + timedelta(minutes=40 * number + rng.randint(0, 30), seconds=rng.randint(0, 59))
    buf = _Buffer(random.Random(rng.getrandbits(64)))
    ing = Ingestor(buf, dialect)  # type: ignore[arg-type]  # duck-typed store, see _Buffer
    stream_id, doc = "", None
    state_file = dialect.state_file_names[0] if dialect.state_file_names else None
    for snap in dialect.simulate(rng, run_id=f"demo-{number:05d}", start=start):
        if state_file is not None and snap.doc is not None and snap.raw is None:
            # The bytes the orchestrator writes to its state file, ingested as `evstore ingest`
            # ingests a file: `replay --raw` gives them back.
            snap.raw = render(snap.doc, STATE_FORMAT)
            snap.source = {**snap.source, "file": f"demo-{number:05d}/{state_file}"}
        result = ing.ingest(snap)
        stream_id = result.stream
        if snap.doc is not None:
            doc = snap.doc
    info = dialect.describe(doc) if doc is not None else None
    return SimulatedRun(number, name, stream_id, (info.task_id if info else None) or stream_id,
                        info.status if info else None, buf.items)


def die_with_parent(parent: int, poll: float = 0.5) -> None:
    """Pool-worker initializer: never outlive the demo process.

    A worker blocks on the pool's call queue, whose pipe every worker also holds open, so a
    parent killed with SIGKILL would leave it waiting forever with the database files open.  On
    Linux the kernel kills the worker with its parent (``PR_SET_PDEATHSIG``; the standard library
    has no binding, so ``prctl`` is called through ctypes).  Everywhere, a daemon thread also
    watches the parent pid and ends the worker when the worker is re-parented.
    """
    from projections.prefork import kill_with_parent

    kill_with_parent()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os._exit(1)

    threading.Thread(target=watch, name="evstore-demo-parent-watch", daemon=True).start()


def _simulate_chunk(args: tuple[int, list[int], list[str]]) -> list[SimulatedRun]:
    seed, numbers, dialects = args
    return [simulate_run(seed, n, dialects) for n in numbers]


def next_run_number(store: EventStore) -> int:
    """1 + the highest demo run number in the store (so re-runs never clash)."""
    high = 0
    for stream in store.list_streams():
        m = _ID.search(stream.stream_id)
        if m:
            high = max(high, int(m.group(1)))
    return high + 1


def run_demo(store: EventStore, *, runs: int = 40, seed: int = 0, dialects: Sequence[str] | None = None,
             workers: int | None = None, chunk_runs: int = 25,
             progress: Callable[[int, int], None] | None = None, sessions: int = 0) -> DemoSummary:
    """Simulate ``runs`` runs into ``store``; ``progress(done, total)`` after each chunk.  With
    ``sessions``, the state files of that many single-file runs are written by agent sessions
    (:meth:`~eventstore.dialects.base.Dialect.simulate_writers` of each dialect of agent sessions),
    so the runs' timelines, usage and search show the conversations that wrote them."""
    if runs < 1:
        raise EvstoreError(f"--runs must be at least 1, got {runs}.")
    names = pick_dialects(dialects)
    started = time.perf_counter()
    first = next_run_number(store)
    summary = DemoSummary(first_run=first)
    numbers = list(range(first, first + runs))
    chunks = [(seed, numbers[i:i + chunk_runs], names) for i in range(0, runs, chunk_runs)]
    if workers is None:
        workers = min(os.cpu_count() or 1, 8) if runs >= 200 else 1
    done = 0
    example_is_first = [False]

    written: list[SimulatedRun] = []  # single-file runs, for ``sessions``

    def write(batch: list[SimulatedRun]) -> None:
        nonlocal done
        written.extend(r for r in batch if get_dialect(r.dialect).state_file_names)
        by_dialect: dict[str, list[Item]] = {}
        for run in batch:
            by_dialect.setdefault(run.dialect, []).extend(run.items)
            summary.by_dialect[run.dialect] += 1
            summary.by_status[(run.dialect, run.status or "-")] += 1
            summary.events += len(run.items)
            # The example for `evstore replay` is the first run of the richest dialect present.
            if summary.example_task is None or (run.dialect == names[0] and not example_is_first[0]):
                summary.example_task = run.task_id
                example_is_first[0] = run.dialect == names[0]
        for name, items in by_dialect.items():
            store.append_many(items, dialect=name, chunk=5000)
        done += len(batch)
        summary.runs = done
        if progress:
            progress(done, runs)

    if workers <= 1:
        for c in chunks:
            write(_simulate_chunk(c))
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            for batch in pool.map(_simulate_chunk, chunks):
                write(batch)
    if sessions > 0:
        summary.sessions = add_sessions(store, seed, written[:sessions])
    summary.seconds = time.perf_counter() - started
    return summary


def add_sessions(store: EventStore, seed: int, runs: list[SimulatedRun]) -> int:
    """Record, for each of ``runs``, the agent sessions that wrote its state versions (each dialect
    that simulates writers); deterministic for ``seed`` and the runs."""
    from projections import writers
    from projections.replay import replay_raw

    writers_of = [get_dialect(n) for n in available() if get_dialect(n).file_write_types]
    made = 0
    for run in runs:
        versions = []
        for v in writers.state_versions(store, run.stream_id):
            at = datetime.fromisoformat(str(v["at"]).replace("Z", "+00:00")) if v["at"] else None
            if at is None or not v["file"]:
                continue
            versions.append(StateVersion(run.stream_id, v["version"], at, str(v["file"]),
                                         replay_raw(store, run.stream_id, v["version"])))
        for d in writers_of:
            made += d.simulate_writers(store, random.Random(f"{seed}:sessions:{run.number}:{d.name}"), versions)
    return made


__all__ = ["DemoSummary", "SimulatedRun", "demo_dialects", "next_run_number", "pick_dialects", "run_demo",
           "simulate_run"]
