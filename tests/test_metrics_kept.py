"""`evstore metrics`, the HTML report and `GET /metrics` compute a report once per log position and keep
it (projections.metrics.report), and what they render of it (projections.metrics.rendered): on an unchanged
store they read no event, open no DuckDB connection and render nothing, and a new event makes them compute
and render again.  On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from eventstore.cli import register
from eventstore.store import EventStore
from projections import report as report_module
from projections.analytics import views
from projections.metrics import BASE, REPORTS, SPANS, rendered
from projections.serve import app as serve_app

READS = ("read_all", "iter_all", "iter_batches", "iter_fact_batches", "read_stream", "read_payloads")


@pytest.fixture
def demo(store_url: str, tmp_path: Path) -> tuple[str, Path]:
    r = CliRunner().invoke(register(), ["--url", store_url, "demo", "--runs", "6", "--seed", "5"])
    assert r.exit_code == 0, r.output
    return store_url, tmp_path / "analytics"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the log was read (any of EventStore's event readers), DuckDB connected, a report rendered
    (as a CLI format, or as the page's charts) and a kept report decoded.  The refresh runs in this process
    (``EVSTORE_ANALYTICS_FORK=0``: a forked child's reads would not be counted here)."""
    monkeypatch.setenv("EVSTORE_ANALYTICS_FORK", "0")
    calls = {name: 0 for name in (*READS, "connect", "render", "charts", "decode")}

    def counting(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return orig(*args, **kwargs)
        return wrapper

    for name in READS:
        monkeypatch.setattr(EventStore, name, counting(name, getattr(EventStore, name)))
    monkeypatch.setattr(views, "_connect", counting("connect", views._connect))
    monkeypatch.setattr(report_module, "render", counting("render", report_module.render))
    # JSON, HTML and the table are rendered in pieces (each section's place kept): counted as renderings too
    for pieces in ("json_pieces", "html_pieces", "table_pieces"):
        monkeypatch.setattr(report_module, pieces, counting("render", getattr(report_module, pieces)))
    monkeypatch.setattr(serve_app, "section_chart", counting("charts", serve_app.section_chart))
    import projections.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "_kept", counting("decode", metrics_module._kept))
    yield calls


def reports(directory: Path) -> list[Path]:
    """The kept reports (one per scope asked for), without their renderings."""
    return sorted(p for p in (directory / REPORTS).iterdir() if p.suffix == ".json")


def _metrics(url: str, directory: Path, *args: str) -> Any:
    r = CliRunner().invoke(register(), ["--url", url, "metrics", "--analytics-dir", str(directory), *args])
    assert r.exit_code == 0, r.output
    return r


def test_a_second_metrics_on_an_unchanged_store_reads_no_event(demo: tuple[str, Path],
                                                               counted: dict[str, int]) -> None:
    url, directory = demo
    first = {fmt: _metrics(url, directory, "--format", fmt).stdout for fmt in ("table", "json", "csv")}
    assert counted["connect"] == 1 and counted["iter_fact_batches"] >= 1  # built the facts, computed the report once
    assert counted["render"] == 3  # each format rendered once, and kept beside the report
    kept = sorted((directory / REPORTS).iterdir())
    # the report, its base (metrics.Earlier), 3 renderings and where each section is in the table and the JSON
    assert len(reports(directory)) == 1 and len(kept) == 7
    assert sum(p.suffix == f".{BASE}" for p in kept) == 1 and sum(p.name.endswith(f"-{SPANS}") for p in kept) == 2
    counted.update(dict.fromkeys(counted, 0))
    again = {fmt: _metrics(url, directory, "--format", fmt) for fmt in ("table", "json", "csv")}
    # no event read, no DuckDB connection, nothing rendered, not even the kept report decoded
    assert counted == dict.fromkeys(counted, 0), counted
    assert {fmt: r.stdout for fmt, r in again.items()} == first  # the same bytes as computed (a CSV's \r\n too)
    assert all(r.stderr == "" for r in again.values())  # nothing applied

    # A new event moves the checkpoint: the refresh reads what is new, the report is computed again, and
    # only the new position's report is kept.
    r = CliRunner().invoke(register(), ["--url", url, "append", "NOTES-1", "demo.note", "--data", '{"a": 1}'])
    assert r.exit_code == 0, r.output
    after = _metrics(url, directory, "--format", "json")
    assert "analytics: 1 new events applied" in after.stderr
    assert counted["connect"] == 1 and counted["render"] == 1
    assert json.loads(after.stdout)["scope"]["runs"] == json.loads(first["json"])["scope"]["runs"] + 1
    now = sorted((directory / REPORTS).iterdir())  # the older position's report and renderings are gone
    assert len(now) == 4 and not set(now) & set(kept)  # the report, its base, its JSON and the sections' places
    assert len({p.name.split("-")[0] for p in now}) == 1


