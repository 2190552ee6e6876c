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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import log  # noqa: E402

# The CLI's main through this interpreter (not the console script), so PYTHONPATH picks the code.
EVSTORE = [sys.executable, "-c", "import sys; from eventstore.cli import main; sys.argv[0] = 'evstore'; main()"]
REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
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
