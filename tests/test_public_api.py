"""The notebook-facing API: ``eventstore.open`` and ``projections.duckdb``."""

from __future__ import annotations

from pathlib import Path

import pytest

import eventstore
import projections


def test_open_refuses_a_missing_store_unless_asked_to_create_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s/events.db"
    with pytest.raises(eventstore.SchemaOutOfDate, match="no evstore schema"):
        eventstore.open(url)
    with eventstore.open(url, create=True) as store:
        store.append("R-1", [eventstore.NewEvent("demo.note", {"n": 1})], expected_version="no stream")
    with eventstore.open(url) as again:  # create=True on an existing store changes nothing
        assert [e.payload for e in again.read_stream("R-1")] == [{"n": 1}]


def test_duckdb_connection_has_every_view_and_sees_new_events(store_url: str, tmp_path: Path) -> None:
    with eventstore.open(store_url) as store:
        store.append("R-1", [eventstore.NewEvent("demo.note", {"n": 1})])
        con = projections.duckdb(store, directory=tmp_path / "analytics")
        try:
            assert con.execute("SELECT count(*) FROM events").fetchall() == [(1,)]
            views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
            assert {"runs", "phases", "review_findings", "review_deltas", "gates", "breaker_trips"} <= views
        finally:
            con.close()
        store.append("R-1", [eventstore.NewEvent("demo.note", {"n": 2})])
        con = projections.duckdb(store, directory=tmp_path / "analytics")
        try:
            assert con.execute("SELECT count(*) FROM events").fetchall() == [(2,)]
        finally:
            con.close()
