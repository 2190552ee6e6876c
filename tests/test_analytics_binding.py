"""Analytics belong to a store and to its log (issue 10, defect 1).

Two stores used from one working directory never share tables; a deleted and recreated store,
or a log that no longer holds the event the tables were built up to, is rebuilt by a refresh
(and refused by a reader that may not refresh), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from analytics_fixtures import simulate_into
from click.testing import CliRunner, Result
from conftest import PG_URL, _pg_url_with_schema, drop_append_only_triggers, migrated
from sqlalchemy import text

from eventstore import config
from eventstore.cli import register
from eventstore.errors import EvstoreError
from eventstore.store import EventStore
from projections import analytics


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def _runs(url: str, *extra: str) -> int:
    """The runs in the analytics tables `evstore query` reads for ``url`` (refreshed first, as every
    analytics command does: ``projections/cli/analytics.py`` ``_tables``)."""
    r = _cli(url, "query", "--json", "SELECT count(*) AS runs FROM runs", *extra)
    assert r.exit_code == 0, r.output
    return int(json.loads(r.stdout)[0]["runs"])


def _metrics_runs(url: str, *extra: str) -> int:
    """The runs `evstore metrics` reports for ``url`` (its scope), through the same tables."""
    r = _cli(url, "metrics", "--format", "json", *extra)
    assert r.exit_code == 0, r.output
    return int(json.loads(r.stdout)["scope"]["runs"])


def _fill(url: str, runs: int, seed: int) -> None:
    with EventStore(url) as s:
        simulate_into(s, {"mapipe": runs}, seed=seed)


def _pg_schema() -> tuple[str, Callable[[], None]]:
    """A second private PostgreSQL schema (the ``pg_url`` fixture gives one per test)."""
    import psycopg

    assert PG_URL
    schema = "t_" + uuid.uuid4().hex[:16]
    plain = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    return _pg_url_with_schema(schema), drop


@pytest.fixture
def other_url(store_url: str, tmp_path: Path) -> Iterator[str]:
    """A second empty store on the same backend as ``store_url`` (same directory for SQLite)."""
    if store_url.startswith("sqlite"):
        yield migrated(f"sqlite:///{tmp_path}/store/other.db")
        return
    url, drop = _pg_schema()
    try:
        yield migrated(url)
    finally:
        drop()


def test_two_sqlite_stores_in_one_directory_keep_their_own_tables(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's reproduction: two stores beside each other, used from their directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVSTORE_ANALYTICS_DIR", raising=False)
    one, two = migrated("sqlite:///one.db"), migrated("sqlite:///two.db")
    _fill(one, 6, seed=1)
    _fill(two, 2, seed=2)
    assert _metrics_runs(one) == 6
    assert _metrics_runs(two) == 2  # main: 6, read from the tables the first store built
    assert (tmp_path / "one.db.analytics" / "manifest.json").exists()
    assert (tmp_path / "two.db.analytics" / "manifest.json").exists()


def test_two_stores_on_each_backend_never_share_tables(store_url: str, other_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVSTORE_ANALYTICS_DIR", raising=False)
    _fill(store_url, 3, seed=3)
    _fill(other_url, 1, seed=4)
    assert _runs(store_url) == 3
    assert _runs(other_url) == 1
    assert _runs(store_url) == 3
    with EventStore(store_url) as a, EventStore(other_url) as b:
        da, db = analytics.analytics_dir(a), analytics.analytics_dir(b)
        assert da != db
        assert json.loads((da / "manifest.json").read_text())["store_id"] == a.store_id()
        if not store_url.startswith("sqlite"):  # keyed by store id under the user's cache directory
            assert da == config.analytics_directory(store_url, a.store_id()) and da.name == a.store_id()


def test_a_directory_shared_on_purpose_is_rebuilt_for_each_store(store_url: str, other_url: str,
                                                                 tmp_path: Path) -> None:
    shared = str(tmp_path / "shared-analytics")
    _fill(store_url, 3, seed=3)
    _fill(other_url, 1, seed=4)
    assert _runs(store_url, "--analytics-dir", shared) == 3
    assert _runs(other_url, "--analytics-dir", shared) == 1
    # and a reader that may not refresh refuses the other store's tables instead of printing them
    r = _cli(store_url, "metrics", "--format", "json", "--no-refresh", "--analytics-dir", shared)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "are not this store's" in r.stderr and "not from this store" in r.stderr


def _recreate(url: str) -> None:
    """Delete the store (its file, or every table of its schema) and create it anew."""
    path = config.sqlite_file(url)
    if path is not None:
        for f in path.parent.glob(path.name + "*"):
            if f.is_file():
                f.unlink()
    else:
        with EventStore(url, check_schema=False) as s, s.engine.begin() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar_one()
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    migrated(url)


def test_a_deleted_and_recreated_store_is_rebuilt_and_status_shows_its_lag(store_url: str) -> None:
    _fill(store_url, 4, seed=5)
    assert _runs(store_url) == 4
    _recreate(store_url)
    _fill(store_url, 1, seed=6)
    with EventStore(store_url) as s:
        high = s.max_position()
    r = _cli(store_url, "projections", "status", "--json")
    assert r.exit_code == 0, r.output
    row = next(p for p in json.loads(r.stdout) if p["name"] == analytics.NAME)
    assert row["lag"] == high and row["checkpoint"] == 0  # main: lag 0 (the old checkpoint is further on)
    if store_url.startswith("sqlite"):  # same folder (beside the file): the old tables are named stale
        assert "not from this store" in row["stale"]
    else:  # a folder keyed by the new store id: nothing built yet
        assert row["stale"] is None and row["files"] == 0
    text = _cli(store_url, "projections", "status").stdout
    assert ("not this store's" in text) == store_url.startswith("sqlite"), text
    assert _runs(store_url) == 1


def _tamper_checkpoint_event(store: EventStore, position: int) -> None:
    """Change the hash of the event at ``position`` behind the store's back (a rewritten log)."""
    drop_append_only_triggers(store)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE events SET hash = :h WHERE position = :p"), {"h": b"\x01" * 32, "p": position})