def test_scopes_and_runs_are_kept_apart(demo: tuple[str, Path], counted: dict[str, int]) -> None:
    url, directory = demo
    runs = [json.loads(line) for line in CliRunner().invoke(register(), ["--url", url, "runs", "--json"]).stdout.splitlines()]
    run = next(r for r in runs if r["dialect"] == "mapipe")
    asked = [(), ("--dialect", "mapipe"), ("--project", run["project"]), (run["stream_id"],)]
    first = [_metrics(url, directory, *a, "--format", "json").stdout for a in asked]
    assert len({json.dumps(json.loads(f)["scope"], sort_keys=True) for f in first}) == len(asked)
    assert counted["connect"] == len(asked) and len(reports(directory)) == len(asked)
    counted.update(dict.fromkeys(counted, 0))
    assert [_metrics(url, directory, *a, "--format", "json").stdout for a in asked] == first
    assert counted == dict.fromkeys(counted, 0), counted
    # a filter that matches nothing is an error each time, never a kept empty report
    r = CliRunner().invoke(register(), ["--url", url, "metrics", "--analytics-dir", str(directory),
                                        "--dialect", "nope"])
    assert r.exit_code == 1 and "No run has --dialect" in r.stderr


def test_html_report_and_metrics_page_use_the_kept_report(demo: tuple[str, Path], counted: dict[str, int],
                                                          tmp_path: Path) -> None:
    from projections.serve import ServeConfig, create_app

    url, directory = demo
    _metrics(url, directory, "--format", "html", "--out", str(tmp_path / "a.html"))
    with TestClient(create_app(ServeConfig(url=url, analytics_dir=str(directory))), base_url=LOCAL) as c:
        counted.update(dict.fromkeys(counted, 0))
        _metrics(url, directory, "--format", "html", "--out", str(tmp_path / "b.html"))
        page = c.get("/metrics")
        api = c.get("/api/metrics")
        assert page.status_code == 200 and api.status_code == 200
        assert counted["charts"] > 0 and counted["connect"] == 0  # the page's body rendered once, from the kept report
        counted.update(dict.fromkeys(counted, 0))
        assert c.get("/metrics").content == page.content  # ... and then kept
        assert c.get("/api/metrics").content == api.content
        assert counted == dict.fromkeys(counted, 0), counted
        # one run's report, on its own page and on the filtered one: two bodies (a back link, a form)
        run = next(r for r in (json.loads(line) for line in CliRunner().invoke(
            register(), ["--url", url, "runs", "--json"]).stdout.splitlines()))["stream_id"]
        own, filtered = c.get(f"/runs/{run}/metrics"), c.get("/metrics", params={"run": run})
        assert counted["connect"] == 1 and counted["charts"] > 0
        assert "back to the run" in own.text and "back to the run" not in filtered.text
        counted.update(dict.fromkeys(counted, 0))
        assert c.get(f"/runs/{run}/metrics").content == own.content
        assert c.get("/metrics", params={"run": run}).content == filtered.content
        assert counted == dict.fromkeys(counted, 0), counted
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert api.json() == json.loads(_metrics(url, directory, "--format", "json").stdout)


def test_a_kept_report_that_is_not_ours_is_recomputed(demo: tuple[str, Path], counted: dict[str, int]) -> None:
    url, directory = demo
    first = _metrics(url, directory, "--format", "json").stdout
    (kept,) = reports(directory)
    kept.write_text("{not a report")
    for p in (directory / REPORTS).iterdir():
        if p != kept:
            p.unlink()  # the rendering too: it is read before the report
    counted.update(dict.fromkeys(counted, 0))
    assert _metrics(url, directory, "--format", "json").stdout == first
    assert counted["connect"] == 1


def test_a_rendering_is_kept_under_its_name(demo: tuple[str, Path], counted: dict[str, int]) -> None:
    """Another name (another renderer, or a changed one: the name carries its code's digest) renders
    again from the kept report; the same name is read back."""
    url, directory = demo
    made: list[str] = []

    def render(name: str) -> Callable[[Any], str]:
        def fn(rep: Any) -> str:
            made.append(name)
            return f"{name}: {rep.scope['runs']} runs\r\n"
        return fn

    with EventStore(url) as store:
        a = rendered(store, render("a"), "text-1", directory)
        assert rendered(store, render("a"), "text-1", directory) == a == f"a: {json.loads(_metrics(url, directory, '--format', 'json').stdout)['scope']['runs']} runs\r\n"
        counted.update(dict.fromkeys(counted, 0))
        assert rendered(store, render("b"), "text-2", directory).startswith("b: ")
        assert made == ["a", "b"]
        assert counted["connect"] == 0 and counted["decode"] == 1  # from the kept report
        with pytest.raises(ValueError):
            rendered(store, render("c"), "../x", directory)


