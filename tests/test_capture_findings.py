"""What was captured, at a glance (issue 31, part 2): unreadable versions and lens failures count as
findings in `runs`, `runs --json` and the web runs index; `replay --check` over the whole history
names every finding with its version(s); the run page says when the version shown is unreadable
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from projections.serve import ServeConfig, create_app

DATA = Path(__file__).parent / "data" / "real"


def _ralph(tmp_path: Path, upto: int | None = None) -> Path:
    """codeharness-ralph-status as committed (version 43 is `{not valid json!!!`), or its first ``upto`` files."""
    src = DATA / "codeharness-ralph-status"
    if upto is None:
        return src
    dst = tmp_path / "ralph"
    dst.mkdir()
    for f in sorted(src.iterdir())[:upto]:
        shutil.copy(f, dst / f.name)
    return dst


def test_an_unreadable_version_is_a_finding_of_the_run_everywhere(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """codeharness-ralph-status showed `findings 0` while version 43 is unreadable."""
    r = run("ingest", "generic", str(_ralph(tmp_path)), "--stream", "ralph")
    assert r.exit_code == 0, r.output
    [row] = [json.loads(x) for x in run("runs", "--json").stdout.splitlines()]
    assert (row["findings"], row["unreadable"], row["lens_failures"]) == (1, 1, 0)
    table = run("runs").stdout.splitlines()
    assert table[0].split()[-2:] == ["findings", "sessions"] and table[2].split()[-1] == "1"  # no session
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as c:
        assert c.get("/api/runs").json()["runs"] == [row]
        html = c.get("/").text
        assert re.search(r'<td class="num">146</td><td class="num">1</td>', html), html


def test_the_unreadable_version_counts_once_and_stays_counted(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Up to version 43 (unreadable, the last), then the rest: one finding either way, and the
    index rebuilt from the log says the same as the one kept inline."""
    assert run("ingest", "generic", str(_ralph(tmp_path, 43)), "--stream", "ralph").exit_code == 0
    assert [json.loads(x) for x in run("runs", "--json").stdout.splitlines()][0]["findings"] == 1
    rest = sorted((DATA / "codeharness-ralph-status").iterdir())[43:]
    assert run("ingest", "generic", *map(str, rest), "--stream", "ralph").exit_code == 0
    [row] = [json.loads(x) for x in run("runs", "--json").stdout.splitlines()]
    assert (row["findings"], row["unreadable"]) == (1, 1)
    assert run("projections", "rebuild", "runs").exit_code == 0
    assert [json.loads(x) for x in run("runs", "--json").stdout.splitlines()] == [row]


def test_lens_failures_count_as_findings_after_later_versions(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.dialects.base import Dialect, DocumentPatched

    files = []
    for i in range(3):
        f = tmp_path / f"{i}.json"
        f.write_text(json.dumps({"taskId": "L-1", "n": i}))
        files.append(f)
    assert run("ingest", "generic", str(files[0])).exit_code == 0
    wrong = [DocumentPatched(ops=[{"op": "replace", "path": "/n", "value": -1}])]
    with monkeypatch.context() as m:
        m.setattr(Dialect, "observe", lambda self, prev, nxt: wrong)
        assert run("ingest", "generic", str(files[1])).exit_code == 0
    assert run("ingest", "generic", str(files[2])).exit_code == 0  # a good version after it
    [row] = [json.loads(x) for x in run("runs", "--json").stdout.splitlines()]
    assert (row["findings"], row["unreadable"], row["lens_failures"]) == (1, 0, 1)
    check = run("replay", "L-1", "--check")
    assert check.exit_code == 1 and check.stdout.startswith("version 2: /: [lens-failed] the generic lens failed")


def test_check_without_upto_reports_every_finding_of_the_history(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("ingest", "generic", str(_ralph(tmp_path)), "--stream", "ralph").exit_code == 0
    r = run("replay", "ralph", "--check")
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        "version 43: /: [unreadable-json] " + str(sorted((DATA / "codeharness-ralph-status").iterdir())[42])
        + ": not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes."]
    assert "1 finding(s) in the history of ralph (versions 1-146)" in r.stderr
    # --upto keeps its meaning: that version's document (version 50 is valid, and so are its findings)
    assert run("replay", "ralph", "--upto", "50", "--check").exit_code == 0


def test_check_groups_a_finding_over_the_versions_that_carry_it(run, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    history = sorted((corpus / "friday" / "history").glob("*.friday-state.json"))
    assert run("ingest", "friday", *map(str, history), "--stream", "F").exit_code == 0
    r = run("replay", "F", "--check")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines and all(re.match(r"versions? \d+(-\d+)?: /", line) for line in lines), lines
    assert any("[status-not-in-enum]" in line for line in lines)
    assert len(lines) == len(set(lines))  # each finding once per run of versions, not once per version


def test_a_clean_history_checks_clean(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"taskId": "OK-1", "n": 1}))
    assert run("ingest", "generic", str(f)).exit_code == 0
    r = run("replay", "OK-1", "--check")
    assert r.exit_code == 0 and r.stdout == "" and "0 finding(s) in the history of OK-1" in r.stderr


def test_the_run_page_says_when_the_version_shown_is_unreadable(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("ingest", "generic", str(_ralph(tmp_path)), "--stream", "ralph").exit_code == 0
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as c:
        page = c.get("/runs/ralph", params={"version": 43}).text
        assert "State document at version 43 of 146" in page
        assert re.search(r'class="notice unreadable">Note: version 43: unreadable \(.*not valid JSON at line 1, '
                         r"column 2.*\); the document shown is the last valid one \(version 42\)</p>", page), page
        assert "notice unreadable" not in c.get("/runs/ralph", params={"version": 44}).text