def test_a_log_that_no_longer_has_the_checkpoint_event_is_rebuilt_or_refused(store_url: str,
                                                                             tmp_path: Path) -> None:
    out = tmp_path / "a"
    with EventStore(store_url) as s:
        simulate_into(s, {"mapipe": 2, "taskflow": 1}, seed=7)
        first = analytics.refresh(s, out)
        assert first.rebuilt and first.position == s.max_position()
        assert analytics.refresh(s, out).events == 0  # bound and current: nothing to do
        _tamper_checkpoint_event(s, first.position)
        with pytest.raises(EvstoreError, match="not the one they were built from"):
            with analytics.reading(s, out, fresh=False):
                pass
        assert analytics.status(s, out)["lag"] == s.max_position()
        again = analytics.refresh(s, out)
        assert again.rebuilt and again.events == s.max_position()
        m = analytics.Manifest.load(out)
        assert m is not None and m.hash == "01" * 32 and m.store_id == s.store_id()
        with analytics.reading(s, out, fresh=False) as con:
            assert con.execute("SELECT count(*) FROM events").fetchall()[0][0] == s.max_position()


def test_a_truncated_log_is_rebuilt(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "a"
    with EventStore(store_url) as s:
        simulate_into(s, {"mapipe": 2}, seed=8)
        high = analytics.refresh(s, out).position
        drop_append_only_triggers(s)
        with s.engine.begin() as conn:
            conn.execute(text("DELETE FROM events WHERE position > :p"), {"p": high - 3})
        assert "no event at their checkpoint" in analytics.status(s, out)["stale"]
        again = analytics.refresh(s, out)
        assert again.rebuilt and again.position == high - 3