def test_a_page_whose_report_is_computed_is_sent_section_by_section(demo: tuple[str, Path],
                                                                    counted: dict[str, int]) -> None:
    """No kept report: the page's head goes out before the sections are computed, then each section as it
    is computed; the body sent is the one kept (and answered next time)."""
    from projections.serve import ServeConfig, create_app

    url, directory = demo
    with TestClient(create_app(ServeConfig(url=url, analytics_dir=str(directory))), base_url=LOCAL) as c:
        chunks: list[bytes] = []
        with c.stream("GET", "/metrics") as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            for chunk in r.iter_raw():
                chunks.append(chunk)
        streamed = b"".join(chunks)
        assert counted["connect"] == 1
        head = chunks[0].decode()
        assert "<h1>evstore metrics</h1>" in head and "<section" not in head  # before any section
        assert len([ch for ch in chunks if b"<section" in ch]) > 3  # one part per section with data
        assert streamed.endswith(b"</html>")
        counted.update(dict.fromkeys(counted, 0))
        kept = c.get("/metrics")
        assert kept.content == streamed
        assert counted == dict.fromkeys(counted, 0), counted
        assert json.loads(_metrics(url, directory, "--format", "json").stdout)["scope"]["runs"] == \
            int(head.split("runs=")[1].split(" ")[0].split("<")[0])

        # A filter matching nothing is an error page before anything is sent.
        bad = c.get("/metrics", params={"dialect": "<b>nope</b>"})
        assert bad.status_code == 400 and "<b>nope" not in bad.text and "&lt;b&gt;nope" in bad.text


def test_a_section_that_fails_mid_page_is_said_escaped_and_nothing_is_kept(
        demo: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import metrics
    from projections.serve import ServeConfig, create_app

    url, directory = demo
    real = metrics.section
    calls = {"n": 0}

    def failing(con: Any, m: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("<script>window.__pwned=1</script> broke")
        return real(con, m)

    monkeypatch.setattr(metrics, "section", failing)
    with TestClient(create_app(ServeConfig(url=url, analytics_dir=str(directory))), base_url=LOCAL) as c:
        page = c.get("/metrics")
        assert page.status_code == 200  # the page had begun
        assert 'id="metrics-error"' in page.text and "&lt;script&gt;window.__pwned=1&lt;/script&gt; broke" in page.text
        assert "<script>window" not in page.text and page.text.endswith("</html>")
        assert not (directory / REPORTS).exists() or not list((directory / REPORTS).iterdir())  # nothing kept
        monkeypatch.setattr(metrics, "section", real)
        again = c.get("/metrics")
        assert 'id="metrics-error"' not in again.text and again.text.count("<section") > 3


def test_the_page_escapes_what_a_kept_report_holds(demo: tuple[str, Path]) -> None:
    """The page's body is kept in the server's memory, never read back from the analytics folder as HTML:
    a kept report someone edited shows its values escaped, in a server started after the edit."""
    from projections.serve import ServeConfig, create_app

    url, directory = demo
    cfg = ServeConfig(url=url, analytics_dir=str(directory))
    with TestClient(create_app(cfg), base_url=LOCAL) as c:
        assert c.get("/metrics").status_code == 200
    assert not [p for p in (directory / REPORTS).iterdir() if ".page" in p.name]
    (kept,) = reports(directory)
    data = json.loads(kept.read_text())
    data["title"] = "<script>window.__pwned=1</script>"
    kept.write_text(json.dumps(data))
    with TestClient(create_app(cfg), base_url=LOCAL) as c:
        page = c.get("/metrics")
    assert page.status_code == 200
    assert "<h1>&lt;script&gt;window.__pwned=1&lt;/script&gt;</h1>" in page.text and "<script>window" not in page.text


def test_the_page_bodies_kept_are_bounded_by_count_and_characters() -> None:
    """``KeptBodies`` keeps the bodies asked for most recently within :attr:`LIMIT` bodies and :attr:`CHARS`
    characters, the last one kept whatever its size; a body put again is counted once; a new position's body
    drops the others, and with each body goes where its sections are."""
    from projections.metrics import Key

    bodies = serve_app.KeptBodies()
    bodies.CHARS, bodies.LIMIT = 100, 3

    def at(digest: str, position: int = 5) -> Key:
        return Key(position, digest, "q")

    bodies.put(at("a"), "page", "x" * 40, {"s": (0, 4)})
    bodies.put(at("b"), "page", "y" * 40)
    assert bodies.get(at("a"), "page")  # now the most recently asked for
    bodies.put(at("c"), "page", "z" * 40)  # 120 characters: the least recent (b) goes
    assert bodies.get(at("b"), "page") is None and bodies.get(at("a"), "page") and bodies.get(at("c"), "page")
    assert bodies.piece(at("a"), "page", "s") == "xxxx"
    bodies.put(at("d"), "page", "w" * 500)  # past the bound alone: kept, the others dropped
    assert bodies.get(at("d"), "page") and bodies.get(at("a"), "page") is None and bodies.get(at("c"), "page") is None
    assert bodies.piece(at("a"), "page", "s") is None
    bodies.put(at("d"), "page", "v" * 10)  # the same again: replaced, counted once
    bodies.put(at("e"), "page", "u" * 80)
    assert bodies.get(at("d"), "page") == "v" * 10 and bodies.get(at("e"), "page")
    for d in "fgh":
        bodies.put(at(d), "page", d)
    assert [bodies.get(at(d), "page") for d in "defgh"] == [None, None, "f", "g", "h"]  # three at most
    bodies.put(at("i", 6), "page", "t")  # a new position
    assert bodies.get(at("h"), "page") is None and bodies.get(at("i", 6), "page") == "t"
