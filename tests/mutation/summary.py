"""Per-module mutation score from mutmut's result files (run from the repository root after
``mutmut run``; see docs/MUTATION.md).

    python tests/mutation/summary.py            # table: generated, checked, killed, survived...
    python tests/mutation/summary.py --survivors  # also list the surviving mutants' names

Mutants named in tests/mutation/equivalent.md (in backquotes) count as equivalent: they are left
out of the score's denominator.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# mutmut's exit codes (mutmut.stats.status_by_exit_code)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 37: "type check", None: "not checked"}


def equivalent() -> set[str]:
    path = ROOT / "tests" / "mutation" / "equivalent.md"
    if not path.is_file():
        return set()
    return set(re.findall(r"`((?:eventstore|projections)\.[^`\s]+__mutmut_\d+)`", path.read_text(encoding="utf-8")))


def main(argv: list[str]) -> int:
    metas = sorted((ROOT / "mutants").glob("**/*.py.meta"))
    if not metas:
        print("No mutmut results under mutants/; run `mutmut run` first (docs/MUTATION.md).", file=sys.stderr)
        return 1
    eq = equivalent()
    print(f"{'module':<28}{'generated':>10}{'checked':>9}{'killed':>8}{'timeout':>8}{'survived':>9}"
          f"{'no tests':>9}{'equiv.':>7}{'score':>8}")
    survivors: list[str] = []
    for meta in metas:
        module = str(meta.relative_to(ROOT / "mutants"))[: -len(".py.meta")].replace("/", ".")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        c = Counter(STATUS.get(v, "suspicious") for v in codes.values())
        equiv = [k for k, v in codes.items() if k in eq and STATUS.get(v) != "killed"]
        alive = [k for k, v in codes.items() if STATUS.get(v) in ("survived", "no tests") and k not in eq]
        survivors += alive
        checked = len(codes) - c["not checked"]
        dead = c["killed"] + c["timeout"] + c["type check"]
        denom = checked - len(equiv)
        score = f"{100 * dead / denom:.1f}%" if denom else "-"
        print(f"{module:<28}{len(codes):>10}{checked:>9}{c['killed']:>8}{c['timeout']:>8}"
              f"{c['survived']:>9}{c['no tests']:>9}{len(equiv):>7}{score:>8}")
    if "--survivors" in argv:
        print("\n".join(["", "survivors (not listed as equivalent):", *survivors]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
