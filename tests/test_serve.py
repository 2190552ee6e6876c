"""``evstore serve`` over HTTP: pages, the JSON API (same keys as the CLI's --json), hostile data,
token-guarded writes, live mode and 20 concurrent writers on a real uvicorn server (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import httpx2
import pytest
from click.testing import CliRunner, Result
from conftest import migrated
from serve_fixtures import LOCAL, http_client, serving
from starlette.testclient import TestClient

from eventstore import config
from eventstore.cli import register
from eventstore.store import NewEvent
from projections.demo import run_demo
from projections.runs import IndexedEventStore
from projections.serve import ServeConfig, create_app, is_loopback
from projections.serve.app import CSP

TOKEN = "s3cret-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


@pytest.fixture
def demo_url(store_url: str) -> str:
    store = IndexedEventStore(store_url)
    try:
        run_demo(store, runs=6, seed=3)
    finally:
        store.close()
    return store_url


@pytest.fixture
def client(demo_url: str, tmp_path) -> Iterator[TestClient]:
    app = create_app(ServeConfig(url=demo_url, token=TOKEN, analytics_dir=str(tmp_path / "analytics")))
    with TestClient(app, base_url=LOCAL) as c:
        yield c


@pytest.fixture
def empty(store_url: str) -> Iterator[TestClient]:
    """A client of an empty store that takes writes."""
    with TestClient(create_app(ServeConfig(url=store_url, token=TOKEN)), base_url=LOCAL) as c:
        yield c


@pytest.fixture
def sqlite_demo(sqlite_url: str, tmp_path) -> Iterator[tuple[str, TestClient]]:
    """Metrics are DuckDB over Parquet whatever the store: one backend is enough."""
    url = migrated(sqlite_url)
    store = IndexedEventStore(url)
    try:
        run_demo(store, runs=6, seed=3)
    finally:
        store.close()
    with TestClient(create_app(ServeConfig(url=url, analytics_dir=str(tmp_path / "analytics"))), base_url=LOCAL) as c:
        yield url, c


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args], catch_exceptions=False)


def post(c: TestClient | httpx2.Client, stream: str, events: list[dict], expected=None, headers=AUTH):
    body: dict = {"events": events}
    if expected is not None:
        body["expected_version"] = expected
    return c.post(f"/api/streams/{stream}/events", json=body, headers=headers)


# ---------------------------------------------------------------- read-only pages and API


def test_runs_page_api_and_cli_agree(client: TestClient, demo_url: str) -> None:
    cli_rows = [json.loads(line) for line in cli(demo_url, "runs", "--json").stdout.splitlines()]
    page = client.get("/api/runs", params={"size": 500}).json()
    assert page["runs"] == cli_rows and page["total"] == len(cli_rows) == 6
    # Paginated, newest first, each row links to its run.
    first, second = client.get("/api/runs?size=4").json(), client.get("/api/runs?size=4&page=2").json()
    assert [r["stream_id"] for r in first["runs"] + second["runs"]] == [r["stream_id"] for r in cli_rows]
    assert first["pages"] == 2
    html = client.get("/?size=4").text
    assert [f"/runs/{r['stream_id']}" for r in cli_rows[:4]] == re.findall(r'class="run-link" href="([^"]+)"', html)
    assert 'rel="next" href="/?page=2&amp;size=4"' in html
    # The `runs` filters.
    dialect = cli_rows[0]["dialect"]
    filtered = client.get("/api/runs", params={"dialect": dialect}).json()["runs"]
    assert filtered == [json.loads(line) for line in cli(demo_url, "runs", "--json", "--dialect", dialect).stdout.splitlines()]
    target = cli_rows[-1]
    assert [r["stream_id"] for r in client.get("/api/runs", params={"q": target["stream_id"].upper()}).json()["runs"]] \
        == [target["stream_id"]]
    assert client.get("/api/runs", params={"since": "2999-01-01"}).json()["total"] == 0
    bad = client.get("/api/runs", params={"since": "yesterday"})
    assert bad.status_code == 400 and "--since expects an ISO date" in bad.json()["error"]


def test_query_values_stay_data(client: TestClient) -> None:
    """Search text and filters are bound parameters: SQL syntax and LIKE wildcards match literally."""
    for q in ("' OR 1=1 --", "%", "_", "\\", "demo-0000_"):
        assert client.get("/api/runs", params={"q": q}).json()["total"] == 0, q
    assert client.get("/api/runs", params={"dialect": "x' OR '1'='1"}).json()["total"] == 0
    assert client.get("/api/runs", params={"page": "1; DROP TABLE events"}).status_code == 400
    assert client.get("/api/runs").json()["total"] == 6


def test_run_page_api_and_cli_agree(client: TestClient, demo_url: str) -> None:
    sid = [json.loads(line) for line in cli(demo_url, "runs", "--json").stdout.splitlines()][0]["stream_id"]
    log_lines = [json.loads(line) for line in cli(demo_url, "log", sid, "--json").stdout.splitlines()]
    assert client.get(f"/api/runs/{sid}/events").json() == log_lines
    assert client.get(f"/api/runs/{sid}/events?after=2&limit=3").json() == log_lines[2:5]
    state = client.get(f"/api/runs/{sid}/state", params={"version": 3}).json()
    assert state["doc"] == json.loads(cli(demo_url, "replay", sid, "--upto", "3", "--json").stdout)
    assert (state["version"], state["stream_version"]) == (3, len(log_lines))
    patch = client.get(f"/api/runs/{sid}/diff", params={"from": 2, "to": 5}).json()
    assert patch == json.loads(cli(demo_url, "replay", sid, "--diff", "2", "5", "--json").stdout) and patch

    page = client.get(f"/runs/{sid}", params={"version": 3, "from": 2, "to": 5})
    assert page.status_code == 200
    text_lines = cli(demo_url, "log", sid, "--no-findings").stdout.splitlines()
    assert len(re.findall(r'<tr id="v\d+">', page.text)) == len(log_lines) == len(text_lines)
    assert "State document at version 3 of" in page.text and "<details" in page.text
    assert 'id="diff"' in page.text and "sbs-replace" in page.text or "sbs-insert" in page.text
    assert f"{len(patch)} operation" in page.text
    # Every timeline summary is the one `evstore log` prints.
    for line in text_lines[:10]:
        summary = line.split(None, 4)[-1].strip()
        assert summary[:60].replace("&", "&amp;").replace('"', "&#34;").replace("'", "&#39;") \
            .replace("<", "&lt;").replace(">", "&gt;") in page.text
    # A task id redirects to its stream; unknown runs and bad versions are errors, not tracebacks.
    assert client.get("/runs/no-such-run").status_code == 404
    assert client.get(f"/api/runs/{sid}/state?version=99999").status_code == 400
    assert client.get(f"/api/runs/{sid}/diff?from=1").status_code == 400
    assert 'id="problem"' in client.get(f"/runs/{sid}?version=99999").text


def test_ingested_versions_show_their_source(store_url: str, tmp_path) -> None:
    from eventstore.dialects import get_dialect
    from eventstore.ingest import ingest

    store = IndexedEventStore(store_url)
    try:
        d = get_dialect("generic")
        files = []
        for i, doc in enumerate([{"a": 1}, {"a": 2, "b": [1, 2]}]):
            f = tmp_path / f"state-{i}.json"
            f.write_text(json.dumps(doc))
            files.append(f)
        results = list(ingest(store, d, files, stream="gen-1"))
    finally:
        store.close()
    with TestClient(create_app(ServeConfig(url=store_url)), base_url=LOCAL) as c:
        v = results[-1].version
        html = c.get("/runs/gen-1", params={"version": v}).text
        assert "Ingested from" in html and str(files[-1]) in html


def test_metrics_page_renders_the_report_and_its_charts(sqlite_demo: tuple[str, TestClient], tmp_path) -> None:
    url, client = sqlite_demo
    analytics = ["--analytics-dir", str(tmp_path / "analytics")]
    assert client.get("/api/metrics").json() == json.loads(cli(url, "metrics", "--format", "json", *analytics).stdout)
    html = client.get("/metrics").text
    reference = cli(url, "metrics", "--format", "html", "--no-refresh", *analytics).stdout
    assert re.findall(r'<section id="([^"]+)"', html) == re.findall(r'<section id="([^"]+)"', reference)
    assert html.count('<svg class="chart"') == reference.count('<svg class="chart"') > 0
    runs = [json.loads(line) for line in cli(url, "runs", "--json").stdout.splitlines()]
    dialect, sid = runs[0]["dialect"], runs[0]["stream_id"]
    scoped = client.get("/metrics", params={"dialect": dialect}).text  # the same filters as `metrics`
    assert f"dialect={dialect}, runs={sum(r['dialect'] == dialect for r in runs)}" in scoped
    # Filters are bound parameters in DuckDB too: a quote is data, and a filter matching nothing is named.
    bad = client.get("/api/metrics", params={"project": "x' OR '1'='1"})
    assert bad.status_code == 400 and bad.json()["error"].startswith('No run has --project "x\' OR \'1\'=\'1"')
    assert "No run has --dialect" in client.get("/metrics", params={"dialect": "nope"}).text
    one = client.get(f"/runs/{sid}/metrics").text
    assert f"stream={sid}" in one and '<svg class="chart"' in one


def test_openapi_documents_every_api_route(empty: TestClient) -> None:
    client = empty
    spec = client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    routes = {r.path.replace(":path", "") for r in client.app.routes
              if getattr(r, "path", "").startswith(("/api/", "/hooks/"))}
    assert routes == set(spec["paths"]), routes ^ set(spec["paths"])


# ---------------------------------------------------------------- hostile data


def test_hostile_values_render_as_text_under_a_strict_csp(empty: TestClient) -> None:
    client = empty
    hostile_stream = "evil-<b>run</b>"
    r = post(client, hostile_stream, [{"type": "demo.note", "data": {"text": HOSTILE, "ctl": "a\x00b\x1b[31m"},
                                       "meta": {"findings": [{"path": "/x", "code": "<i>c</i>", "message": HOSTILE}]}},
                                      {"type": "demo.note", "data": {"long": "x" * 100_000}}])
    assert r.status_code == 201, r.text
    for url in ("/", f"/runs/{hostile_stream}", "/integrity", "/?q=<script>", f"/runs/{hostile_stream}?version=1"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert page.headers["content-security-policy"] == CSP
        assert "<script>window" not in page.text and "<img" not in page.text and "<b>run" not in page.text, url
        assert "\x00" not in page.text and "\x1b" not in page.text
    run_page = client.get(f"/runs/{hostile_stream}").text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in run_page
    assert "&lt;i&gt;c&lt;/i&gt;" in run_page
    assert re.findall(r"<script[^>]*>", run_page) == ['<script src="/static/app.js" defer>']
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "default-src 'none'" in CSP
    assert client.get(f"/api/runs/{hostile_stream}/events").json()[0]["data"]["text"] == HOSTILE


# ---------------------------------------------------------------- writes


def test_writes_need_a_configured_token(store_url: str) -> None:
    demo_url = store_url
    with TestClient(create_app(ServeConfig(url=demo_url)), base_url=LOCAL) as c:
        r = post(c, "w-1", [{"type": "demo.note", "data": {}}])
        assert r.status_code == 403 and "writes are disabled" in r.json()["error"]
        assert c.post("/api/verify", headers=AUTH).status_code == 403
        assert "read-only" in c.get("/").text
    with TestClient(create_app(ServeConfig(url=demo_url, token=TOKEN)), base_url=LOCAL) as c:
        r = post(c, "w-1", [{"type": "demo.note", "data": {}}], headers={})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert post(c, "w-1", [{"type": "demo.note", "data": {}}],
                    headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert post(c, "w-1", [{"type": "demo.note", "data": {}}],
                    headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert c.get("/api/runs/w-1/events").status_code == 404  # nothing was written


def test_token_holders_append_is_visible_on_the_run_page_and_in_log(empty: TestClient, store_url: str) -> None:
    client, demo_url = empty, store_url
    eid = str(uuid.uuid4())
    r = post(client, "PROJ-HTTP", [{"type": "demo.note", "data": {"text": "over http"}, "event_id": eid},
                                   {"type": "demo.note", "data": {"text": "second"}, "meta": {"who": "ci"},
                                    "occurred_at": "2026-01-02T03:04:05Z"}], expected="no-stream")
    assert r.status_code == 201
    assert r.json() == {"stream": "PROJ-HTTP", "version": 2, "positions": r.json()["positions"], "duplicate": False}
    assert "over http" in client.get("/runs/PROJ-HTTP").text
    log = cli(demo_url, "log", "PROJ-HTTP")
    assert log.exit_code == 0 and "over http" in log.output and "2026-01-02 03:04:05" in log.output
    # Idempotent retry: same id and content is a no-op success; the same id with other content a conflict.
    again = post(client, "PROJ-HTTP", [{"type": "demo.note", "data": {"text": "over http"}, "event_id": eid}])
    assert again.status_code == 200 and again.json()["duplicate"] is True and again.json()["version"] == 1
    clash = post(client, "PROJ-HTTP", [{"type": "demo.note", "data": {"text": "changed"}, "event_id": eid}])
    assert clash.status_code == 409
    # Optimistic concurrency: the Python API's message, as a 409.
    stale = post(client, "PROJ-HTTP", [{"type": "demo.note", "data": {}}], expected=1)
    assert stale.status_code == 409 and stale.json() == {
        "error": 'Stream "PROJ-HTTP" is at version 2, expected 1; re-read and retry.', "status": 409,
        "stream_version": 2}
    assert post(client, "PROJ-HTTP", [{"type": "demo.note", "data": {}}], expected=2).json()["version"] == 3
    assert len(client.get("/api/runs/PROJ-HTTP/events").json()) == 3


BAD_BODIES = [
    (b"{not json", "request body"),
    (b'{"events": []}', "non-empty list"),
    (b'[]', "must be a JSON object"),
    (b'{"events": [{"type": "a", "data": {}}], "extra": 1}', "unknown key(s) extra"),
    (b'{"events": [{"type": "a", "data": {}, "stream": "x"}]}', "events[0]: unknown key(s) stream"),
    (b'{"events": [{"data": {}}]}', '"type" must be a non-empty string'),
    (b'{"events": [{"type": "a", "data": [1]}]}', "must be a JSON object"),
    (b'{"events": [{"type": "a", "data": {"x": NaN}}]}', "request body"),
    (b'{"events": [{"type": "a", "event_id": "nope"}]}', "is not a UUID"),
    (b'{"events": [{"type": "a"}], "expected_version": -1}', "expected_version"),
    (b'{"events": [{"type": "a"}, {"type": "b", "data": {"x": "\\ud800"}}]}', "events[1]"),
]


def test_bad_append_bodies_are_named_and_write_nothing(sqlite_url: str) -> None:
    with TestClient(create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN)), base_url=LOCAL) as c:
        for body, message in BAD_BODIES:
            r = c.post("/api/streams/bad/events", content=body, headers={**AUTH, "content-type": "application/json"})
            assert r.status_code == 400 and message in r.json()["error"], (body, r.text)
        assert c.get("/api/runs/bad/events").status_code == 404


def test_size_limits_answer_413(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "MAX_EVENT_BYTES", 1000)
    with TestClient(create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN, max_body=5000)), base_url=LOCAL) as c:
        r = post(c, "big", [{"type": "a", "data": {"x": "y" * 2000}}])
        assert r.status_code == 413 and "exceeds the limit of 1000 bytes" in r.json()["error"]
        r = post(c, "big", [{"type": "a", "data": {"x": "y" * 900}}] * 6)
        assert r.status_code == 413 and "exceeds the limit of 5000 bytes" in r.json()["error"]
        assert post(c, "big", [{"type": "a", "data": {"x": "y" * 900}}]).status_code == 201


# ---------------------------------------------------------------- integrity


def test_integrity_page_and_verify_for_token_holders(empty: TestClient, store_url: str) -> None:
    client = empty
    for sid in ("a", "b", "c"):
        post(client, sid, [{"type": "demo.note", "data": {}}])
    page = client.get("/integrity").text
    assert "No full verify has run" in page and page.count(">not verified<") == 3
    assert client.post("/integrity/verify", data={"token": "wrong"}).status_code == 403
    assert client.post("/integrity/verify").status_code == 401
    r = client.post("/integrity/verify", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    page = client.get("/integrity").text
    assert "3 streams" in page and "all hash chains intact" in page and page.count(">verified<") == 3
    post(client, "late", [{"type": "demo.note", "data": {}}])
    post(client, "b", [{"type": "demo.note", "data": {}}])
    status = {s["stream"]: s["status"] for s in client.get("/api/integrity").json()["streams"]}
    assert status == {"a": "verified", "b": "changed since", "c": "verified", "late": "not verified"}
    api = client.post("/api/verify", headers=AUTH).json()
    assert api == json.loads(cli(store_url, "verify", "--json").stdout)


def test_integrity_shows_and_checks_a_configured_seal(sqlite_url: str, tmp_path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k" * 32)
    url = migrated(sqlite_url)
    store = IndexedEventStore(url)
    store.append("one", [NewEvent("demo.note", {})])
    store.close()
    cp, signed = tmp_path / "cp.json", tmp_path / "cp-ed25519.json"
    assert cli(url, "seal", "--out", str(cp)).exit_code == 0
    assert cli(url, "keygen", "--out", str(tmp_path / "k")).exit_code == 0
    assert cli(url, "seal", "--out", str(signed), "--key-file", str(tmp_path / "k.key")).exit_code == 0
    with TestClient(create_app(ServeConfig(url=url, token=TOKEN, seal=cp)), base_url=LOCAL) as c:
        assert json.loads(cp.read_text())["merkle_root"] in c.get("/integrity").text
        report = c.post("/api/verify", headers=AUTH).json()
        assert report["ok"] and report["seal"] == {"file": str(cp), "ok": True}
        assert "holds" in c.get("/integrity").text
        cp.write_text(cp.read_text().replace('"event_count": ', '"event_count": 1'))
        bad = c.post("/api/verify", headers=AUTH)
        assert bad.status_code == 409 and "signature does not verify" in bad.text
        assert "FAILS" in c.get("/integrity").text
    with TestClient(create_app(ServeConfig(url=url, token=TOKEN, seal=signed,
                                           public_key=tmp_path / "k.pub")), base_url=LOCAL) as c:
        assert c.post("/api/verify", headers=AUTH).json()["seal"] == {"file": str(signed), "ok": True}


# ---------------------------------------------------------------- the command


def test_serve_refuses_a_public_address_without_a_token(store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path) -> None:
    monkeypatch.delenv("EVSTORE_SERVE_TOKEN", raising=False)
    r = CliRunner().invoke(register(), ["--url", store_url, "serve", "--host", "0.0.0.0"])
    assert r.exit_code == 1 and r.output.startswith("Error: Refusing to listen on 0.0.0.0 without a token")
    empty = tmp_path / "token"
    empty.write_text("\n")
    r = CliRunner().invoke(register(), ["--url", store_url, "serve", "--token-file", str(empty)])
    assert r.exit_code == 1 and "is empty" in r.output
    assert all(map(is_loopback, ["127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.org"]))


# ---------------------------------------------------------------- a real server


def test_live_mode_streams_new_events(store_url: str) -> None:
    app = create_app(ServeConfig(url=store_url, token=TOKEN, live_poll=0.05))
    with serving(app) as base, http_client(base, timeout=10) as http:
        assert post(http, "live-1", [{"type": "demo.note", "data": {}}] * 2).status_code == 201
        with http.stream("GET", "/api/runs/live-1/live", params={"after": 1}) as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            lines = (line for line in live.iter_lines() if line)
            assert next(lines) == "retry: 2000"
            assert [next(lines) for _ in range(2)] == ["id: 2", "event: append"]
            assert json.loads(next(lines)[6:])["version"] == 2
            posted: list[int] = []

            def append_later() -> None:  # on its own client, joined before this one closes
                time.sleep(0.2)
                with http_client(base, timeout=10) as other:
                    posted.append(post(other, "live-1", [{"type": "demo.note",
                                                          "data": {"text": "<b>live</b>"}}]).status_code)

            poster = threading.Thread(target=append_later)
            poster.start()
            got = [next(lines) for _ in range(3)]
            poster.join(30)
        assert posted == [201]
        assert got[:2] == ["id: 3", "event: append"]
        row = json.loads(got[2][6:])
        assert row["version"] == 3 and row["type"] == "demo.note" and "<b>live</b>" in row["summary"]


def _writer(base: str, stream: str, n: int, exact: bool, ids: list[str], errors: list[str]) -> None:
    with http_client(base, timeout=60) as http:
        for i in range(n):
            eid = str(uuid.uuid4())
            events = [{"type": "demo.note", "data": {"i": i, "k": k}, "event_id": eid if k == 0 else None}
                      for k in range(3)]
            events = [{k: v for k, v in e.items() if v is not None} for e in events]
            expected: object = "no-stream" if exact else None
            for _ in range(200):
                r = post(http, stream, events, expected)
                if r.status_code == 409:  # another writer won: retry at the version the conflict names
                    expected = r.json()["stream_version"]
                    continue
                if r.status_code not in (200, 201):
                    errors.append(r.text)
                break
            else:
                errors.append("gave up after 200 conflicts")
            ids.append(eid)


@pytest.mark.parametrize("writers, per_writer", [(20, 3)])
def test_concurrent_writers_over_http_lose_nothing(store_url: str, writers: int, per_writer: int) -> None:
    app = create_app(ServeConfig(url=store_url, token=TOKEN))
    ids: list[str] = []
    errors: list[str] = []
    with serving(app) as base:
        threads = [threading.Thread(target=_writer, args=(base, "race", per_writer, w % 2 == 0, ids, errors))
                   for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with http_client(base) as http:
            events = http.get("/api/runs/race/events").json()
        # Database work stays on the server's fixed threads: one held connection each, never the
        # engine's whole pool (anyio's up to 40 threads exhausted it and answered 500 after 30 s).
        assert app.state.server.store.engine.pool.checkedout() <= ServeConfig().workers
    assert errors == []
    assert [e["version"] for e in events] == list(range(1, writers * per_writer * 3 + 1))
    assert sorted(e["event_id"] for e in events if e["data"]["k"] == 0) == sorted(ids)
    positions = [e["position"] for e in events]
    assert positions == sorted(positions)


def test_serve_takes_the_old_checkpoint_spelling_with_a_warning(store_url: str, tmp_path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve --checkpoint FILE` (and EVSTORE_SERVE_CHECKPOINT) still configure the seal, warning on stderr."""
    import projections.serve as serve_pkg
    from projections import prefork

    made: list[ServeConfig] = []
    monkeypatch.setattr(serve_pkg, "create_app", lambda cfg: made.append(cfg) or "app")  # no server, no store
    monkeypatch.setattr(prefork, "serve", lambda sock, build, **kw: None)
    monkeypatch.setattr(prefork, "listen", lambda host, port: socket.socket())  # nothing bound
    sealed = tmp_path / "seal.json"
    r = CliRunner().invoke(register(), ["--url", migrated(store_url), "serve", "--checkpoint", str(sealed)])
    assert r.exit_code == 0, r.output
    assert "Warning: `serve --checkpoint` and EVSTORE_SERVE_CHECKPOINT are deprecated; use --seal" in r.stderr
    monkeypatch.setenv("EVSTORE_SERVE_CHECKPOINT", str(sealed))
    r = CliRunner().invoke(register(), ["--url", migrated(store_url), "serve"])
    assert r.exit_code == 0 and "deprecated" in r.stderr
    r = CliRunner().invoke(register(), ["--url", migrated(store_url), "serve", "--seal", str(sealed)])
    assert r.exit_code == 0 and "deprecated" in r.stderr  # the environment still names the old variable
    monkeypatch.delenv("EVSTORE_SERVE_CHECKPOINT")
    r = CliRunner().invoke(register(), ["--url", migrated(store_url), "serve", "--seal", str(sealed)])
    assert r.exit_code == 0 and "deprecated" not in r.stderr
    assert [cfg.seal for cfg in made] == [sealed] * 4


