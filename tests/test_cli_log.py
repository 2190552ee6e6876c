"""CLI for the log: exit codes and exact messages (sqlite-utils style)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventstore.cli import register


def test_append_log_verify(run) -> None:  # type: ignore[no-untyped-def]
    r = run("append", "PROJ-1", "demo.note", "--data", '{"text":"hello"}')
    assert r.exit_code == 0 and r.output.startswith("PROJ-1 @ version 1")
    r = run("append", "PROJ-1", "demo.note", "--data", "-", "--expected-version", "1", "--json", input='{"n": 2}')
    assert r.exit_code == 0 and json.loads(r.output)["version"] == 2
    r = run("log", "PROJ-1")
    assert r.exit_code == 0 and r.output.count("demo.note") == 2 and '{"text":"hello"}' in r.output
    lines = [json.loads(x) for x in run("log", "PROJ-1", "--json", "--after", "1").output.splitlines()]
    assert [x["version"] for x in lines] == [2] and lines[0]["data"] == {"n": 2}
    r = run("verify")
    assert r.exit_code == 0 and "verified 1 streams, 2 events" in r.output
    assert json.loads(run("verify", "--json").output)["ok"] is True


def test_append_conflict_and_bad_input(run) -> None:  # type: ignore[no-untyped-def]
    run("append", "S", "t.x", "--data", "{}")
    r = run("append", "S", "t.x", "--data", "{}", "--expected-version", "0")
    assert r.exit_code == 1
    assert r.stderr.strip() == 'Error: Stream "S" is at version 1, expected 0; re-read and retry.'
    cases = {
        '{"a": ': "--data: not valid JSON at line 1, column 7",
        "[1, 2]": "--data: must be a JSON object, got array",
        '{"x": NaN}': "NaN is not valid JSON",
        '{"x": Infinity}': "Infinity is not valid JSON",
        '{"a":' * 200 + "1" + "}" * 200: "nesting deeper than 64 levels at $.a.a.a",
        '{"blob": "' + "x" * (5 * 1024 * 1024) + '"}': "exceeds the limit of 4194304 bytes",
    }
    for data, message in cases.items():
        r = run("append", "S", "t.x", "--data", data)
        assert r.exit_code == 1, data
        assert r.stderr.startswith("Error: ") and message in r.stderr, r.stderr
        assert "Traceback" not in r.output
    r = run("append", "S", "t.x", "--data", "-", input=b'{"x": "\xff\xfe"}')
    assert r.exit_code == 1 and "not valid UTF-8 at byte 7" in r.stderr
    r = run("log", "missing")
    assert r.exit_code == 1 and 'No stream or task "missing"' in r.stderr
    r = run("append", "S", "t.x", "--expected-version", "soon", "--data", "{}")
    assert r.exit_code == 2
    assert [json.loads(x)["version"] for x in run("log", "S", "--json").output.splitlines()] == [1]


def test_batch_append_is_all_or_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps({"stream": f"S{i % 3}", "type": "t.x", "data": {"i": i}}) for i in range(50)) + "\n")
    r = run("append", "--batch", str(good), "--json")
    assert r.exit_code == 0 and json.loads(r.output)["events"] == 50
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"stream": "N", "type": "t.x", "data": {}}\n{"stream": "N", "type": "t.x", "data": [1]}\n')
    r = run("append", "--batch", str(bad))
    assert r.exit_code == 1 and f"{bad}, line 2" in r.stderr
    assert run("log", "N").exit_code == 1  # nothing of the file was written
    conflict = tmp_path / "conflict.jsonl"
    conflict.write_text('{"stream": "S0", "type": "t.x", "expected_version": 3}\n')
    r = run("append", "--batch", str(conflict))
    assert r.exit_code == 1 and 'Stream "S0" is at version 17, expected 3' in r.stderr


def test_seal_round_trip(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    run("append", "S", "t.x", "--data", "{}")
    out = tmp_path / "cp.json"
    r = run("seal", "--out", str(out))
    assert r.exit_code == 1 and "EVSTORE_SIGNING_KEY is not set" in r.stderr
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "secret")
    assert run("seal", "--out", str(out)).exit_code == 0
    r = run("verify", "--seal", str(out))
    assert r.exit_code == 0 and "seal" in r.output
    cp = json.loads(out.read_text())
    cp["event_count"] = 7
    out.write_text(json.dumps(cp))
    r = run("verify", "--seal", str(out))
    assert r.exit_code == 1 and "signature does not verify" in r.stderr


def test_schema_not_at_head_tells_what_to_do(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fresh/events.db"
    (tmp_path / "fresh").mkdir()
    sqlite3.connect(tmp_path / "fresh" / "events.db").close()  # a database, but no evstore schema
    r = CliRunner().invoke(register(), ["--url", url, "log", "X"])
    assert r.exit_code == 1
    assert "has no evstore schema" in r.stderr and "evstore db upgrade" in r.stderr
    assert CliRunner().invoke(register(), ["--url", url, "db", "upgrade"]).exit_code == 0
    r = CliRunner().invoke(register(), ["--url", url, "db", "check"])
    assert r.exit_code == 0 and "schema matches" in r.output
    r = CliRunner().invoke(register(), ["--url", url, "db", "current"])
    newest = max(f.name[:4] for f in (Path(__file__).parent.parent / "migrations" / "versions").glob("[0-9]*.py"))
    assert f"current: {newest}  head: {newest}" in r.output


def _timeline(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """T: 30 events a day apart from 2026-01-01, types gate.passed / note.added / doc.changed in turn."""
    batch = tmp_path / "t.jsonl"
    kinds = ["gate.passed", "note.added", "doc.changed"]
    batch.write_text("".join(json.dumps({"stream": "T", "type": kinds[i % 3], "data": {"i": i},
                                         "occurred_at": f"2026-01-{i + 1:02d}T12:00:00Z"}) + "\n" for i in range(30)))
    assert run("append", "--batch", str(batch)).exit_code == 0


def _versions(out: str) -> list[int]:
    return [int(line.split()[0]) for line in out.splitlines() if line[:5].strip().isdigit()]


def test_log_limit_type_and_since(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _timeline(run, tmp_path)
    assert _versions(run("log", "T", "-n", "3").stdout) == [28, 29, 30]  # the newest, oldest first
    assert _versions(run("log", "T", "--limit", "2", "--after", "10").stdout) == [11, 12]
    assert _versions(run("log", "T", "--type", "gate.*").stdout) == list(range(1, 31, 3))
    assert _versions(run("log", "T", "--type", "*.changed", "-n", "2").stdout) == [27, 30]
    assert _versions(run("log", "T", "--since", "2026-01-28").stdout) == [28, 29, 30]
    assert _versions(run("log", "T", "--since", "2026-01-20T12:00:00+02:00", "--type", "note.*").stdout) == \
        [20, 23, 26, 29]
    json_lines = [json.loads(x) for x in run("log", "T", "--json", "-n", "1").stdout.splitlines()]
    assert [x["version"] for x in json_lines] == [30]
    bad = run("log", "T", "--since", "last week")
    assert bad.exit_code == 1 and bad.stderr.startswith("Error: --since expects an ISO date")
    assert run("log", "T", "-n", "0").exit_code == 2


def test_log_pages_when_longer_than_the_terminal(sqlite_url: str, tmp_path: Path) -> None:
    from conftest import migrated, run_in_terminal

    url = migrated(sqlite_url)

    def run(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(register(), ["--url", url, *args], catch_exceptions=False)

    _timeline(run, tmp_path)
    pager = {"PAGER": "sed s/^/PAGED:/"}
    long = run_in_terminal("--url", url, "log", "T", rows=20, env=pager).splitlines()
    assert len(long) == 30 and all(line.startswith("PAGED:") for line in long)
    short = run_in_terminal("--url", url, "log", "T", "-n", "5", rows=20, env=pager).splitlines()
    assert len(short) == 5 and not any(line.startswith("PAGED:") for line in short)
    off = run_in_terminal("--url", url, "log", "T", "--no-pager", rows=20, env=pager).splitlines()
    assert len(off) == 30 and not any(line.startswith("PAGED:") for line in off)
    piped = run("log", "T").stdout.splitlines()  # not a terminal: never paged
    assert len(piped) == 30 and not piped[0].startswith("PAGED:")
