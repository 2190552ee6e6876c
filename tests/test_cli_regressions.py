"""Regressions found in review: every expected failure is `Error: ...`, exit 1, no traceback."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from oracles import assert_exact

from eventstore.cli import register
from eventstore.dialects import get_dialect
from eventstore.errors import EvstoreError
from eventstore.ingest import Ingestor
from eventstore.store import EventStore, NewEvent
from projections import replay as rp


@pytest.fixture
def run(store_url: str):  # type: ignore[no-untyped-def]
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(register(), ["--url", store_url, *args])

    return invoke


def clean_error(r: Result) -> None:
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.stderr.startswith("Error: "), r.stderr


def test_batch_occurred_at_and_schema_version(run, store_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "b.jsonl"
    for bad in (123, "x" * 40):
        f.write_text(json.dumps({"stream": "S", "type": "t.x", "occurred_at": bad}) + "\n")
        r = run("append", "--batch", str(f))
        clean_error(r)
        assert f"{f}, line 1" in r.stderr and "occurred_at" in r.stderr
    f.write_text(json.dumps({"stream": "S", "type": "t.x", "schema_version": 3}) + "\n")
    assert run("append", "--batch", str(f)).exit_code == 0
    with EventStore(store_url) as s:
        assert next(iter(s.read_stream("S"))).schema_version == 3


def test_replay_at_honours_utc_offsets(run, store_url: str) -> None:  # type: ignore[no-untyped-def]
    with EventStore(store_url) as s:
        s.append("S", [NewEvent("document.observed", {"doc": {"v": 1}}, occurred_at="2025-01-01T09:00:00Z")])
        s.append("S", [NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/v", "value": 2}]},
                                occurred_at="2025-01-01T11:00:00Z")])
    r = run("replay", "S", "--at", "2025-01-01T12:00:00+02:00", "--json")  # = 10:00Z
    assert r.exit_code == 0, r.output
    assert_exact(json.loads(r.stdout), {"v": 1})  # version 1 exactly (== would accept 1.0 or True)
    for at, want in (("2025-01-01T11:00:00+02:00", {"v": 1}), ("2025-01-01T13:00:00+02:00", {"v": 2})):
        r = run("replay", "S", "--at", at, "--json")  # 09:00Z is version 1 itself, 11:00Z version 2
        assert r.exit_code == 0, r.output
        assert_exact(json.loads(r.stdout), want)


def test_log_tolerates_free_form_meta(run) -> None:  # type: ignore[no-untyped-def]
    assert run("append", "S", "note", "--data", "{}", "--meta", '{"findings": "none"}').exit_code == 0
    r = run("log", "S")
    assert r.exit_code == 0 and "note" in r.output


def test_seal_edge_cases(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    run("append", "S", "note", "--data", "{}")
    r = run("seal", "--out", str(tmp_path / "missing" / "seal.json"))  # deprecated: a warning, then the error
    assert r.exit_code == 1 and r.stderr.splitlines()[-1].startswith("Error: Cannot write"), r.stderr
    sealed = tmp_path / "seal.json"
    assert run("seal", "--out", str(sealed)).exit_code == 0
    d = json.loads(sealed.read_text())
    d["signature"] = "é" * 64
    sealed.write_text(json.dumps(d))
    r = run("verify", "--seal", str(sealed))
    assert r.exit_code == 1 and "signature does not verify" in r.stderr


def test_seals_still_work_and_warn(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Seals gave way to signed checkpoints (issue 34: `evstore checkpoint`, a C2SP signed note):
    `evstore seal` still writes one, hidden from --help, warning on stderr; `verify --seal` and the
    old spelling `verify --checkpoint SEAL.json` still check it (the latter warning)."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    run("append", "S", "note", "--data", "{}")
    old = tmp_path / "cp.json"
    r = run("seal", "--out", str(old))
    assert r.exit_code == 0 and r.stdout.startswith("seal: 1 events, 1 streams")
    assert r.stderr.startswith("Warning: `evstore seal` is deprecated; use `evstore checkpoint --key-file")
    assert json.loads(old.read_text())["format"] == "evstore.checkpoint.v2"  # the signed format tag is stable
    r = run("verify", "--seal", str(old))
    # stderr says only which file check ran (SQLite's quick_check; none on PostgreSQL), no warning
    assert r.exit_code == 0 and f"seal {old} holds" in r.stdout and r.stderr.startswith("file check: ")
    assert len(r.stderr.splitlines()) == 1
    r = run("verify", "--checkpoint", str(old))
    assert r.exit_code == 0 and f"seal {old} holds" in r.stdout
    assert "Warning: `verify --checkpoint SEAL.json` is deprecated; use `verify --seal SEAL.json`" in r.stderr
    r = run("verify", "--checkpoint", str(old), "--seal", str(old))
    assert r.exit_code == 2 and "--checkpoint got a seal file and --seal another" in r.stderr
    top, verify_help = run("--help").stdout, run("verify", "--help").stdout
    assert "checkpoint" in top and " seal " not in top
    assert "--seal" in verify_help and "--checkpoint" in verify_help and "--vkey" in verify_help


def test_lone_surrogates_are_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clean_error(run("append", "S", "note", "--data", '{"a": "\\ud800"}'))
    f = tmp_path / "s.json"
    f.write_text('{"taskId": "X", "a": "\\ud800"}')
    r = run("ingest", "generic", str(f))
    clean_error(r)
    assert "UTF-8" in r.stderr


def test_invalid_schema_for_validate(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("append", "S", "document.observed", "--data", '{"doc": {"a": 1}}').exit_code == 0
    schema = tmp_path / "s.json"
    schema.write_text('{"type": 5}')
    r = run("replay", "S", "--validate", str(schema))
    clean_error(r)
    assert "is not a valid JSON Schema" in r.stderr


def test_unreachable_database() -> None:
    r = CliRunner().invoke(register(), ["--url", "postgresql+psycopg://postgres@127.0.0.1:1/x", "verify"])
    clean_error(r)
    assert "cannot use the database" in r.stderr


def test_failed_multi_file_ingest_writes_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"taskId": "A"}')
    b.write_text('{"taskId": "B"}')
    r = run("ingest", "generic", str(a), str(b), "--stream", "S")
    clean_error(r)
    assert run("log", "S").exit_code == 1


def test_raw_bytes_only_for_a_snapshot_boundary(store: EventStore) -> None:
    d = get_dialect("mapipe")
    ing = Ingestor(store, d, stream="S")
    for i, snap in enumerate(d.simulate(random.Random(1), run_id="R1", start=datetime(2025, 1, 1, tzinfo=UTC))):
        snap.raw = (json.dumps(snap.doc, indent=2) + "\n").encode()
        snap.source = {"file": f"f{i}.json"}
        before = store.stream_version("S")
        r = ing.ingest(snap)
        assert rp.replay_raw(store, "S", r.version) == snap.raw
        if r.events > 1:
            with pytest.raises(EvstoreError, match=f"inside the snapshot that ends at version {r.version}"):
                rp.replay_raw(store, "S", before + 1)
            return
    raise AssertionError("the simulated run has no multi-event snapshot")