def test_checkpoints_and_proofs_served(sqlite_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`evstore serve` publishes the latest checkpoint, answers inclusion and consistency proofs (the
    files `evstore prove` prints, which verify-proof accepts), and the integrity page lists the
    checkpoints with their witnesses and shows a run's inclusion proof (escaped)."""
    from starlette.testclient import TestClient

    from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner
    from eventstore.tlog.witness import add_cosignatures
    from projections.serve import ServeConfig, create_app

    url = migrated(sqlite_url)
    assert cli(url, "keygen", "--out", str(tmp_path / "log"), "--name", "log.example").exit_code == 0
    hostile = "<b>x</b>"
    for sid in (hostile, "b"):
        assert cli(url, "append", sid, "demo.note", "--data", "{}").exit_code == 0
    with TestClient(create_app(ServeConfig(url=url)), base_url=LOCAL) as c:
        r = c.get("/api/checkpoint")
        assert r.status_code == 404 and "no checkpoint is recorded" in r.json()["error"]
        assert "No checkpoint recorded yet" in c.get("/integrity").text
        assert cli(url, "checkpoint", "--key-file", str(tmp_path / "log.key"), "--out", str(tmp_path / "cp1")
                   ).exit_code == 0
        assert cli(url, "append", "b", "demo.note", "--data", "{}").exit_code == 0
        assert cli(url, "checkpoint", "--key-file", str(tmp_path / "log.key"), "--out", str(tmp_path / "cp2")
                   ).exit_code == 0
        r = c.get("/api/checkpoint")
        assert r.status_code == 200 and r.text == (tmp_path / "cp2").read_text()
        assert r.headers["content-type"].startswith("text/plain")
        proof = c.get("/api/proofs/inclusion", params={"stream": hostile, "version": 1}).json()
        assert proof == json.loads(cli(url, "prove", hostile, "--version", "1", "--checkpoint",
                                       str(tmp_path / "cp2")).stdout)
        (tmp_path / "p.json").write_text(json.dumps(proof))
        assert cli(url, "verify-proof", str(tmp_path / "p.json"), "--vkey", str(tmp_path / "log.vkey")).exit_code == 0
        by_id = c.get("/api/proofs/inclusion", params={"event_id": proof["event_id"]}).json()
        assert by_id == proof
        con = c.get("/api/proofs/consistency", params={"old": 2}).json()
        assert (con["old_size"], con["new_size"]) == (2, 3) and con["old_checkpoint"] == (tmp_path / "cp1").read_text()
        assert c.get("/api/proofs/consistency", params={"old": 7}).status_code == 404
        assert c.get("/api/proofs/inclusion", params={"stream": "b", "version": 9}).status_code == 404
        assert c.get("/api/proofs/inclusion", params={"stream": "b"}).status_code == 400
        page = c.get("/integrity", params={"stream": hostile, "version": "1"}).text
        assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
        assert proof["inclusion"][0] in page and "log.example" in page and ">none<" in page
        assert "No version 5 of stream" in c.get("/integrity", params={"stream": "b", "version": "5"}).text
    # a witness's cosignature, as `checkpoint --witness` adds it, is listed with its time
    witness = NoteSigner.generate("witness.example", ALG_COSIGNATURE_V1)
    body = (tmp_path / "cp2").read_text().split("\n\n")[0] + "\n"
    cosigned = add_cosignatures((tmp_path / "cp2").read_text(), [witness.signature_line(body, timestamp=1_800_000_000)])
    from eventstore import checkpoints
    from eventstore.store import EventStore

    with EventStore(url) as store:
        checkpoints.record_checkpoint(store, cosigned, checkpoints.read_checkpoint(cosigned))
    with TestClient(create_app(ServeConfig(url=url)), base_url=LOCAL) as c:
        rows = c.get("/api/integrity").json()["checkpoints"]
        assert [w["name"] for w in rows[0]["witnesses"]] == ["witness.example"]
        assert rows[0]["witnesses"][0]["cosigned_at"] == "2027-01-15T08:00:00Z"
        assert "witness.example+" in c.get("/integrity").text
