"""``evstore serve`` in a real browser: Playwright drives Debian's Chromium (never a downloaded one)
through the runs page, a run, a diff between two picked versions, live mode and the metrics charts;
hostile payloads must render as text and run nothing; any console error fails the test.
Screenshots are kept under the test's tmp dir (printed at the end)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import migrated
from playwright.sync_api import sync_playwright
from serve_fixtures import serving

from eventstore.store import NewEvent
from projections.demo import run_demo
from projections.runs import IndexedEventStore
from projections.serve import ServeConfig, create_app

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def test_browse_runs_diff_live_metrics_and_hostile_data(sqlite_url: str, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium; run `apt-get install chromium`")
    url = migrated(sqlite_url)
    store = IndexedEventStore(url)
    try:
        run_demo(store, runs=4, seed=5, dialects=["mapipe"])
        store.append("evil", [NewEvent("demo.note", {"text": HOSTILE}, meta={"findings": [
            {"path": "/x", "code": "<b>bold</b>", "message": HOSTILE}]})])
        longest = max(store.list_streams(), key=lambda s: s.version)
        shots = tmp_path / "screenshots"
        shots.mkdir()
        app = create_app(ServeConfig(url=url, analytics_dir=str(tmp_path / "analytics"), live_poll=0.1))
        problems: list[str] = []
        with serving(app) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            # (closing live mode aborts its EventSource request: that one is expected)
            page.on("requestfailed", lambda r: None if r.failure == "net::ERR_ABORTED" else
                    problems.append(f"request failed: {r.url} {r.failure}"))

            # Runs page -> a run -> two versions -> the diff.
            page.goto(base + "/")
            assert page.locator("a.run-link").count() == 5
            page.screenshot(path=str(shots / "runs.png"), full_page=True)
            page.locator("a.run-link", has_text=longest.stream_id).first.click()
            page.wait_for_url(f"**/runs/{longest.stream_id}")
            assert page.locator("#timeline tbody tr").count() == longest.version
            page.select_option("#pick-from", "2")
            page.select_option("#pick-to", "6")
            page.click("#show")
            page.wait_for_selector("#diff")
            assert page.locator("#diff h2").inner_text() == "Diff: version 2 → 6"
            assert page.locator("table.patch tbody tr").count() > 0
            assert page.locator("table.side-by-side tr.sbs-replace, table.side-by-side tr.sbs-insert").count() > 0
            page.locator("#diff").screenshot(path=str(shots / "diff.png"))
            # The state document folds without script: <details> toggles.
            node = page.locator("#state details.j-node details.j-node").first
            was_open = node.evaluate("d => d.open")
            node.locator("summary").first.click()
            assert node.evaluate("d => d.open") is not was_open

            # Live mode: an event appended elsewhere shows up in the open page.
            page.click("#live-toggle")
            page.wait_for_function("() => document.getElementById('live-status').textContent.length > 0")
            store.append(longest.stream_id, [NewEvent("demo.note", {"text": "appended while watching"})])
            page.wait_for_selector(f"#v{longest.version + 1}", timeout=10_000)
            assert "appended while watching" in page.locator(f"#v{longest.version + 1}").inner_text()
            page.screenshot(path=str(shots / "run.png"), full_page=False)
            page.click("#live-toggle")

            # Metrics: the charts are drawn (bars with a real size).  The first visit computes the report and
            # is sent section by section; the next one is the kept body, the same page.
            page.goto(base + "/metrics")
            page.wait_for_selector("svg.chart rect.bar")
            sizes = page.eval_on_selector_all("svg.chart rect.bar", "rs => rs.map(r => r.getBoundingClientRect().width)")
            assert len(sizes) > 3 and all(w > 0 for w in sizes)
            assert page.locator("svg.chart").count() >= 3
            streamed = page.inner_html("main")
            page.reload()
            page.wait_for_selector("svg.chart rect.bar")
            assert page.inner_html("main") == streamed and page.locator("#metrics-error").count() == 0
            page.screenshot(path=str(shots / "metrics.png"), full_page=True)

            # Hostile data: shown as text, nothing runs, no element injected.
            page.goto(base + "/runs/evil")
            summary = page.locator("#v1 td.summary").inner_text()
            assert HOSTILE in summary.replace('\\"', '"') and "<b>bold</b>" in summary
            assert page.evaluate("() => window.__pwned") is None
            assert page.locator("main img, main b").count() == 0
            page.screenshot(path=str(shots / "hostile.png"), full_page=True)
            browser.close()
    finally:
        store.close()
    assert problems == []
    print(f"screenshots: {shots}", json.dumps(sorted(p.name for p in shots.iterdir())))


def test_a_browser_reads_beyond_loopback_with_the_token_and_sees_rtl_overrides(sqlite_url: str) -> None:
    """Reads beyond loopback need the token: the browser asks for it (HTTP Basic, the token as the
    password) and then browses; a right-to-left override in a stream id is shown, not obeyed."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium; run `apt-get install chromium`")
    import secrets

    url = migrated(sqlite_url)
    store = IndexedEventStore(url)
    try:
        store.append("invoice\u202efdp.exe", [NewEvent("demo.note", {"text": "title \u202eevil\x1b[2J"})])
    finally:
        store.close()
    token = secrets.token_urlsafe(24)
    app = create_app(ServeConfig(url=url, token=token, host="0.0.0.0"))
    with serving(app) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            anonymous = browser.new_page().request.get(base + "/")  # a page without it: the challenge
            assert anonymous.status == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
            page = browser.new_context(http_credentials={"username": "me", "password": token}).new_page()
            assert page.goto(base + "/").status == 200
            link = page.locator("a.run-link").first
            assert link.inner_text() == "invoice\\u202efdp.exe"
            link.click()
            page.wait_for_selector("#timeline")
            body = page.locator("body").inner_text()
            assert "\u202e" not in body and "\x1b" not in body and "\\u202eevil" in body
        finally:
            browser.close()


