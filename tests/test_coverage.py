"""`evstore coverage` and the serve page /coverage: per source, the versions recorded, first and last
capture, the last source identity, unreadable versions, and sources gone, noticed once and when
(issue 31, part 2; SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from projections.serve import ServeConfig, create_app

DATA = Path(__file__).parent / "data" / "real"


def _rows(run) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    r = run("coverage", "--json")
    assert r.exit_code == 0, r.output
    return {row["stream"]: row for row in map(json.loads, r.stdout.splitlines())}


def test_coverage_of_a_folder_a_file_and_a_git_path(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ralph = tmp_path / "ralph"
    shutil.copytree(DATA / "codeharness-ralph-status", ralph)
    assert run("ingest", "generic", str(ralph), "--stream", "ralph").exit_code == 0
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"taskId": "S-1", "n": 1}))
    assert run("ingest", "generic", str(state)).exit_code == 0
    state.write_text(json.dumps({"taskId": "S-1", "n": 2}))
    assert run("ingest", "generic", str(state)).exit_code == 0
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for n in range(3):
        (repo / "s.json").write_text(json.dumps({"taskId": "G-1", "n": n}))
        subprocess.run([*git, "add", "s.json"], check=True)
        subprocess.run([*git, "commit", "-qm", f"v{n}"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert run("ingest", "generic", "--git", f"{repo}:s.json").exit_code == 0

    rows = _rows(run)
    files = sorted(ralph.iterdir())
    r = rows["ralph"]
    assert (r["kind"], r["source"], r["versions"], r["unreadable"], r["last_version"]) == \
        ("folder", str(ralph), len(files), 1, len(files))
    assert r["last_identity"]["file"] == str(files[-1])
    assert r["last_identity"]["sha256"] == hashlib.sha256(files[-1].read_bytes()).hexdigest()
    assert r["first_capture"] <= r["last_capture"] and (r["gone"], r["missing_files"]) == (False, 0)
    s = rows["S-1"]
    assert (s["kind"], s["source"], s["versions"], s["gone"]) == ("file", str(state), 2, False)
    assert s["last_identity"]["sha256"] == hashlib.sha256(state.read_bytes()).hexdigest()
    g = rows["G-1"]
    assert (g["kind"], g["versions"], g["last_identity"]["commit"], g["checked"]) == ("git", 3, head, False)

    table = run("coverage")
    assert table.exit_code == 0 and "3 source(s)" in table.stderr and "1 unreadable, 0 gone" in table.stderr
    assert str(ralph) in table.stdout and head[:12] in table.stdout


def test_a_source_gone_is_noticed_once_and_the_record_stays(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"taskId": "GONE-1", "n": 1}))
    assert run("ingest", "generic", str(state)).exit_code == 0
    assert _rows(run)["GONE-1"]["gone"] is False
    state.unlink()
    first = _rows(run)["GONE-1"]
    assert first["gone"] is True and first["gone_noticed_at"]
    again = _rows(run)["GONE-1"]
    assert again["gone_noticed_at"] == first["gone_noticed_at"]  # noticed once: the time stays
    notices = [json.loads(x) for x in run("log", "evstore:sources", "--json").stdout.splitlines()]
    assert [(n["type"], n["data"]["stream"], n["data"]["source"]) for n in notices] == \
        [("source.gone", "GONE-1", str(state))]
    assert json.loads(run("replay", "GONE-1", "--json").stdout) == {"taskId": "GONE-1", "n": 1}  # the record stays
    assert [r["stream_id"] for r in [json.loads(x) for x in run("runs", "--json").stdout.splitlines()]] == ["GONE-1"]  # the notices are no run
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as c:
        assert c.get("/api/coverage").json() == [again]
        page = c.get("/coverage").text
        assert '<tr class="gone">' in page and f"gone, noticed {first['gone_noticed_at'][:19].replace('T', ' ')}" in page
        assert 'href="/coverage"' in c.get("/").text
    # it comes back, is captured again, and goes again: a second notice
    state.write_text(json.dumps({"taskId": "GONE-1", "n": 2}))
    assert run("ingest", "generic", str(state)).exit_code == 0
    assert _rows(run)["GONE-1"]["gone"] is False
    state.unlink()
    assert _rows(run)["GONE-1"]["gone"] is True
    assert len(run("log", "evstore:sources", "--json").stdout.splitlines()) == 2


def test_a_folder_with_files_gone_counts_them(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "hist"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.json").write_text(json.dumps({"taskId": "F-1", "n": i}))
    assert run("ingest", "generic", str(folder)).exit_code == 0
    (folder / "0.json").unlink()
    row = _rows(run)["F-1"]
    assert (row["kind"], row["missing_files"], row["gone"]) == ("folder", 1, False)
    assert "1 file(s) missing" in run("coverage").stdout
    shutil.rmtree(folder)
    assert _rows(run)["F-1"]["gone"] is True


def test_coverage_of_an_empty_store_says_so(run) -> None:  # type: ignore[no-untyped-def]
    r = run("coverage")
    assert r.exit_code == 0 and r.stdout == "" and "no captured sources yet" in r.stderr
    assert run("coverage", "--json").stdout == ""


def test_a_transcript_deleted_after_capture_is_gone_and_its_record_stays(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Claude Code deletes transcripts after 30 days: coverage says which, and when it noticed."""
    from tests.claude_fixtures import SESSION, records, write_project

    main, sub = write_project(tmp_path / "projects")
    assert run("ingest", "claude", str(tmp_path / "projects")).exit_code == 0
    rows = {r["source"]: r for r in map(json.loads, run("coverage", "--json").stdout.splitlines())}
    t = rows[str(main)]
    assert (t["kind"], t["versions"], t["gone"]) == ("transcript", len(records()), False)
    assert t["last_identity"]["lines"] == len(records()) and t["last_identity"]["end"] == main.stat().st_size
    main.unlink()
    rows = {r["source"]: r for r in map(json.loads, run("coverage", "--json").stdout.splitlines())}
    assert rows[str(main)]["gone"] is True and rows[str(main)]["gone_noticed_at"]
    assert rows[str(sub)]["gone"] is False
    events = run("log", rows[str(main)]["stream"], "--json").stdout.splitlines()
    assert len(events) >= len(records())  # the record stays
    assert SESSION in rows[str(main)]["stream"]


