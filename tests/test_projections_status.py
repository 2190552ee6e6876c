"""`evstore projections status` costs the same at any size (it reads checkpoints and the log's last
position, never counts or reads events) and says, beside each lag, which command catches it up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore.backends.base import Backend
from eventstore.cli import register
from eventstore.store import EventStore


def _status(url: str, directory: Path) -> list[dict[str, Any]]:
    r = CliRunner().invoke(register(), ["--url", url, "projections", "status", "--json"],
                           env={"EVSTORE_ANALYTICS_DIR": str(directory)})
    assert r.exit_code == 0, r.output
    return list(json.loads(r.stdout))


def test_status_reads_no_event_and_names_what_catches_each_up(store_url: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "analytics"
    r = CliRunner().invoke(register(), ["--url", store_url, "demo", "--runs", "4"])
    assert r.exit_code == 0, r.output
    s = EventStore(store_url)
    high = s.max_position()
    s.close()
    calls: list[str] = []
    for name in ("count_events", "read_all", "read_stream", "read_payloads"):
        orig = getattr(Backend, name)
        monkeypatch.setattr(Backend, name, lambda self, *a, _n=name, _o=orig, **k: calls.append(_n) or _o(self, *a, **k))
    before = {row["name"]: row for row in _status(store_url, directory)}
    assert calls == []  # neither counted nor read: the lag of a projection of every type is positions
    assert before["event_counts"]["lag"] == high and before["analytics"]["lag"] == high
    assert before["runs"]["lag"] == 0 and before["writers"]["lag"] == 0
    assert before["runs"]["caught_up_by"] == before["writers"]["caught_up_by"] == "every append (inline)"
    assert before["event_counts"]["caught_up_by"] == "evstore projections run"
    assert "evstore metrics" in before["analytics"]["caught_up_by"]
    # each command named does catch it up
    monkeypatch.undo()
    r = CliRunner().invoke(register(), ["--url", store_url, "metrics", "--analytics-dir", str(directory)])
    assert r.exit_code == 0, r.output
    assert {row["name"]: row["lag"] for row in _status(store_url, directory)}["analytics"] == 0
    r = CliRunner().invoke(register(), ["--url", store_url, "projections", "run"],
                           env={"EVSTORE_ANALYTICS_DIR": str(directory)})
    assert r.exit_code == 0, r.output
    assert all(row["lag"] == 0 for row in _status(store_url, directory))


def test_status_table_has_the_caught_up_by_column(sqlite_url: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(register(), ["--url", sqlite_url, "demo", "--runs", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(register(), ["--url", sqlite_url, "projections", "status"],
                           env={"EVSTORE_ANALYTICS_DIR": str(tmp_path / "a"), "COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "caught up by" in r.stdout and "evstore projections run" in r.stdout
