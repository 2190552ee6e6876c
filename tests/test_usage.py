"""`evstore usage`: tokens and cost per session, subagent, model, day, task and project, checked
against a count made here its own simple way (read the JSONL files with json, keep the last line of
each message id + request id); prices dated, overridable, and "no price" never a zero."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.prices import PRICE_KEY_SQL, load_prices, price_key
from tests import claude_link_fixtures as L
from tests import claude_usage_fixtures as F

TOKENS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_creation_5m_tokens",
          "cache_creation_1h_tokens", "cache_read_tokens")
BASE_TOKENS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")
PRICED = ("input_tokens", "output_tokens", "cache_creation_5m_tokens", "cache_creation_1h_tokens", "cache_read_tokens")
# Dollars per million tokens (input, output, 5-minute cache write, 1-hour cache write, cache read), from
# Anthropic's price list.
RATES = {"claude-sonnet-4-5-20250929": (3, 15, 3.75, 6, 0.3), "claude-haiku-4-5-20251001": (1, 5, 1.25, 2, 0.1),
         "claude-opus-4-1-20250805": (15, 75, 18.75, 30, 1.5), "claude-sonnet-4-20250514": (3, 15, 3.75, 6, 0.3),
         "<synthetic>": (0, 0, 0, 0, 0)}


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    monkeypatch.delenv("EVSTORE_PRICES", raising=False)


def count_by_hand(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Per API message (message.id, requestId): the usage on its last line, in the first file (in
    name order, sessions before subagent files) that has it; its session and subagent."""
    files = sorted(root.rglob("*.jsonl"), key=lambda p: (p.parent.name == "subagents", str(p)))
    messages: dict[tuple[str, str], dict[str, Any]] = {}
    for path in files:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        if path.parent.name == "subagents":
            session, agent = path.parent.parent.name, f"{path.parent.parent.name}/{path.stem}"
        elif path.stem.startswith("agent-"):
            session = lines[0]["sessionId"]
            agent = f"{session}/{path.stem}"
        else:
            session, agent = path.stem, None
        roots: dict[str, str | None] = {}
        seen_here: set[tuple[str, str]] = set()
        for rec in lines:
            side = None
            if agent is None and rec.get("isSidechain"):
                side = rec["uuid"] if rec.get("parentUuid") is None else roots.get(rec["parentUuid"])
                roots[rec["uuid"]] = side
            if rec.get("type") != "assistant":
                continue
            key = (rec["message"]["id"], rec.get("requestId") or "")
            if key in messages and key not in seen_here:
                continue  # recorded by an earlier file
            seen_here.add(key)
            usage = rec["message"]["usage"]
            split = usage.get("cache_creation")  # 5-minute and 1-hour writes; without it all are 5-minute
            write = usage.get("cache_creation_input_tokens", 0)
            first = messages.get(key, {}).get("first_output", usage["output_tokens"])
            messages[key] = {"session": session, "model": rec["message"]["model"], "first_output": first,
                             "subagent": agent or (f"{session}#{side}" if side else None),
                             "input_tokens": usage.get("input_tokens", 0),
                             "output_tokens": usage.get("output_tokens", 0),
                             "cache_creation_tokens": write,
                             "cache_creation_5m_tokens": split["ephemeral_5m_input_tokens"] if split else write,
                             "cache_creation_1h_tokens": split["ephemeral_1h_input_tokens"] if split else 0,
                             "cache_read_tokens": usage.get("cache_read_input_tokens", 0)}
    for m in messages.values():
        r = RATES.get(m["model"])
        m["cost"] = None if r is None else sum(m[t] * rate for t, rate in zip(PRICED, r, strict=True)) / 1e6
    return messages


def _sums(messages: list[dict[str, Any]]) -> dict[str, Any]:
    priced = [m["cost"] for m in messages if m["cost"] is not None]
    return {"api_messages": len(messages), **{t: sum(m[t] for m in messages) for t in TOKENS},
            "cost_usd": sum(priced) if priced else None,
            "unpriced_messages": sum(1 for m in messages if m["cost"] is None)}


