"""Terminal escapes and bidi overrides in stored values never reach a terminal or a page raw (issue 32,
item 5): `runs`, `log`, `verify`, `ingest`, `replay` and errors print them as escapes
(eventstore.display.printable), the pages of `evstore serve` show them visibly; `--json` keeps the data."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from click.testing import CliRunner, Result
from conftest import exec_sql, migrated
from hypothesis import given
from hypothesis import strategies as st
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from eventstore.cli import register
from eventstore.display import BIDI, printable
from eventstore.store import EventStore
from projections.serve import ServeConfig, create_app

EVIL = "run\x1b]0;pwned\x07\x1b[2J\u202eexe.txt"
SHOWN = "run\\x1b]0;pwned\\x07\\x1b[2J\\u202eexe.txt"
RAW = ("\x1b", "\x07", "\u202e")


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def clean(text: str) -> bool:
    return not any(c in text for c in RAW)


def _evil_store(store_url: str, tmp_path: Path) -> str:
    url = migrated(store_url)
    doc = tmp_path / "state.json"
    doc.write_text(json.dumps({"title": f"title {EVIL}", "n": 1}, ensure_ascii=False))
    r = cli(url, "ingest", "generic", "--stream", EVIL, str(doc))
    assert r.exit_code == 0, r.output
    assert clean(r.stdout) and SHOWN in r.stdout  # "state.json -> run\x1b]0;... @ 1"
    assert cli(url, "append", EVIL + "-note", "demo.note", "--data", json.dumps({"text": EVIL})).exit_code == 0
    return url


def test_the_commands_print_escapes_not_controls(store_url: str, tmp_path: Path) -> None:
    url = _evil_store(store_url, tmp_path)
    r = cli(url, "runs")
    assert r.exit_code == 0 and clean(r.stdout) and SHOWN in r.stdout, r.stdout
    r = cli(url, "log", EVIL + "-note")
    assert r.exit_code == 0 and clean(r.stdout) and "\\u202eexe.txt" in r.stdout, r.stdout
    r = cli(url, "replay", EVIL)
    assert r.exit_code == 0 and clean(r.stdout + r.stderr) and "\\u202e" in r.stdout and SHOWN in r.stderr
    # Data stays data: --json keeps the characters (JSON escapes the controls itself).
    assert json.loads(cli(url, "replay", EVIL, "--json").stdout)["title"] == f"title {EVIL}"
    assert {json.loads(x)["stream_id"] for x in cli(url, "runs", "--json").stdout.splitlines()} == {EVIL, EVIL + "-note"}
    r = cli(url, "log", EVIL + "x")  # an error naming the value
    assert r.exit_code == 1 and clean(r.stderr) and f'No stream or task "{SHOWN}x"' in r.stderr
    store = EventStore(url)
    try:
        exec_sql(store, "UPDATE proj_runs SET title = :t WHERE stream_id = :s", t="forged", s=EVIL)
    finally:
        store.close()
    r = cli(url, "verify")
    assert r.exit_code == 1 and clean(r.stderr) and f'FAIL stream "{SHOWN}"' in r.stderr, r.stderr


def test_pages_show_rtl_overrides_and_controls_visibly(store_url: str, tmp_path: Path) -> None:
    url = _evil_store(store_url, tmp_path)
    with TestClient(create_app(ServeConfig(url=url)), base_url=LOCAL) as c:
        runs = c.get("/").text
        assert clean(runs) and SHOWN.replace("&", "&amp;") in runs
        from urllib.parse import quote

        page = c.get(f"/runs/{quote(EVIL, safe='')}").text
        assert clean(page) and "\\u202e" in page
        # The API is data: the characters as stored.
        assert {r["stream_id"] for r in c.get("/api/runs").json()["runs"]} == {EVIL, EVIL + "-note"}


@given(st.text())
def test_printable_leaves_no_control_or_bidi_character_and_keeps_the_rest(text: str) -> None:
    out = printable(text)
    assert not any(unicodedata.category(c) == "Cc" or c in BIDI for c in out)
    if not any(unicodedata.category(c) == "Cc" or c in BIDI for c in text):
        assert out == text
    kept = printable(text, multiline=True)
    assert kept.count("\n") == text.count("\n") and not any(c in BIDI for c in kept)


# Texts mostly of characters the table has, and of their printable and unprintable neighbours (a space of
# another kind, a private-use or unassigned code point): ``printable`` returns a text that passes
# ``str.isprintable`` as it is, and must still escape exactly what the table says.
_NEAR = st.sampled_from([*BIDI, "\x00", "\t", "\n", "\x1b", "\x7f", "\x85", "\x9f", "\xa0", "\xad", "\u2000",
                         "\u200b", "\u2065", "\ue000", "\U000e0001", "a", "é", "中", " "])


@given(st.text() | st.lists(_NEAR).map("".join), st.booleans())
def test_printable_escapes_exactly_what_its_table_names(text: str, multiline: bool) -> None:
    from eventstore.display import _MULTILINE, _TABLE

    assert printable(text, multiline=multiline) == text.translate(_MULTILINE if multiline else _TABLE)
