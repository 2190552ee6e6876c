"""Claude Code stores: what `evstore metrics` costs as a store of Claude Code transcripts grows.

    python benchmarks/bench_claude_store.py                        # 2 and 21 copies: ~94,000 and ~986,000 lines
    python benchmarks/bench_claude_store.py --copies 1 --mb 50     # quick

The transcripts are ``bench_ingest.py``'s generated ``~/.claude/projects`` folder (``--mb`` of sessions and
subagent files, seeded), copied ``--copies`` times under new session ids (the id in the file names and in the
lines), and ingested with ``evstore ingest claude``.  The demo store of ``bench_growth.py`` holds no Claude
Code transcript, and a team's store is mostly transcripts: here the Claude views and sections carry the report.

Each row is one whole ``evstore`` process (wall and CPU seconds of that child, its peak RSS), as in
``bench_growth.py``; "after one new line" appends a transcript's last line to it again, ingests that file
(not timed), and runs `metrics`: the median of three, each on another transcript.  The ratio is each size's
figure over the size before it.  A benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find its neighbours

from bench_growth import child  # noqa: E402
from bench_ingest import write_claude_projects  # noqa: E402

_SESSION = re.compile(r"^[0-9a-f]{8}-")


def copy_projects(source: Path, target: Path, copies: int) -> None:
    """``copies`` copies of the projects folder ``source`` in ``target``, copy ``k``'s session ids starting with
    ``k`` in two hex digits instead of their own first two (in the file and folder names and in the lines)."""
    for k in range(copies):
        prefix = f"{k + 1:02x}"
        for path in sorted(source.rglob("*.jsonl")):
            rel = path.relative_to(source)
            session = next((p.removesuffix(".jsonl") for p in rel.parts if _SESSION.match(p)), None)
            parts = [prefix + p[2:] if _SESSION.match(p) else p for p in rel.parts]
            out = target.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            out.write_bytes(data.replace(session.encode(), (prefix + session[2:]).encode()) if session else data)


def measure(url: str, projects: Path, directory: str) -> dict[str, tuple[float, float, float]]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = {"`ingest claude` (every transcript)": child(url, ["ingest", "claude", str(projects)], env)}
    metrics = ["metrics", "--analytics-dir", directory]
    out["first `metrics` (builds the facts)"] = child(url, metrics, env)
    out["later `metrics` (unchanged store)"] = child(url, metrics, env)
    after = []
    for transcript in sorted(projects.rglob("*.jsonl"))[:3]:
        lines = transcript.read_bytes().splitlines(keepends=True)
        with transcript.open("ab") as fh:
            fh.write(lines[-1] if lines[-1].endswith(b"\n") else b"\n" + lines[-1])
        child(url, ["ingest", "claude", str(transcript)], env)
        after.append(child(url, metrics, env))
    out["`metrics` after one new transcript line (median of 3)"] = tuple(  # type: ignore[assignment]
        statistics.median(x[i] for x in after) for i in range(3))
    for label, (wall, cpu, rss) in out.items():
        print(f"  {label}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, nargs="+", default=[2, 21], help="copies of the generated folder a store")
    ap.add_argument("--mb", type=float, default=300, help="MB of generated transcripts (one copy)")
    ap.add_argument("--dir", default=None, help="a new folder for the transcripts and stores, kept there to probe "
                                                "(default: a temporary folder, removed at the end)")
    opts = ap.parse_args()
    results: dict[int, dict[str, tuple[float, float, float]]] = {}
    if opts.dir:
        Path(opts.dir).mkdir(parents=True)  # new: a store ingested again would hold the transcripts already
    with contextlib.nullcontext(opts.dir) if opts.dir else tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "generated"
        size, files = write_claude_projects(source, target=int(opts.mb * 1e6))
        print(f"generated {size / 1e6:.0f} MB in {files} transcripts", file=sys.stderr)
        for copies in opts.copies:
            projects = Path(tmp) / f"projects-{copies}"
            copy_projects(source, projects, copies)
            print(f"{copies} copies", file=sys.stderr)
            results[copies] = measure(f"sqlite:///{tmp}/claude-{copies}.db", projects, f"{tmp}/analytics-{copies}")
    sizes = sorted(results)
    print("\nsqlite: wall s, CPU s of the process, peak MB; (wall ratio / CPU ratio to the size before)")
    print("| | " + " | ".join(f"{c} copies" for c in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for label in results[sizes[0]]:
        cells = []
        for i, c in enumerate(sizes):
            wall, cpu, rss = results[c][label]
            cell = f"{wall:.2f} s, {cpu:.2f} s CPU, {rss:.0f} MB"
            if i:
                w0, c0, _ = results[sizes[i - 1]][label]
                cell += f" ({wall / w0:.1f}x / {cpu / c0:.1f}x)"
            cells.append(cell)
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