def test_what_was_captured_in_a_browser(sqlite_url: str, tmp_path: Path) -> None:
    """Issue 31: the runs index counts an unreadable version as a finding, the run page says the
    version shown is unreadable, /coverage lists the sources (a gone one marked, hostile names as
    text) and /metrics shows the state histories with durations and the sections without data on
    one line; no console error."""
    import shutil

    from click.testing import CliRunner

    from eventstore.cli import register

    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium; run `apt-get install chromium`")
    url = migrated(sqlite_url)
    ralph = tmp_path / "ralph"
    shutil.copytree(Path(__file__).parent / "data" / "real" / "codeharness-ralph-status", ralph)
    name = HOSTILE.replace("/", "_")  # a file name cannot hold a slash
    evil = tmp_path / f"{name}.json"
    evil.write_text(json.dumps({"taskId": "EVIL", "n": 1}))
    for args in (["ingest", "generic", str(ralph), "--stream", "ralph"], ["ingest", "generic", str(evil)]):
        r = CliRunner().invoke(register(), ["--url", url, *args])
        assert r.exit_code == 0, r.output
    evil.unlink()  # gone
    app = create_app(ServeConfig(url=url, analytics_dir=str(tmp_path / "analytics")))
    problems: list[str] = []
    with serving(app) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

        page.goto(base + "/")
        row = page.locator("tr", has=page.locator("a.run-link", has_text="ralph"))
        assert row.locator("td.num").last.inner_text() == "1"  # findings: version 43

        page.goto(base + "/runs/ralph?version=43")
        note = page.locator("#state p.notice.unreadable")
        assert note.count() == 1 and "version 43: unreadable" in note.inner_text()
        assert "last valid one (version 42)" in note.inner_text()

        page.click("nav a[href='/coverage']")
        page.wait_for_url("**/coverage")
        rows = page.locator("#coverage tbody tr")
        assert rows.count() == 2
        gone = page.locator("#coverage tbody tr.gone")
        assert gone.count() == 1 and "gone, noticed" in gone.inner_text() and name in gone.inner_text()
        assert page.evaluate("() => window.__pwned") is None and page.locator("main img").count() == 0

        page.goto(base + "/metrics")
        assert page.locator("#histories table tbody tr").count() == 1
        assert "No data: " in page.locator("#no-data").inner_text()
        assert page.locator("section#gates").count() == 0
        browser.close()
    assert problems == []


def test_timeline_of_a_run_two_sessions_wrote_and_a_search_hit(sqlite_url: str, tmp_path: Path) -> None:
    """The demo's first run with sessions: its run page shows both sessions' turns and its state
    versions in time order; a search from the box on the runs page opens the hit's version."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium; run `apt-get install chromium`")
    from projections import writers

    url = migrated(sqlite_url)
    store = IndexedEventStore(url)
    try:
        run_demo(store, runs=3, seed=2, dialects=["mapipe"], sessions=1)
        run = "demo-00001"
        sessions = writers.run_sessions(store, [run])[run]
        assert len(sessions) == 2
        app = create_app(ServeConfig(url=url, analytics_dir=str(tmp_path / "analytics")))
        problems: list[str] = []
        with serving(app) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto(f"{base}/runs/{run}")
            items = page.locator("#story li.tl-item")
            assert items.count() > 10
            ats = items.evaluate_all("els => els.map(e => e.dataset.at)")
            assert ats == sorted(ats)
            streams = set(items.evaluate_all("els => els.map(e => e.dataset.stream)"))
            assert set(sessions) <= streams and run in streams
            kinds = items.evaluate_all("els => els.map(e => e.dataset.kind)")
            assert {"prompt", "tool_use", "state"} <= set(kinds)
            page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)
            # search from the box in the header; the hit opens its version, the row targeted
            page.goto(base + "/")
            page.fill("form.search-box input[name=q]", "Review the state file")
            page.press("form.search-box input[name=q]", "Enter")
            page.wait_for_url("**/search?q=*")
            first = page.locator("a.hit-link").first
            href = first.get_attribute("href") or ""
            version = href.rsplit("#v", 1)[1]
            first.click()
            page.wait_for_url(f"**#v{version}")
            row = page.locator(f"tr#v{version}")
            assert row.is_visible()
            assert page.evaluate("document.querySelector(':target').id") == f"v{version}"
            browser.close()
    finally:
        store.close()
    assert problems == []
