"""Without EVSTORE_TEST_POSTGRES_URL the suite starts a throwaway PostgreSQL server, or says how to get one.

Each test runs one PostgreSQL contract test in a child pytest whose environment lacks the variable.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import conftest
import pg_server
import pytest

ROOT = Path(__file__).resolve().parent.parent
ONE_PG_TEST = "tests/test_store_contract.py::test_append_and_read_back[postgresql]"


def child_pytest(**extra_env: str) -> subprocess.CompletedProcess[str]:
    """``pytest`` as the README runs it (xdist: a controlling process and its worker), in an environment
    without the variable.

    What this test's own process inherited as an xdist worker is left out too (the child is a
    controlling process of its own).  One worker, not addopts' three: the server is started by the
    controlling process and handed to its workers, which one worker shows as well as three, and each
    worker more costs a Python start-up and a collection (1 CPU-s a test on the reference machine)."""
    left_out = ("EVSTORE_TEST_POSTGRES_URL", pg_server.BINDIR_SETTING, conftest.NO_PG_VARIABLE)
    env = {k: v for k, v in os.environ.items() if k not in left_out and not k.startswith("PYTEST_XDIST")}
    # Start-up: only the plugins the settings need, named with -p (required_plugins counts only autoloaded ones).
    env.update(extra_env, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_timeout", "-p", "xdist.plugin",
                           "-o", "required_plugins=", "-p", "no:cacheprovider", "-n", "1", "-q", ONE_PG_TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_a_url_the_suite_runs_postgresql_tests_on_a_throwaway_server() -> None:
    if pg_server.find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries on this machine (Debian: apt-get install postgresql)")
    r = child_pytest()
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    m = re.search(r"throwaway server from \S+ in (\S+) \(started in [\d.]+ s, removed at the end\)", r.stdout)
    assert m, r.stdout
    assert not Path(m.group(1)).exists()  # the data directory went with the server


def test_without_a_url_or_binaries_postgresql_tests_skip_saying_how_to_run_them(tmp_path: Path) -> None:
    r = child_pytest(**{pg_server.BINDIR_SETTING: str(tmp_path / "no-bin")})
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("EVSTORE_TEST_POSTGRES_URL=postgresql+psycopg://") == 1, r.stdout  # said once
    assert "1 PostgreSQL tests skipped: EVSTORE_TEST_POSTGRES_URL is not set and no PostgreSQL server binaries" \
        in r.stdout, r.stdout
    assert "SKIPPED [1] tests/test_store_contract.py" in r.stdout and "no-bin" in r.stdout, r.stdout
