"""The refresh of the analytics tables before a report, a query or a usage count runs in a forked child
where the process may fork (``files.refresh_apart``): the same tables and report as a refresh in the process, its errors told the
same way, a child that dies without a result named, and the parent never imports pyarrow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore.cli import register
from eventstore.errors import EvstoreError
from eventstore.store import EventStore
from projections.analytics import files


def _cli(url: str, *args: str, env: dict[str, str] | None = None) -> Any:
    r = CliRunner().invoke(register(), ["--url", url, *args], env=env)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture
def grown(store_url: str, tmp_path: Path) -> tuple[str, Path]:
    """A demo store whose facts were built, then new runs appended (a refresh has events to apply)."""
    directory = tmp_path / "analytics"
    _cli(store_url, "demo", "--runs", "4", "--seed", "3")
    _cli(store_url, "metrics", "--analytics-dir", str(directory), "--format", "json",
         env={"EVSTORE_ANALYTICS_FORK": "0"})
    _cli(store_url, "demo", "--runs", "3", "--seed", "4")
    return store_url, directory


def test_a_refresh_apart_writes_what_a_refresh_here_writes(grown: tuple[str, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url, directory = grown
    here = tmp_path / "here"
    shutil.copytree(directory, here)
    forks: list[int] = []
    real_fork = os.fork

    def counting_fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counting_fork)
    assert threading.active_count() == 1  # else it would not fork (and this test would say nothing)
    with EventStore(url) as store:
        apart = files.refresh_apart(store, directory)
        monkeypatch.setenv("EVSTORE_ANALYTICS_FORK", "0")
        local = files.refresh_apart(store, here)
        again = files.refresh_apart(store, directory)  # caught up: no child, nothing applied
    assert len(forks) == 1
    assert apart.events == local.events > 0 and (apart.position, apart.rows) == (local.position, local.rows)
    assert again.events == 0 and again.position == apart.position
    reports = {}
    for name, where in (("apart", directory), ("here", here)):
        reports[name] = _cli(url, "metrics", "--analytics-dir", str(where), "--format", "json", "--no-refresh").stdout
    assert reports["apart"] == reports["here"]


def test_an_error_in_the_child_is_told_as_the_refresh_tells_it(grown: tuple[str, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url, directory = grown

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise EvstoreError("The analytics tables cannot be written here (a test).")

    monkeypatch.setattr(files, "_refresh", failing)
    with EventStore(url) as store:
        with pytest.raises(EvstoreError, match=r"^The analytics tables cannot be written here \(a test\)\.$"):
            files.refresh_apart(store, directory)
        monkeypatch.setattr(files, "_refresh", lambda *a, **k: 1 / 0)
        with pytest.raises(EvstoreError, match="ZeroDivisionError"):
            files.refresh_apart(store, directory)
        monkeypatch.setattr(files, "_refresh", lambda *a, **k: os._exit(3))  # dies without a word
        with pytest.raises(EvstoreError, match=r"ended without a result \(exit status 3\).*run the command again"):
            files.refresh_apart(store, directory)
    r = CliRunner().invoke(register(), ["--url", url, "metrics", "--analytics-dir", str(directory)])
    assert r.exit_code != 0 and "exit status 3" in r.output  # said, not a traceback


@pytest.mark.parametrize("command", [["metrics", "--format", "json"], ["usage", "--json"],
                                     ["query", "SELECT count(*) AS runs FROM runs", "--json"]])
def test_a_command_after_new_events_never_imports_pyarrow(grown: tuple[str, Path], command: list[str]) -> None:
    """The whole command, as a user runs it: the refresh's pyarrow is imported in the child only."""
    url, directory = grown
    code = ("import sys\nfrom eventstore.cli import main\n"
            f"sys.argv = ['evstore', '--url', {url!r}, *{command!r}, '--analytics-dir', {str(directory)!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('pyarrow' in sys.modules, file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != "EVSTORE_ANALYTICS_FORK"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "new events applied" in r.stderr and r.stderr.strip().endswith("False"), r.stderr
    runs = _cli(url, "runs", "--json").stdout.splitlines()
    if command[0] == "metrics":
        assert json.loads(r.stdout)["scope"]["runs"] == len(runs) > 7  # every run, the new ones with the old
    elif command[0] == "query":
        assert json.loads(r.stdout) == [{"runs": len(runs)}]
    else:
        assert json.loads(r.stdout)["rows"]