def _grouped(messages: dict[Any, dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for m in messages.values():
        if m[key] is not None:
            groups[m[key]].append(m)
    return {k: _sums(v) for k, v in groups.items()}


def _usage(run: Any, *args: str) -> dict[str, Any]:
    r = run("usage", "--json", *args)
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _rows(report: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    keep = ("api_messages", *TOKENS, "cost_usd", "unpriced_messages")
    return {r["key"]: {k: r[k] for k in keep} for r in report["rows"]}


def _close(a: dict[Any, dict[str, Any]], b: dict[Any, dict[str, Any]]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert {c: v for c, v in a[k].items() if c != "cost_usd"} == {c: v for c, v in b[k].items() if c != "cost_usd"}, k
        assert (a[k]["cost_usd"] is None) == (b[k]["cost_usd"] is None), k
        if a[k]["cost_usd"] is not None:
            assert a[k]["cost_usd"] == pytest.approx(b[k]["cost_usd"], rel=1e-9), k


@pytest.fixture
def ingested(run: Any, tmp_path: Path) -> dict[Any, dict[str, Any]]:
    files = F.write(tmp_path / "projects")
    r = run("ingest", "claude", str(tmp_path / "projects"))
    assert r.exit_code == 0, r.output
    assert files
    return count_by_hand(tmp_path / "projects")


def test_usage_equals_a_count_by_hand(run: Any, ingested: dict[Any, dict[str, Any]]) -> None:
    by_session = _usage(run, "--by", "session")
    _close(_rows(by_session), _grouped(ingested, "session"))
    total = {k: by_session["total"][k] for k in ("api_messages", *TOKENS, "cost_usd", "unpriced_messages")}
    _close({"all": total}, {"all": _sums(list(ingested.values()))})
    _close(_rows(_usage(run, "--by", "subagent")), _grouped(ingested, "subagent"))
    _close(_rows(_usage(run, "--by", "model")), _grouped(ingested, "model"))
    # the figures the fixture was built to show: last lines, not first ones; a resumed file's
    # repeated messages once; every subagent layout (sibling file, subagents/ file, inline sidechain)
    assert by_session["total"]["output_tokens"] == 118 + 77 + 230 + 0 + 96 + 64 + 33 + 410 + 58 + 40 + 51 + 88
    assert sum(m["first_output"] for m in ingested.values()) < by_session["total"]["output_tokens"]
    assert len(_usage(run, "--by", "subagent")["rows"]) == 3


def test_a_model_without_a_price_is_no_price_never_zero(run: Any, ingested: dict[Any, dict[str, Any]]) -> None:
    report = _usage(run, "--by", "model")
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["claude-experimental-9"]["cost_usd"] is None
    assert rows["claude-experimental-9"]["output_tokens"] == 33
    assert rows["<synthetic>"]["cost_usd"] == 0
    assert report["total"]["unpriced_models"] == ["claude-experimental-9"]
    assert report["prices"]["table"] == "evstore" and report["prices"]["as_of"] and report["prices"]["source"] == "package"
    text = run("usage", "--by", "model")
    assert text.exit_code == 0
    line = next(x for x in text.stdout.splitlines() if x.startswith("claude-experimental-9"))
    assert line.rstrip().endswith("no price")
    assert "1 unpriced" in text.stdout.splitlines()[-1]
    assert "claude-experimental-9" in text.stderr and "prices: table evstore" in text.stderr


def test_a_user_price_file_overrides_and_dates_apply(run: Any, ingested: dict[Any, dict[str, Any]],
                                                     tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    # sonnet 4.5 at one price up to 2025-11-06, another from then on: S1 (Nov 5) and S2's subagent (Nov 6)
    prices.write_text("""[table]\nname = "ours"\nas_of = "2025-12-01"\n
[[price]]\nmodel = "claude-sonnet-4-5"\neffective = "2025-01-01"\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1
cache_write_1h = 1\n
[[price]]\nmodel = "claude-sonnet-4-5"\neffective = "2025-11-06"\ninput = 2\noutput = 2\ncache_write = 2\ncache_read = 2
cache_write_1h = 2\n
[[price]]\nmodel = "claude-experimental-9"\neffective = "2025-11-07"\ninput = 9\noutput = 9\ncache_write = 9\ncache_read = 9\n""")
    report = _usage(run, "--by", "session", "--prices", str(prices))
    assert report["prices"] == {"table": "evstore+ours", "as_of": "2025-12-01", "source": f"package+{prices}",
                                "override": str(prices), "models": 13}

    def tokens(ms: list[dict[str, Any]]) -> int:
        return sum(m[t] for m in ms for t in PRICED)

    sonnet = [m for m in ingested.values() if m["model"] == "claude-sonnet-4-5-20250929"]
    s1 = [m for m in sonnet if m["session"] == F.S1]
    s2 = [m for m in sonnet if m["session"] == F.S2]
    haiku = [m for m in ingested.values() if m["session"] == F.S1 and m["model"].startswith("claude-haiku")]
    rows = {r["key"]: r for r in report["rows"]}
    assert rows[F.S1]["cost_usd"] == pytest.approx((tokens(s1) * 1 + sum(
        m["input_tokens"] * 1 + m["output_tokens"] * 5 + m["cache_creation_5m_tokens"] * 1.25
        + m["cache_creation_1h_tokens"] * 2 + m["cache_read_tokens"] * 0.1
        for m in haiku)) / 1e6)
    # S2: its sonnet messages at the later price; the experimental model's message (Nov 6) predates its price
    opus = [m for m in ingested.values() if m["session"] == F.S2 and m["model"].startswith("claude-opus")]
    assert rows[F.S2]["cost_usd"] == pytest.approx((tokens(s2) * 2 + sum(
        m["input_tokens"] * 15 + m["output_tokens"] * 75 + m["cache_creation_5m_tokens"] * 18.75
        + m["cache_creation_1h_tokens"] * 30 + m["cache_read_tokens"] * 1.5
        for m in opus)) / 1e6)
    assert rows[F.S2]["unpriced_messages"] == 1


def test_five_minute_and_one_hour_cache_writes_are_priced_apart(run: Any, ingested: dict[Any, dict[str, Any]],
                                                                 tmp_path: Path) -> None:
    """msg_a3 (Sonnet 4.5) splits its 250 cache-write tokens into 100 5-minute and 150 1-hour ones
    (``usage.cache_creation``); msg_a1 gives only the total (1,200): all 5-minute."""
    q = run("query", "SELECT message_id, cache_creation_tokens AS total, cache_creation_5m_tokens AS m5, "
                     "cache_creation_1h_tokens AS h1, cost_usd FROM usage WHERE message_id IN ('msg_a1', 'msg_a3') "
                     "ORDER BY message_id", "--json")
    assert q.exit_code == 0, q.output
    a1, a3 = json.loads(q.stdout)
    assert (a1["total"], a1["m5"], a1["h1"]) == (1200, 1200, 0)
    assert (a3["total"], a3["m5"], a3["h1"]) == (250, 100, 150)
    # $ per million: input 3, output 15, 5-minute write 3.75, 1-hour write 6, cache read 0.30
    assert a3["cost_usd"] == pytest.approx((2900 * 3 + 230 * 15 + 100 * 3.75 + 150 * 6 + 10700 * 0.3) / 1e6)
    assert a3["cost_usd"] == pytest.approx(0.016635)
    assert a1["cost_usd"] == pytest.approx((2400 * 3 + 118 * 15 + 1200 * 3.75 + 9000 * 0.3) / 1e6)
    # --json shows both kinds, per row and in the total (S1: 1,200 + 300 + 100 five-minute and its
    # subagent's 900, 150 one-hour)
    report = _usage(run, "--by", "session")
    s1 = next(r for r in report["rows"] if r["key"] == F.S1)
    assert (s1["cache_creation_tokens"], s1["cache_creation_5m_tokens"], s1["cache_creation_1h_tokens"]) == \
        (2650, 2500, 150)
    assert report["total"]["cache_creation_1h_tokens"] == 150
    assert report["total"]["cache_creation_5m_tokens"] + 150 == report["total"]["cache_creation_tokens"]
    # the text table splits them too (the data has 1-hour writes), and so does the metrics usage section
    text = run("usage", "--by", "session")
    assert text.exit_code == 0, text.output
    head, *_, total = text.stdout.splitlines()
    assert "cache_write_5m" in head and "cache_write_1h" in head
    cells = dict(zip(head.split(), total.split(), strict=False))
    assert (cells["cache_write_5m"], cells["cache_write_1h"]) == \
        (str(report["total"]["cache_creation_5m_tokens"]), "150")
    m = run("metrics", "--format", "json")
    assert m.exit_code == 0, m.output
    section = next(x for x in json.loads(m.stdout)["sections"] if x["name"] == "usage")
    assert sum(r["cache_write_1h"] or 0 for r in section["rows"]) == 150
    # a price row without a 1-hour price cannot price a message with 1-hour writes: "no price", not 0
    prices = tmp_path / "prices.toml"
    prices.write_text('[[price]]\nmodel = "claude-sonnet-4-5"\neffective = "2025-01-01"\ninput = 3\noutput = 15\n'
                      'cache_write = 3.75\ncache_read = 0.3\n')
    r = run("usage", "--json", "--by", "session", "--prices", str(prices))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    s1 = next(x for x in out["rows"] if x["key"] == F.S1)
    assert s1["unpriced_messages"] == 1 and "claude-sonnet-4-5-20250929" in out["total"]["unpriced_models"]
    assert any("cache_write_1h" in n for n in out["notes"])


def test_the_package_table_dates_the_one_hour_price() -> None:
    table = load_prices()
    new = table.price("claude-sonnet-4-5", "2025-10-01")
    assert new is not None and new.cache_write_1h == 2 * new.input and new.cache_write == 1.25 * new.input
    before = table.price("claude-3-5-sonnet", "2025-01-01")  # before the 1-hour cache existed
    after = table.price("claude-3-5-sonnet", "2025-05-01")
    assert before is not None and before.cache_write_1h is None
    assert after is not None and after.cache_write_1h == 6.0 and after.effective.isoformat() == "2025-04-11"


@pytest.mark.parametrize("content, says", [
    ("[[price]]\nmodel = 'x'\n", "each [[price]] needs model, effective"),
    ("not toml at all [", "is not valid TOML"),
    ("[[price]]\nmodel = 'x'\neffective = '2025-01-01'\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1\n"
     "colour = 'red'\n", "unknown field"),
])
def test_a_bad_price_file_names_itself(run: Any, tmp_path: Path, content: str, says: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(content)
    r = run("usage", "--prices", str(bad))
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: Price table {bad}") and says in r.stderr and " — " in r.stderr
    assert r.stdout == ""
    missing = run("usage", "--prices", str(tmp_path / "none.toml"))
    assert missing.exit_code == 1 and "Cannot read the price table" in missing.stderr


def test_by_day_since_and_project(run: Any, ingested: dict[Any, dict[str, Any]]) -> None:
    days = _rows(_usage(run, "--by", "day"))
    assert set(days) == {"2025-11-05", "2025-11-06"}
    late = _usage(run, "--by", "session", "--since", "2025-11-06")
    assert set(_rows(late)) == {F.S2}
    assert late["total"]["api_messages"] == days["2025-11-06"]["api_messages"]
    assert set(_rows(_usage(run, "--by", "project"))) == {"/work/shop"}


def test_a_task_costs_the_sessions_that_wrote_it(run: Any, tmp_path: Path) -> None:
    """The link fixture: one session (and its subagent) wrote PROJ-LINK's state versions."""
    project = tmp_path / "orch"
    project.mkdir()
    state = project / "agent-state.json"
    import os
    from datetime import datetime

    for data, at in L.VERSIONS:
        state.write_bytes(data.encode())
        t = datetime.fromisoformat(at).timestamp()
        os.utime(state, (t, t))
        assert run("ingest", "mapipe", str(state)).exit_code == 0
    main, _ = L.write_session(tmp_path / "projects", project)
    assert run("ingest", "claude", str(main.parent)).exit_code == 0
    report = _usage(run, "--by", "task")
    rows = {r["key"]: r for r in report["rows"]}
    task = next(k for k in rows if k is not None)
    assert rows[task]["label"].startswith(L.TASK)
    for name in BASE_TOKENS:
        assert rows[task][name] == L.RUN_TOTALS[name], name
    assert rows[task]["subagents"] == 1
    # the same figures in `evstore metrics TASK` (its usage section) and on the cross-run report
    m = run("metrics", task, "--format", "json")
    assert m.exit_code == 0, m.output
    usage = next(s for s in json.loads(m.stdout)["sections"] if s["name"] == "usage")
    for name in BASE_TOKENS:
        assert usage["summary"][name] == L.RUN_TOTALS[name], name
    assert usage["summary"]["cost_usd"] == pytest.approx(rows[task]["cost_usd"], abs=1e-4)  # rounded in reports
    html = tmp_path / "report.html"
    assert run("metrics", "--format", "html", "--out", str(html)).exit_code == 0
    assert "Model usage and cost (per model)" in html.read_text() and "claude-sonnet-4-5" in html.read_text()
    # and for notebooks, the views (evstore query, projections.analytics.open_analytics)
    q = run("query", "SELECT sum(output_tokens) AS out, sum(cost_usd) > 0 AS priced FROM usage", "--json")
    assert q.exit_code == 0, q.output
    assert json.loads(q.stdout) == [{"out": L.RUN_TOTALS["output_tokens"], "priced": True}]


@settings(deadline=None)  # DuckDB's first connection takes a while on a loaded machine
@given(st.sampled_from(["claude-sonnet-4-5", "claude-3-5-sonnet", "claude-opus-4-1", "x"]),
       st.sampled_from(["", "-20250929", "@20241022", "-20241022-v2:0", "-v1"]),
       st.sampled_from(["", "anthropic.", "us.anthropic.", "eu.anthropic."]), st.booleans())
def test_price_key_is_the_same_in_sql_and_python(base: str, suffix: str, prefix: str, upper: bool) -> None:
    model = prefix + base + suffix
    model = model.upper() if upper else model

    con = duckdb.connect()
    got = con.execute(f"SELECT {PRICE_KEY_SQL.format(col='$1')}", [model]).fetchone()
    con.close()
    assert got is not None and got[0] == price_key(model) == base


def test_package_prices_date_every_row() -> None:
    table = load_prices()
    assert table.price("claude-sonnet-4-5-20250929", "2025-10-01") is not None
    assert table.price("claude-sonnet-4-5", "2025-09-01") is None  # before it was sold
    assert table.price("claude-nobody-1") is None


def test_serve_shows_costs_on_the_runs_index_and_usage_on_a_session_page(run: Any, store_url: str,
                                                                          ingested: dict[Any, dict[str, Any]],
                                                                          tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from projections.serve.app import ServeConfig, create_app

    by_session = _grouped(ingested, "session")
    with TestClient(create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "a"))),
                    base_url="http://127.0.0.1") as c:
        api = c.get("/api/runs").json()
        assert api["usage"][F.S1]["output_tokens"] == by_session[F.S1]["output_tokens"]
        assert api["usage"][F.S1]["cost_usd"] == pytest.approx(by_session[F.S1]["cost_usd"])
        assert api["usage"][F.S2]["unpriced_messages"] == 1
        page = c.get("/").text
        assert '<th class="cost">cost</th>' in page
        assert f"${by_session[F.S1]['cost_usd']:,.2f}" in page and "+ 1 unpriced" in page
        session = c.get(f"/runs/{F.S2}").text
        assert 'id="usage"' in session and "claude-experimental-9" in session and "no price" in session
        assert f"{F.S2}/agent-{F.A_SUB}" in session  # its subagent, on a row of its own


def test_the_metrics_usage_section_is_the_count_by_hand_per_model_and_in_all(run: Any,
                                                                             ingested: dict[Any, dict[str, Any]]) -> None:
    """`evstore metrics`' usage section: a row per model and the summary of every model together, from one statement
    (its last row is the total: projections.analytics.facts._usage_total), each the count by hand (costs as the report
    rounds them, to four places); with no API message in scope, no row and a summary of nothing (zero messages, no
    sum), as a statement over no row gives."""
    keep = ("api_messages", *BASE_TOKENS, "unpriced_messages")

    def same(got: dict[str, Any], want: dict[str, Any]) -> None:  # (a sum over messages without a count: NULL)
        assert {k: got[k] or 0 for k in keep} == {k: want[k] for k in keep}
        assert got["cost_usd"] == pytest.approx(want["cost_usd"], abs=5e-5)

    r = run("metrics", "--format", "json")
    assert r.exit_code == 0, r.output
    section = next(s for s in json.loads(r.stdout)["sections"] if s["name"] == "usage")
    assert all(list(row) == section["columns"] for row in section["rows"])  # nothing of the total's statement left
    by_model = _grouped(ingested, "model")
    assert {row["model"] for row in section["rows"]} == set(by_model) and len(by_model) > 1
    for row in section["rows"]:
        same(row, by_model[row["model"]])
    summary = section["summary"]
    assert list(summary) == ["sessions", "api_messages", "input_tokens", "output_tokens", "cache_creation_tokens",
                             "cache_write_5m", "cache_write_1h", "cache_read_tokens", "cost_usd", "unpriced_messages"]
    same(summary, _sums(list(ingested.values())))
    assert summary["sessions"] == len({m["session"] for m in ingested.values()})
    assert run("append", "NOTES-1", "demo.note", "--data", '{"a": 1}').exit_code == 0
    r = run("metrics", "--format", "json", "--since", "2026-06-01")  # the note alone (the transcripts: 2025-11)
    assert r.exit_code == 0, r.output
    section = next(s for s in json.loads(r.stdout)["sections"] if s["name"] == "usage")
    assert section["rows"] == [] and section["summary"]["api_messages"] == 0 and section["summary"]["sessions"] == 0
    assert section["summary"]["cost_usd"] is None and section["summary"]["input_tokens"] is None
