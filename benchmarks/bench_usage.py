"""``evstore usage`` beside ccusage (v17, the most used cost tool for Claude Code) on the same transcripts.

Both read the same ``projects`` folder: the transcripts of ``tests/claude_usage_fixtures.py``
(streamed messages whose output tokens grow line by line, a resumed session repeating two messages,
subagents in all three layouts, a model without a price), copied ``--copies`` times under new
session, message and request ids so the timing means something.  ccusage reads it through
``CLAUDE_CONFIG_DIR`` and ``--offline`` (its bundled prices, no network); evstore ingests it into
a fresh SQLite store and runs ``evstore usage --json``.

Printed: the totals side by side (input, output, cache write, cache read, cost) with evstore/ccusage
ratios, and the wall time of each (evstore: ingest, then usage).  Expected (docs/metrics.md): input
and cache tokens equal; output higher in evstore (it takes each message's last line, ccusage its
first); ccusage prices an unknown model at 0, evstore says "no price".

    npm install --prefix /tmp/ccusage ccusage@17          # once, outside the repository
    python benchmarks/bench_usage.py --ccusage /tmp/ccusage/node_modules/.bin/ccusage
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import claude_usage_fixtures as F  # noqa: E402

_IDS = re.compile(rb'(11111111-aaaa-4bbb-8ccc-0000000000\d\d|msg_[a-z0-9]+|req_[a-z0-9]+|0aa11bb2|0cc33dd4)')


def write_copies(root: Path, copies: int) -> None:
    """The fixture's transcripts ``copies`` times, every id made unique per copy."""
    src = root.parent / "fixture"
    files = F.write(src)
    for i in range(copies):
        def rename(m: re.Match[bytes], i: int = i) -> bytes:
            s = m.group(0)
            if s.startswith(b"11111111"):
                return s[:-6] + f"{i:04d}".encode() + s[-2:]
            if s in (F.A_SIB.encode(), F.A_SUB.encode()):
                return s[:4] + f"{i:04d}".encode()
            return s + f"_{i}".encode()

        for path in files.values():
            rel = path.relative_to(src)
            out = root / Path(_IDS.sub(rename, str(rel).encode()).decode())
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(_IDS.sub(rename, path.read_bytes()))


def run_evstore(projects: Path, work: Path) -> tuple[dict[str, float], float, float]:
    env = {**os.environ, "EVSTORE_URL": f"sqlite:///{work / 'ev.db'}", "EVSTORE_SCRUB_KEY": "bench"}
    env.pop("EVSTORE_PRICES", None)
    evstore = [sys.executable, "-m", "eventstore"]
    subprocess.run([*evstore, "init"], env=env, check=True, capture_output=True)
    t0 = time.perf_counter()
    subprocess.run([*evstore, "ingest", "claude", str(projects)], env=env, check=True, capture_output=True)
    t1 = time.perf_counter()
    out = subprocess.run([*evstore, "usage", "--json"], env=env, check=True, capture_output=True, text=True)
    t2 = time.perf_counter()
    total = json.loads(out.stdout)["total"]
    return ({"input": total["input_tokens"], "output": total["output_tokens"],
             "cache_write": total["cache_creation_tokens"], "cache_read": total["cache_read_tokens"],
             "cost": total["cost_usd"] or 0.0, "messages": total["api_messages"]}, t1 - t0, t2 - t1)


def run_ccusage(ccusage: str, config: Path) -> tuple[dict[str, float], float]:
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    t0 = time.perf_counter()
    out = subprocess.run([ccusage, "daily", "--json", "--offline"], env=env, check=True, capture_output=True,
                         text=True)
    took = time.perf_counter() - t0
    totals = json.loads(out.stdout)["totals"]
    return ({"input": totals["inputTokens"], "output": totals["outputTokens"],
             "cache_write": totals["cacheCreationTokens"], "cache_read": totals["cacheReadTokens"],
             "cost": totals["totalCost"]}, took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ccusage", default=os.environ.get("EVSTORE_CCUSAGE") or shutil.which("ccusage"),
                    help="the ccusage executable (default: $EVSTORE_CCUSAGE or ccusage on PATH)")
    ap.add_argument("--copies", type=int, default=100)
    args = ap.parse_args()
    if not args.ccusage:
        sys.exit("Error: ccusage not found — `npm install --prefix /tmp/ccusage ccusage@17` and pass --ccusage "
                 "/tmp/ccusage/node_modules/.bin/ccusage")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        projects = work / "config" / "projects"
        write_copies(projects, args.copies)
        ours, ingest_s, usage_s = run_evstore(projects, work)
        theirs, cc_s = run_ccusage(args.ccusage, work / "config")
    print(f"{args.copies} copies of the fixture transcripts: {ours['messages']:,} API messages")
    print(f"{'':12}{'evstore':>14}{'ccusage':>14}{'ratio':>8}")
    for k in ("input", "output", "cache_write", "cache_read", "cost"):
        a, b = ours[k], theirs[k]
        ratio = f"{a / b:.3f}" if b else "-"
        fmt = (lambda v: f"{v:,.4f}") if k == "cost" else (lambda v: f"{int(v):,}")
        print(f"{k:12}{fmt(a):>14}{fmt(b):>14}{ratio:>8}")
    print(f"time: evstore ingest {ingest_s:.2f} s + usage {usage_s:.2f} s; ccusage {cc_s:.2f} s")


if __name__ == "__main__":
    main()
