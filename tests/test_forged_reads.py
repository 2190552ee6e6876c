"""Reads an insider with the database alone could forge (issue 32, item 6).

- The replay cache: a row whose state and digest were both rewritten agrees with itself, so a read
  cannot tell it from a true one without re-folding.  A read served from the cache says so (`replay`
  on stderr, `cached_from` in `/api/runs/{id}/state`, a note on the run page), `--no-cache` and
  `?fresh=1` fold every event, and `verify` re-folds every cached row.
- The runs index: PostgreSQL's writer role must write `proj_runs` (it is kept in the append's
  transaction), so `verify` re-derives every row from the log and names a row that differs.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from conftest import exec_sql, migrated
from serve_fixtures import LOCAL
from starlette.testclient import TestClient
from test_roles import _as, _plain, roles  # noqa: F401 (the fixture)

from eventstore import chain, replay_cache
from eventstore.cli import register
from eventstore.store import EventStore
from projections import replay as rp
from projections.serve import ServeConfig, create_app


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


@pytest.fixture
def cached(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A generic stream "g" of four versions whose cached document at version 4 was forged with
    its digest recomputed (what an insider with the database alone can do)."""
    url = migrated(store_url)
    monkeypatch.setattr(rp, "CACHE_EVERY", 1)  # cache after one event (200 by default)
    history = tmp_path / "g"
    history.mkdir()
    for i in range(1, 5):
        (history / f"{i}.json").write_text(json.dumps({"n": i, "who": "alice"}))
    assert cli(url, "ingest", "generic", "--stream", "g", str(history)).exit_code == 0
    assert json.loads(cli(url, "replay", "g", "--json").stdout) == {"n": 4, "who": "alice"}  # caches version 4
    store = EventStore(url)
    try:
        state = replay_cache.encode_state({"n": 4, "who": "mallory"})
        exec_sql(store, "UPDATE replay_cache SET state = :st, state_sha256 = :sh", st=state, sh=chain.digest(state))
    finally:
        store.close()
    yield url


def test_a_read_from_the_cache_says_so_and_no_cache_folds_every_event(cached: str) -> None:
    r = cli(cached, "replay", "g", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"n": 4, "who": "mallory"}  # the forged row, but ...
    assert r.stderr.startswith("note: folded from the replay cache at version 4 (checked against the log's event "
                               "hash, not re-folded from the first event; --no-cache folds every event, "
                               "`evstore verify` checks every cached document)")
    r = cli(cached, "replay", "g", "--json", "--no-cache")
    assert json.loads(r.stdout) == {"n": 4, "who": "alice"} and "replay cache" not in r.stderr
    r = cli(cached, "verify")
    assert r.exit_code == 1 and 'stream "g" version 4: cache' in r.stderr


def test_the_state_api_and_the_run_page_say_so_and_fresh_folds_every_event(cached: str) -> None:
    with TestClient(create_app(ServeConfig(url=cached)), base_url=LOCAL) as c:
        served = c.get("/api/runs/g/state").json()
        assert served["cached_from"] == 4 and served["doc"]["who"] == "mallory"
        fresh = c.get("/api/runs/g/state?fresh=1").json()
        assert fresh["cached_from"] is None and fresh["doc"] == {"n": 4, "who": "alice"}
        page = html.unescape(c.get("/runs/g").text)
        assert "Folded from the replay cache at version 4" in page and 'href="/runs/g?fresh=1"' in page
        page = c.get("/runs/g?fresh=1").text
        assert 'id="cached-from"' not in page and "mallory" not in page and "alice" in page


def _demo(url: str) -> str:
    r = cli(url, "demo", "--runs", "2", "--seed", "3")
    assert r.exit_code == 0, r.output
    return json.loads(cli(url, "runs", "--json").stdout.splitlines()[0])["stream_id"]


def test_verify_names_a_runs_index_row_the_log_does_not_give(store_url: str, tmp_path: Path) -> None:
    """... and so does `verify --checkpoint` of a checkpoint signed before the edit (the tamper matrix's
    column "caught by an earlier checkpoint": through `verify`)."""
    url = migrated(store_url)
    sid = _demo(url)
    assert cli(url, "verify").exit_code == 0
    key, cp = tmp_path / "log", tmp_path / "cp.txt"
    assert cli(url, "keygen", "--out", str(key), "--name", "runs.example/log").exit_code == 0
    assert cli(url, "checkpoint", "--key-file", f"{key}.key", "--out", str(cp)).exit_code == 0
    checked = ("verify", "--checkpoint", str(cp), "--vkey", f"{key}.vkey")
    assert cli(url, *checked).exit_code == 0
    store = EventStore(url)
    try:
        exec_sql(store, "UPDATE proj_runs SET title = :t, events = events + 1 WHERE stream_id = :s",
                 t="forged title", s=sid)
    finally:
        store.close()
    assert json.loads(cli(url, "runs", "--json").stdout.splitlines()[0])["title"] == "forged title"
    r = cli(url, "verify")
    assert r.exit_code == 1, r.output
    assert f'FAIL stream "{sid}" version' in r.stderr and "projection — runs index (proj_runs) differs from the log: " \
        "title 'forged title' (the log gives" in r.stderr and "events" in r.stderr
    assert "`evstore projections rebuild runs` rewrites it from the log" in r.stderr
    r = cli(url, *checked)
    assert r.exit_code == 1 and "title 'forged title' (the log gives" in r.stderr, r.output
    assert cli(url, "verify", sid).exit_code == 1
    assert cli(url, "projections", "rebuild", "runs").exit_code == 0
    assert cli(url, "verify").exit_code == 0


def test_the_postgresql_writer_role_can_change_the_index_and_verify_names_it(
        roles: tuple[str, str, str]) -> None:  # noqa: F811
    url, writer, reader = roles
    assert cli(url, "db", "roles", "--writer", writer, "--reader", reader).exit_code == 0
    sid = _demo(url)
    with psycopg.connect(_plain(_as(url, writer))) as conn:  # the writer role holds UPDATE on proj_runs
        conn.execute("UPDATE proj_runs SET title = %s WHERE stream_id = %s", ("forged by the writer", sid))
    r = cli(_as(url, writer), "verify")
    assert r.exit_code == 1 and "title 'forged by the writer'" in r.stderr, r.output


def test_a_demo_written_by_worker_processes_has_the_index_the_log_gives(sqlite_url: str) -> None:
    """`evstore demo` of 200+ runs simulates in worker processes; their events came back with a copy of
    the UNKNOWN sentinel, which the runs index took for a document: every run had no title, and the
    new check in `verify` named all of them."""
    import pickle

    from eventstore.store import UNKNOWN
    from projections.demo import run_demo
    from projections.runs import IndexedEventStore, check_index

    assert pickle.loads(pickle.dumps(UNKNOWN)) is UNKNOWN
    store = IndexedEventStore(migrated(sqlite_url))
    try:
        run_demo(store, runs=4, seed=3, workers=2)
        assert check_index(store) == []
    finally:
        store.close()
    rows = [json.loads(x) for x in cli(migrated(sqlite_url), "runs", "--json").stdout.splitlines()]
    assert len(rows) == 4 and all(r["title"] for r in rows), rows
