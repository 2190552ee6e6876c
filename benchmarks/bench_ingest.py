"""Whole-process ``evstore ingest`` of real histories, as a user runs it.

    python benchmarks/bench_ingest.py              # median of 3 per history
    python benchmarks/bench_ingest.py --repeat 5

Histories: every folder of ``tests/data/real`` and a generated task list shaped like the one
issue 12 cites (124 versions of a JSON task list growing from 0.1 to 0.7 MB, 46.7 MB in all,
``json.dumps(indent=2)``, a few tasks changed and eleven added per version; seeded, so every run
writes the same bytes).  Each run ingests one history into a fresh SQLite store
(``evstore --url sqlite:///... ingest generic --stream h FOLDER``) and reports wall time and the
CPU time of the process (user + system), which moves less on a shared machine than wall time.  "refused": evstore would not ingest the
history (before unreadable versions were recorded, a history with one was refused whole).

Another checkout's code can be measured with ``PYTHONPATH=/that/checkout python benchmarks/bench_ingest.py``.

``--simulated RUNS`` measures ingest itself, in one process, for every dialect with a simulator:
RUNS simulated runs each (seeds 1..RUNS, every version rendered with ``json.dumps(indent=2)`` as
an orchestrator writes it), each run one ``Ingestor.ingest_all`` into a fresh SQLite store that
keeps the runs index inline (as the CLI's does).  It reports events per second of wall and of
CPU time (medians of ``--repeat`` passes; CPU time moves less on a shared machine) and, from one more pass, the calls per event of the dialect's ``apply`` and
``evolve`` and of ``encode_event``/``decode_event``, counted around the real functions (what
issue 13 item 6 budgets: at most one apply and one encode per event, no decode)::

    python benchmarks/bench_ingest.py --simulated 20
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log  # noqa: E402

# The CLI's main through this interpreter (not the console script), so PYTHONPATH picks the code.
EVSTORE = [sys.executable, "-c", "import sys; from eventstore.cli import main; sys.argv[0] = 'evstore'; main()"]
REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"
START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def write_task_list_history(folder: Path, versions: int = 124, seed: int = 12) -> int:
    """The generated history (see the module docstring); returns its size in bytes."""
    rng = random.Random(seed)

    def task(i: int) -> dict[str, object]:
        return {"id": f"T-{i:05d}", "title": f"Task {i} " + "x" * rng.randint(20, 80),
                "status": rng.choice(["todo", "doing", "done"]), "estimate": rng.random() * 10,
                "points": rng.randint(1, 13), "tags": [rng.choice("abcdefgh") for _ in range(3)],
                "notes": "lorem ipsum " * rng.randint(5, 20)}

    tasks = [task(i) for i in range(200)]
    total = 0
    for v in range(1, versions + 1):
        for _ in range(rng.randint(1, 20)):
            t = rng.choice(tasks)
            t["status"], t["estimate"] = rng.choice(["todo", "doing", "done"]), rng.random() * 10
        tasks.extend(task(len(tasks)) for _ in range(11))
        raw = (json.dumps({"project": "big", "version": v, "tasks": tasks}, indent=2) + "\n").encode()
        (folder / f"{v:03d}-tasks.json").write_bytes(raw)
        total += len(raw)
    return total


def run_once(folder: Path, work: Path) -> tuple[float, float] | None:
    """(wall, cpu) seconds of one ingest, None if evstore refused the history."""
    url = f"sqlite:///{work}/bench.db"
    for leftover in work.glob("bench.db*"):
        leftover.unlink()
    subprocess.run([*EVSTORE, "--url", url, "init"], check=True, capture_output=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([*EVSTORE, "--url", url, "ingest", "generic", "--stream", "h", str(folder)],
                          capture_output=True)
    if done.returncode != 0:
        return None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def simulated_runs(name: str, runs: int) -> list[list[Any]]:
    """``runs`` simulated runs of dialect ``name``, their versions as bytes parsed back."""
    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import parse_json_document

    d = get_dialect(name)
    out = []
    for seed in range(1, runs + 1):
        run = []
        for snap in d.simulate(random.Random(seed), run_id=f"{name.upper()}-{seed}", start=START):
            if snap.doc is not None:
                snap.raw = json.dumps(snap.doc, indent=2).encode()
                snap.doc = parse_json_document(snap.raw, "simulated")
            run.append(snap)
        out.append(run)
    return out


def ingest_runs(name: str, runs: list[list[Any]], work: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, events) to ingest ``runs`` (one ingest_all each) into a fresh
    SQLite store."""
    import copy

    from eventstore import migrate
    from eventstore.dialects import get_dialect
    from eventstore.ingest import Ingestor
    from eventstore.store import EventStore
    from projections.runs import IndexedEventStore

    for leftover in work.glob("sim.db*"):
        leftover.unlink()
    url = f"sqlite:///{work}/sim.db"
    with EventStore(url, check_schema=False) as fresh:
        migrate.upgrade(fresh.engine)
    runs = copy.deepcopy(runs)  # ingest marks snapshots (their stream); each pass gets its own
    d = get_dialect(name)
    with IndexedEventStore(url) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        events = sum(r.events for run in runs for r in Ingestor(store, d).ingest_all(run))
        return time.perf_counter() - t0, time.process_time() - c0, events


