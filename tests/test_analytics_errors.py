"""File errors of the analytics commands (issue 10, defect 9): a full disk, a missing or read-only
directory gives one `Error:` line naming the path and exit 1, never a traceback, never a
half-written file, and never the database advice ("check --url").

ENOSPC and EROFS are real: a tiny (or read-only) tmpfs is mounted for the test (this needs root,
as the test machines and CI run; elsewhere those tests say they are skipped); `/dev/full` needs
no mount.  The database does not matter here, so these run on SQLite only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from analytics_fixtures import simulate_into
from click.testing import CliRunner, Result
from conftest import migrated

from eventstore.cli import register
from eventstore.store import EventStore


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("errors")
    u = migrated(f"sqlite:///{d}/events.db")
    with EventStore(u) as s:
        simulate_into(s, {"mapipe": 2, "taskflow": 1}, seed=31)
    return u


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def _error(r: Result, *fragments: str) -> str:
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    assert "--url" not in lines[0]
    return lines[0]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mount(options)``: a fresh tmpfs mounted with ``options`` (unmounted afterwards)."""
    mounted: list[Path] = []

    def do(options: str) -> Path:
        target = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
        target.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); needs root")
        mounted.append(target)
        return target

    yield do
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.name.endswith(".tmp"))


def test_metrics_out_into_a_missing_directory(url: str, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "dir" / "x.html"
    _error(_cli(url, "metrics", "--format", "html", "--out", str(target)), str(target), "No such file or directory")
    assert not (tmp_path / "missing").exists()


def test_export_into_a_missing_directory_or_through_a_file(url: str, tmp_path: Path) -> None:
    jsonl = tmp_path / "missing" / "x.jsonl"
    _error(_cli(url, "export", "--jsonl", str(jsonl)), str(jsonl), "No such file or directory")
    _error(_cli(url, "export", "--jsonl", str(jsonl), "--table", "gates"), str(jsonl))
    (tmp_path / "plain").write_text("a file, not a directory")
    _error(_cli(url, "export", "--parquet", str(tmp_path / "plain" / "out")), "plain", "Not a directory")
    # a missing --parquet directory is created, as documented
    r = _cli(url, "export", "--parquet", str(tmp_path / "new" / "out"))
    assert r.exit_code == 0 and (tmp_path / "new" / "out" / "log.parquet").exists(), r.output


def test_export_to_a_full_device(url: str) -> None:
    _error(_cli(url, "export", "--jsonl", "/dev/full"), "/dev/full", "no space left on the device")


def test_a_read_only_directory(url: str, mount: Callable[[str], Path]) -> None:
    ro = mount("ro,size=1m")
    _error(_cli(url, "export", "--jsonl", str(ro / "x.jsonl")), str(ro / "x.jsonl"), "Read-only file system")
    _error(_cli(url, "export", "--parquet", str(ro / "out")), str(ro / "out"), "Read-only file system")
    _error(_cli(url, "metrics", "--out", str(ro / "m.txt")), str(ro / "m.txt"), "Read-only file system")
    _error(_cli(url, "query", "select 1", "--analytics-dir", str(ro / "a")),
           f"cannot write the analytics tables in {ro / 'a'}", "Read-only file system")


def test_a_full_disk_while_writing_parquet_or_exports(url: str, mount: Callable[[str], Path],
                                                      tmp_path: Path) -> None:
    full = mount("size=16k")
    a = full / "analytics"
    _error(_cli(url, "query", "select count(*) from events", "--analytics-dir", str(a)),
           f"cannot write the analytics tables in {a}", "no space left on the device")
    assert _leftovers(full) == []  # no half-written file stays behind
    manifest = a / "manifest.json"
    if manifest.exists():  # what a reader may find is a whole manifest listing whole files
        data = json.loads(manifest.read_text())
        assert data["position"] == 0
    # the export targets: the store's own tables build elsewhere, the files fail on the full disk
    _error(_cli(url, "export", "--jsonl", str(full / "x.jsonl")), str(full / "x.jsonl"),
           "no space left on the device")
    assert not (full / "x.jsonl").exists() and _leftovers(full) == []
    _error(_cli(url, "export", "--parquet", str(full / "out")), str(full / "out"), "no space left on the device")
    assert _leftovers(full) == []
    shutil.rmtree(full / "out", ignore_errors=True)
    _error(_cli(url, "metrics", "--format", "html", "--out", str(full / "m.html")), "no space left on the device")
    assert not (full / "m.html").exists() and _leftovers(full) == []
