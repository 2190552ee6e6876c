"""`evstore usage --by writer|token|machine` and `evstore metrics` (its writers section, `--writer`) on a
team's store, SQLite and PostgreSQL: two machines' transcripts reach the server through the HTTP API under
two tokens (one token from two machines), and every figure is checked against a count made here from the
JSONL files and from the events each writer sent."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import migrated
from starlette.testclient import TestClient

from eventstore import remote, tokens
from eventstore.cli import register
from eventstore.store import EventStore
from projections.serve import ServeConfig, create_app
from tests import claude_link_fixtures as L
from tests import claude_usage_fixtures as F
from tests.test_usage import BASE_TOKENS, TOKENS, _close, _grouped, count_by_hand

#: Who sends each session (its subagents with it): TOKEN, MACHINE.
SENDERS = {F.S1: ("alice", "alice-mbp"), F.S2: ("alice", "alice-linux"), F.S3: ("bob", "bob-pc")}


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    monkeypatch.delenv("EVSTORE_PRICES", raising=False)


def cli(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(register(), ["--url", url, *args])
    return r.exit_code, r.stdout, r.stderr


def _json(url: str, *args: str) -> Any:
    code, out, err = cli(url, *args)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def team(store_url: str, tmp_path: Path) -> tuple[str, dict[str, Any], Counter[tuple[str, str]]]:
    """The team store after the machines sent their sessions over HTTP; the count by hand of every API
    message, and the events each (token, machine) sent."""
    url = migrated(store_url)
    F.write(tmp_path / "projects")
    local = f"sqlite:///{tmp_path}/machine/events.db"  # the machines' sessions, recorded where they ran
    code, _, err = cli(local, "ingest", "claude", str(tmp_path / "projects"))
    assert code == 0, err
    with EventStore(url) as store:
        secret = {"alice": tokens.add_token(store, "alice", "append"), "bob": tokens.add_token(store, "bob", "append")}
    sent: Counter[tuple[str, str]] = Counter()
    app = create_app(ServeConfig(url=url, token=secrets.token_urlsafe(24), read_token=None, host="127.0.0.1",
                                 workers=2))
    with EventStore(local) as machine, TestClient(app, base_url="http://127.0.0.1") as http:
        for batch in remote._batches(machine, 0):  # what `evstore push` sends, in the machine's order
            token, host = SENDERS[batch[0].stream_id.split("/", 1)[0]]
            r = http.post(f"/api/streams/{batch[0].stream_id}/events", content=remote._body(machine, batch),
                          headers={"Authorization": f"Bearer {secret[token]}", "X-Evstore-Machine": host,
                                   "Content-Type": "application/json"})
            assert r.status_code == 201, r.text
            sent[(token, host)] += len(batch)
    assert {k[0] for k in sent} == {"alice", "bob"}
    return url, count_by_hand(tmp_path / "projects"), sent


def _writer_of(message: dict[str, Any], by: str) -> str:
    token, machine = SENDERS[message["session"]]
    return {"writer": f"{token}/{machine}", "token": token, "machine": machine}[by]


def _rows(report: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    keep = ("api_messages", *TOKENS, "cost_usd", "unpriced_messages")
    return {r["key"]: {k: r[k] for k in keep} for r in report["rows"]}


@pytest.mark.parametrize("by", ["writer", "token", "machine"])
def test_usage_by_writer_token_and_machine_equals_a_count_by_hand(
        team: tuple[str, dict[str, Any], Counter[tuple[str, str]]], by: str) -> None:
    url, messages, _ = team
    for m in messages.values():
        m[by] = _writer_of(m, by)
    report = _json(url, "usage", "--json", "--by", by)
    _close(_rows(report), _grouped(messages, by))
    assert report["by"] == by and None not in _rows(report)  # every message came over HTTP
    code, text, err = cli(url, "usage", "--by", by)
    assert code == 0, err
    assert text.splitlines()[0].split()[0] == by
    assert {_writer_of(m, by) for m in messages.values()} <= {line.split()[0] for line in text.splitlines()[2:]}


def test_usage_by_writer_counts_what_was_recorded_where_the_store_is_apart(
        team: tuple[str, dict[str, Any], Counter[tuple[str, str]]], tmp_path: Path) -> None:
    url, messages, _ = team
    code, _, err = cli(url, "usage", "--by", "writer")
    assert code == 0 and "note: writer (none)" not in err  # nothing local yet
    project = tmp_path / "orch"
    project.mkdir()
    main, _ = L.write_session(tmp_path / "server-projects", project)  # a session ingested on the server itself
    assert cli(url, "ingest", "claude", str(main.parent))[0] == 0
    rows = _rows(_json(url, "usage", "--json", "--by", "writer"))
    assert rows.keys() == {None, *(_writer_of(m, "writer") for m in messages.values())}
    # The link fixture's subagent message (msg_s1, req_s1) has the ids of one bob sent first: counted once, his.
    repeated = {"input_tokens": 400, "output_tokens": 15, "cache_creation_tokens": 100, "cache_read_tokens": 0}
    assert {t: rows[None][t] for t in BASE_TOKENS} == {t: L.RUN_TOTALS[t] - repeated[t] for t in BASE_TOKENS}
    assert ("msg_s1", "req_s1") in messages and _writer_of(messages[("msg_s1", "req_s1")], "writer") == "bob/bob-pc"
    code, text, err = cli(url, "usage", "--by", "writer")
    assert code == 0 and "(none)" in text
    assert "note: writer (none): messages recorded on the store's own machine, not sent over the HTTP API" in err


def test_metrics_writers_section_and_writer_filter(team: tuple[str, dict[str, Any], Counter[tuple[str, str]]]) -> None:
    url, messages, sent = team
    assert cli(url, "append", "local-note", "demo.note", "--data", "{}")[0] == 0
    with EventStore(url) as store:
        every = list(store.iter_all())
    local = sum(1 for e in every if "sent_by" not in json.loads(e.meta or b"{}"))
    assert local >= 3  # the two tokens' admin events and the note
    report = _json(url, "metrics", "--format", "json")
    section = next(s for s in report["sections"] if s["name"] == "writers")
    rows = {r["writer"]: r for r in section["rows"]}
    assert {w: r["events"] for w, r in rows.items()} == {
        **{f"{t}/{m}": n for (t, m), n in sent.items()}, "(local)": local}
    by_writer = Counter(_writer_of(m, "writer") for m in messages.values())
    for (token, machine) in sent:
        row = rows[f"{token}/{machine}"]
        assert (row["token"], row["machine"]) == (token, machine)
        assert row["api_messages"] == by_writer[f"{token}/{machine}"]
    assert rows["(local)"]["token"] is None and rows["(local)"]["api_messages"] == 0

    # --writer TOKEN (any machine) or TOKEN/MACHINE: the runs that writer sent to
    bob = _json(url, "metrics", "--format", "json", "--writer", "bob")
    assert bob["scope"]["writer"] == "bob"
    assert bob["scope"]["runs"] == len({e.stream_id for e in every
                                        if json.loads(e.meta or b"{}").get("sent_by", {}).get("token") == "bob"})
    [bob_row] = next(s for s in bob["sections"] if s["name"] == "writers")["rows"]
    assert bob_row["writer"] == "bob/bob-pc" and bob_row["events"] == sent[("bob", "bob-pc")]
    mbp = _json(url, "metrics", "--format", "json", "--writer", "alice/alice-mbp")
    assert [r["writer"] for r in next(s for s in mbp["sections"] if s["name"] == "writers")["rows"]] == [
        "alice/alice-mbp"]
    code, _, err = cli(url, "metrics", "--writer", "carol")
    assert code == 1 and 'No event was sent by --writer "carol"' in err
    assert "alice, alice/alice-linux, alice/alice-mbp, bob, bob/bob-pc" in err


def test_the_writers_section_is_empty_where_no_event_came_over_http(store_url: str) -> None:
    """A store written where it is (no team server): the writers section has no row, not a lone "(local)"."""
    assert cli(store_url, "demo", "--runs", "3", "--seed", "2")[0] == 0
    report = _json(store_url, "metrics", "--format", "json")
    assert next(s for s in report["sections"] if s["name"] == "writers")["rows"] == []


def test_serve_metrics_writer_filter_is_the_cli_writers_section(
        team: tuple[str, dict[str, Any], Counter[tuple[str, str]]], tmp_path: Path) -> None:
    """``/metrics?writer=`` and ``/api/metrics?writer=`` on `evstore serve` give what `evstore metrics
    --writer` gives: the same scope and the same writers section, TOKEN or TOKEN/MACHINE; a writer that
    sent nothing is a 400 naming the writers there are."""
    url, _, sent = team
    analytics = str(tmp_path / "analytics")
    app = create_app(ServeConfig(url=url, token=None, read_token=None, host="127.0.0.1", workers=1,
                                 analytics_dir=analytics))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        for writer, rows in (("bob", {"bob/bob-pc"}), ("alice", {"alice/alice-mbp", "alice/alice-linux"}),
                             ("alice/alice-mbp", {"alice/alice-mbp"})):
            cli_report = _json(url, "metrics", "--format", "json", "--writer", writer, "--analytics-dir", analytics)
            r = http.get("/api/metrics", params={"writer": writer})
            assert r.status_code == 200, r.text
            api = r.json()
            assert api["scope"] == cli_report["scope"] and api["scope"]["writer"] == writer
            section = next(s for s in api["sections"] if s["name"] == "writers")
            assert section == next(s for s in cli_report["sections"] if s["name"] == "writers")
            assert {row["writer"]: row["events"] for row in section["rows"]} == {
                w: sent[tuple(w.split("/"))] for w in rows}  # type: ignore[index]
            page = http.get("/metrics", params={"writer": writer})
            assert page.status_code == 200 and f'name="writer" value="{writer}"' in page.text
            assert all(w in page.text for w in rows) and (writer.startswith("alice") or "alice/" not in page.text)
            assert "writer=" + writer.replace("/", "%2F") in page.text  # the JSON link keeps the filter
        everyone = http.get("/api/metrics").json()
        assert {r["writer"] for r in next(s for s in everyone["sections"] if s["name"] == "writers")["rows"]} >= {
            f"{t}/{m}" for t, m in sent}
        r = http.get("/api/metrics", params={"writer": "carol"})
        assert r.status_code == 400 and 'No event was sent by --writer "carol"' in r.json()["error"]
        assert "alice, alice/alice-linux, alice/alice-mbp, bob, bob/bob-pc" in r.json()["error"]