def count_calls(name: str) -> tuple[dict[str, int], Callable[[], None]]:
    """Counters around the dialect's apply/evolve and encode_event/decode_event wherever evstore's
    modules hold them; returns the counts and a function that puts the originals back."""
    from eventstore import events as events_module
    from eventstore.dialects import get_dialect

    counts = dict.fromkeys(("apply", "evolve", "encode_event", "decode_event"), 0)
    undo: list[tuple[Any, str, Any, bool]] = []

    def patch(owner: Any, attr: str, fn: Any, key: str) -> None:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return fn(*args, **kwargs)
        undo.append((owner, attr, owner.__dict__.get(attr), attr in owner.__dict__))
        setattr(owner, attr, wrapper)

    cls = type(get_dialect(name))
    for attr in ("apply", "evolve"):
        patch(cls, attr, getattr(cls, attr), attr)
    for attr in ("encode_event", "decode_event"):
        fn = getattr(events_module, attr)
        for module in [m for m in list(sys.modules.values())
                       if getattr(m, "__name__", "").partition(".")[0] in ("eventstore", "projections")]:
            if getattr(module, attr, None) is fn:
                patch(module, attr, fn, attr)

    def restore() -> None:
        for owner, attr, old, had in reversed(undo):
            if had:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
    return counts, restore


def simulated(runs: int, repeat: int) -> None:
    from eventstore.dialects import available, get_dialect
    from eventstore.dialects.base import Dialect

    names = [n for n in available() if type(get_dialect(n)).simulate is not Dialect.simulate]
    print(f"{'dialect':<12} {'runs':>5} {'versions':>8} {'events':>7} {'events/wall s':>14} {'events/CPU s':>13} "
          f"{'apply/ev':>9} {'evolve/ev':>9} {'encode/ev':>9} {'decode/ev':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in names:
            history = simulated_runs(name, runs)
            versions = sum(1 for run in history for s in run if s.doc is not None)
            timings = [ingest_runs(name, history, work) for _ in range(repeat)]
            events = timings[0][2]
            counts, restore = count_calls(name)
            try:
                ingest_runs(name, history, work)
            finally:
                restore()
            wall = statistics.median(events / t for t, _, _ in timings)
            cpu = statistics.median(events / c for _, c, _ in timings)
            per = [counts[k] / events for k in ("apply", "evolve", "encode_event", "decode_event")]
            print(f"{name:<12} {runs:>5} {versions:>8} {events:>7} {wall:>14,.0f} {cpu:>13,.0f} "
                  + " ".join(f"{x:>9.2f}" for x in per))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--simulated", type=int, default=0, metavar="RUNS",
                    help="Measure in-process ingest of RUNS simulated runs per dialect instead (see above).")
    args = ap.parse_args()
    if args.simulated:
        simulated(args.simulated, args.repeat)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        generated = work / "task-list-124"
        generated.mkdir()
        log(f"generated {write_task_list_history(generated) / 1e6:.1f} MB")
        histories = [generated, *sorted(p for p in REAL.iterdir() if p.is_dir())]
        print(f"{'history':<32} {'versions':>8} {'MB':>6} {'wall s (median)':>16} {'cpu s (median)':>15}")
        for folder in histories:
            files = [p for p in folder.iterdir() if p.is_file()]
            runs = [r for r in (run_once(folder, work) for _ in range(args.repeat)) if r is not None]
            head = f"{folder.name:<32} {len(files):>8} {sum(p.stat().st_size for p in files) / 1e6:>6.1f} "
            if not runs:
                print(head + f"{'refused':>16} {'-':>15}")
                continue
            print(head + f"{statistics.median(r[0] for r in runs):>16.2f} {statistics.median(r[1] for r in runs):>15.2f}")


if __name__ == "__main__":
    main()