def test_the_next_capture_notices_files_gone(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A folder captured, one of its files deleted, a new one written: the next ingest records the new
    version and says the earlier file went (the record stays)."""
    folder = tmp_path / "hist"
    folder.mkdir()
    for i in range(2):
        (folder / f"{i}.json").write_text(json.dumps({"taskId": "N-1", "n": i}))
    assert run("ingest", "generic", str(folder)).exit_code == 0
    (folder / "0.json").unlink()
    (folder / "2.json").write_text(json.dumps({"taskId": "N-1", "n": 2}))
    r = run("ingest", "generic", str(folder / "2.json"), "--stream", "N-1")
    assert r.exit_code == 0, r.output
    assert f"note: {folder} (N-1) has lost 1 recorded file(s), e.g. {folder / '0.json'}; the record stays" in r.stderr


def test_sources_named_by_a_relative_path_are_checked_from_anywhere(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch) -> None:
    """`evstore ingest generic history/` as the README writes it: the record keeps the path as given and
    the absolute path beside it, so coverage (from another directory) and the next capture see a file gone."""
    project = tmp_path / "project"
    (project / "hist").mkdir(parents=True)
    for i in range(2):
        (project / "hist" / f"{i}.json").write_text(json.dumps({"taskId": "R-1", "n": i}))
    (project / "state.json").write_text(json.dumps({"taskId": "R-2", "n": 1}))
    monkeypatch.chdir(project)
    assert run("ingest", "generic", "hist").exit_code == 0
    assert run("ingest", "generic", "state.json").exit_code == 0
    monkeypatch.chdir(tmp_path)
    rows = _rows(run)
    assert (rows["R-1"]["source"], rows["R-1"]["checked"], rows["R-1"]["gone"]) == ("hist", True, False)
    assert (rows["R-2"]["source"], rows["R-2"]["checked"], rows["R-2"]["gone"]) == ("state.json", True, False)
    assert "abspath" not in rows["R-1"]["last_identity"]  # where it is, not what it is
    (project / "state.json").unlink()
    (project / "hist" / "0.json").unlink()
    rows = _rows(run)
    assert rows["R-2"]["gone"] is True and rows["R-2"]["gone_noticed_at"]
    assert (rows["R-1"]["gone"], rows["R-1"]["missing_files"]) == (False, 1)
    (project / "hist" / "2.json").write_text(json.dumps({"taskId": "R-1", "n": 2}))
    monkeypatch.chdir(project)
    r = run("ingest", "generic", "hist")
    assert r.exit_code == 0 and "note: hist (R-1) has lost 1 recorded file(s), e.g. hist/0.json; the record stays" \
        in r.stderr, r.output
