"""Check survivors again by hand: apply each mutant's diff to a copy of the tree and run tests there.

    python tests/mutation/recheck.py --mutants DIR --file eventstore/store.py NAMES_FILE TEST [TEST ...]

``DIR`` is the folder ``mutmut run`` ran in (its ``mutmut show NAME`` gives each diff); ``NAMES_FILE``
lists mutant names, one a line.  Each mutant's changed lines are put into a fresh copy of this checkout
(tracked files as they are in the working tree, so new tests count), and ``pytest -n 0 -x TEST...`` runs
there; a line per mutant says KILLED, SURVIVED, TIMEOUT or CANNOT-APPLY.  The checkout is never changed.
The tests run once without a mutant first: if they fail there, nothing is rechecked (every mutant would
look killed).

Why by hand as well as ``mutmut run NAME``: a re-run needs mutmut's tracing pass again in a copy holding
the new tests, and mutmut runs a mutant only against the tests it saw reach the function, so a table
built once in a module-scoped fixture credits its first test only (docs/MUTATION.md).  Here the tests are
named, and every one of them runs against the mutant.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def diff_of(mutants: Path, name: str) -> list[tuple[str, str]]:
    """The mutant's changes as ``mutmut show`` prints them: (original, mutated) with the diff's context lines,
    then without them (empty: no diff).  The context tells apart two equal lines of one function (two
    ``conn.execute("ROLLBACK")``: which one the mutant changed)."""
    out = subprocess.run(["mutmut", "show", name], cwd=mutants, capture_output=True, text=True, timeout=300).stdout
    lines = [x for x in out.splitlines() if not x.startswith(("---", "+++", "@@", "#"))]
    old = [x[1:] for x in lines if x.startswith("-")]
    new = [x[1:] for x in lines if x.startswith("+")]
    if not old:
        return []
    hunk_old = [x[1:] for x in lines if x.startswith((" ", "-")) or x == ""]
    hunk_new = [x[1:] for x in lines if x.startswith((" ", "+")) or x == ""]
    return [("\n".join(hunk_old), "\n".join(hunk_new)), ("\n".join(old), "\n".join(new))]


def _whole_lines(source: str, text: str, start: int = 0) -> list[int]:
    """Where ``text`` stands in ``source`` as whole lines, from ``start``."""
    found, at = [], source.find(text, start)
    while at >= 0:
        if (at == 0 or source[at - 1] == "\n") and (at + len(text) == len(source) or source[at + len(text)] == "\n"):
            found.append(at)
        at = source.find(text, at + 1)
    return found


def _indent(text: str) -> str:
    return "\n".join("    " + x if x else x for x in text.split("\n"))


def mutate(source: str, name: str, old: str, new: str) -> str | None:
    """``source`` with the whole lines ``old`` replaced by ``new`` in the mutant's function (None: not found)."""
    if not _whole_lines(source, old):  # a method: mutmut shows it without its class's indentation
        old, new = _indent(old), _indent(new)
    function = name.split("__mutmut_")[0].replace("ǁ", ".").split(".")[-1].removeprefix("x_")
    places = _whole_lines(source, old)
    if len(places) > 1 and f"def {function}(" in source:  # the first one after the function's def
        places = _whole_lines(source, old, source.index(f"def {function}("))[:1]
    if len(places) != 1:
        return None
    return source[:places[0]] + new + source[places[0] + len(old):]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", type=Path, required=True, help="the folder mutmut ran in")
    ap.add_argument("--file", required=True, help="the mutated module, relative to the checkout")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a test run may take (then: TIMEOUT)")
    ap.add_argument("names", type=Path)
    ap.add_argument("tests", nargs="+")
    args = ap.parse_args(argv)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory(prefix="evstore-recheck-") as tmp:
        copy = Path(tmp) / "tree"
        for rel in filter(None, tracked.decode().split("\0")):
            if (ROOT / rel).is_file():
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, copy / rel)
        target = copy / args.file
        source = target.read_text(encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")])}
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-x", *args.tests]
        # A test that fails without a mutant would call every mutant KILLED: check the tests pass first.
        r = subprocess.run(pytest, cwd=copy, env=env, capture_output=True, timeout=args.timeout)
        if r.returncode:
            print(r.stdout.decode(errors="replace")[-3000:], file=sys.stderr)
            print("The named tests fail without any mutant (above); fix them first.", file=sys.stderr)
            return 1
        for name in args.names.read_text().split():
            mutated = next(filter(None, (mutate(source, name, old, new) for old, new in diff_of(args.mutants, name))), None)
            if mutated is None:
                print("CANNOT-APPLY", name, flush=True)
                continue
            target.write_text(mutated, encoding="utf-8")
            try:
                r = subprocess.run(pytest, cwd=copy, env=env, capture_output=True, timeout=args.timeout)
                print("KILLED" if r.returncode else "SURVIVED", name, flush=True)
            except subprocess.TimeoutExpired:
                print("TIMEOUT", name, flush=True)
            finally:
                target.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
