"""`evstore verify --since CHECKPOINT` on SQLite and PostgreSQL: only the events appended after a
signed checkpoint are checked (their digests, hashes and links, the first one of a stream to its
predecessor before the checkpoint), while an edit before the checkpoint fails the checkpoint's root
check; and verify's progress goes to stderr, never to stdout or --json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import drop_append_only_triggers, exec_sql

from eventstore.store import EventStore, NewEvent

NAME = "example.com/since-test"


def _keys(run: Callable[..., Any], tmp_path: Path, prefix: str = "log", name: str = NAME) -> Path:
    r = run("keygen", "--out", str(tmp_path / prefix), "--name", name)
    assert r.exit_code == 0, r.output
    return tmp_path / prefix


def _append(store: EventStore, stream: str, n: int) -> None:
    store.append(stream, [NewEvent("demo.note", {"i": i, "stream": stream}) for i in range(n)])


@pytest.fixture
def checkpointed(run: Callable[..., Any], store: EventStore, tmp_path: Path) -> tuple[Path, Path]:
    """20 events in A and B (a stored tree node over the first 16), a checkpoint of them, then 3 more
    events of A (versions 11-13, positions 21-23) and 2 of a new stream C (positions 24-25)."""
    prefix = _keys(run, tmp_path)
    _append(store, "A", 10)
    _append(store, "B", 10)
    cp = tmp_path / "cp20"
    r = run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp))
    assert r.exit_code == 0, r.output
    _append(store, "A", 3)
    _append(store, "C", 2)
    return cp, Path(f"{prefix}.vkey")


def _since(run: Callable[..., Any], cp: Path | str, vkey: Path, *more: str) -> Any:
    return run("verify", "--since", str(cp), "--vkey", str(vkey), *more)


def test_verify_since_checks_only_the_events_after_the_checkpoint(run: Callable[..., Any], store: EventStore,
                                                                  checkpointed: tuple[Path, Path]) -> None:
    cp, vkey = checkpointed
    r = _since(run, cp, vkey)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"verified 5 events after {cp} (its first 20 events hash to its signed root) in "
                               "2 streams"), r.stdout
    report = json.loads(_since(run, cp, vkey, "--json").stdout)
    assert (report["ok"], report["events"], report["streams"]) == (True, 5, 2)
    assert report["since"] == {"checkpoint": str(cp), "origin": NAME, "tree_size": 20, "ok": True}
    # the newest checkpoint recorded in the store, its signature checked with the key
    latest = json.loads(_since(run, "latest", vkey, "--json").stdout)
    assert (latest["ok"], latest["events"], latest["since"]["tree_size"]) == (True, 5, 20)

    # A payload edited before the checkpoint, its digest and hash left alone: what --since trusts (the
    # event's hash, a leaf of the signed root, is unchanged); a full verify finds it.
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET data = :d WHERE position = 12", d=b'{"i":1,"stream":"forged"}')
    assert _since(run, cp, vkey).exit_code == 0
    full = run("verify")
    assert full.exit_code == 1 and 'stream "B" version 2: data' in full.stderr, full.stderr

    # the same edit after the checkpoint is checked
    exec_sql(store, "UPDATE events SET data = :d WHERE position = 22", d=b'{"i":1,"stream":"forged"}')
    r = _since(run, cp, vkey)
    assert r.exit_code == 1, r.output
    assert 'FAIL stream "A" version 12: data — stored data does not match its recorded SHA-256' in r.stderr
    assert "Error: 1 integrity failure(s) in 2 streams, 5 events" in r.stderr, r.stderr


def test_the_first_new_event_links_to_its_predecessor_before_the_checkpoint(
        run: Callable[..., Any], store: EventStore, checkpointed: tuple[Path, Path]) -> None:
    cp, vkey = checkpointed
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET prev_hash = :z WHERE position = 21", z=bytes(32))  # A version 11
    r = _since(run, cp, vkey)
    assert r.exit_code == 1
    assert "FAIL stream \"A\" version 11: link — prev_hash is not the previous event's hash" in r.stderr, r.stderr


@pytest.mark.parametrize("edit", ["rehashed", "deleted"])
def test_an_edit_before_the_checkpoint_fails_its_root_check(run: Callable[..., Any], store: EventStore,
                                                           checkpointed: tuple[Path, Path], edit: str) -> None:
    """An event before the checkpoint rewritten with a new hash (as one who hides a header edit must),
    or deleted: the first 20 leaves no longer hash to the signed root."""
    cp, vkey = checkpointed
    drop_append_only_triggers(store)
    if edit == "rehashed":  # B version 8, under no stored tree node (leaves 16-19)
        exec_sql(store, "UPDATE events SET hash = :h WHERE position = 18", h=b"\x01" * 32)
    else:
        exec_sql(store, "DELETE FROM events WHERE position = 5")
    r = _since(run, cp, vkey)
    assert r.exit_code == 1, r.output
    if edit == "rehashed":
        assert "checkpoint — the log's first 20 leaves hash to" in r.stderr, r.stderr
    else:
        assert "checkpoint — leaf 4 (position 5) is missing" in r.stderr, r.stderr
        assert "tree — position 5 is missing (leaf 4)" in r.stderr, r.stderr
    report = json.loads(_since(run, cp, vkey, "--json").stdout)
    assert report["ok"] is False and report["since"]["ok"] is False
    assert "checkpoint" in {f["field"] for f in report["failures"]}


def test_a_leaf_edited_under_a_stored_node_fails_even_with_the_root_kept(run: Callable[..., Any], store: EventStore,
                                                                        checkpointed: tuple[Path, Path]) -> None:
    """The root is not taken from the stored nodes alone: a leaf (events.hash) under the stored node of
    leaves 0-15 is rewritten, the node left as it was (so the root folded from the stored nodes still
    matches); the nodes are recomputed from every leaf, and differ."""
    cp, vkey = checkpointed
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET hash = :h WHERE position = 3", h=b"\x02" * 32)
    r = _since(run, cp, vkey)
    assert r.exit_code == 1
    assert 'stream "A" version 1: tree — leaf 0 (position 1): the stored Merkle tree differs from the leaves' \
        in r.stderr, r.stderr
    assert "checkpoint —" not in r.stderr  # the root from the stored node alone would still match


def test_verify_since_errors(run: Callable[..., Any], store: EventStore, checkpointed: tuple[Path, Path],
                             tmp_path: Path) -> None:
    cp, vkey = checkpointed
    r = run("verify", "--since", str(cp))
    assert r.exit_code == 2 and "--since needs the log's verifier key" in r.stderr
    r = _since(run, tmp_path / "nope", vkey)
    assert r.exit_code == 2 and "no such checkpoint file" in r.stderr
    r = run("verify", "A", "--since", str(cp), "--vkey", str(vkey))
    assert r.exit_code == 2 and "give no STREAM" in r.stderr
    other = _keys(run, tmp_path, "other", "other.example")
    r = _since(run, cp, Path(f"{other}.vkey"))
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {cp}: "), r.stderr
    r = _since(run, "latest", Path(f"{other}.vkey"))
    assert r.exit_code == 1 and "records no checkpoint signed by other.example" in r.stderr, r.stderr


def test_verify_since_checks_the_runs_index_rows_of_the_streams_with_new_events(
        run: Callable[..., Any], store: EventStore, tmp_path: Path) -> None:
    """The runs index (written by whoever may append) is re-derived for the runs that have events after
    the checkpoint: a row forged there is named; a run without new events is what --since trusts."""
    prefix = _keys(run, tmp_path)
    for sid in ("R1", "R2"):
        assert run("append", sid, "demo.note", "--data", '{"step": 1}').exit_code == 0
    cp = tmp_path / "cp"
    assert run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp)).exit_code == 0
    assert run("append", "R2", "demo.note", "--data", '{"step": 2}').exit_code == 0
    vkey = Path(f"{prefix}.vkey")
    assert _since(run, cp, vkey).exit_code == 0
    exec_sql(store, "UPDATE proj_runs SET events = 7 WHERE stream_id IN ('R1', 'R2')")
    r = _since(run, cp, vkey)
    assert r.exit_code == 1
    assert 'FAIL stream "R2" version 2: projection — runs index (proj_runs) differs from the log: events 7' \
        in r.stderr, r.stderr
    assert '"R1"' not in r.stderr
    assert 'stream "R1"' in run("verify").stderr  # a full verify names both


def test_progress_goes_to_stderr_never_stdout(run: Callable[..., Any], store: EventStore,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _append(store, "A", 7)
    r = run("verify", "--json")  # stderr is no terminal here: no progress unless forced
    assert "verify:" not in r.stderr
    monkeypatch.setenv("EVSTORE_PROGRESS", "1")
    r = run("verify", "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["events"] == 7  # stdout is the report alone
    assert "verify: 7 / 7 events (" in r.stderr, r.stderr
    assert "verify: recomputing the Merkle tree from every leaf" in r.stderr, r.stderr
    r = run("verify")
    assert r.stdout.startswith("verified 1 streams, 7 events") and "verify:" not in r.stdout
    monkeypatch.setenv("EVSTORE_PROGRESS", "0")
    assert "verify:" not in run("verify").stderr
