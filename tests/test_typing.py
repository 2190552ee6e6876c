"""Static checks as tests: mypy strict on the library (STYLE.md #9) and the ruff lint rules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def test_mypy_strict_on_library() -> None:
    if shutil.which("mypy") is None and subprocess.run([sys.executable, "-m", "mypy", "--version"],
                                                       capture_output=True).returncode != 0:
        pytest.skip("mypy is not installed (it is in the test extra: pip install -e '.[test]')")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", _mypy_cache(), "eventstore", "projections"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _mypy_cache() -> str:
    """mypy's incremental cache, kept outside the checkout: a fresh clone's first run then reuses what an
    earlier run on this machine analysed (the check took 12.8 s of CPU cold and under 2 s warm here).
    mypy revalidates every cached module against its source, so a stale entry is re-checked, never
    trusted; EVSTORE_MYPY_CACHE_DIR overrides the place."""
    default = Path(tempfile.gettempdir()) / f"evstore-mypy-cache-{os.getuid()}"
    return os.environ.get("EVSTORE_MYPY_CACHE_DIR", str(default))


def test_ruff_lint_clean() -> None:
    """The lint rules in pyproject.toml ([tool.ruff]) hold on the whole tree."""
    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
