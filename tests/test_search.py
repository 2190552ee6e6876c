"""`evstore search`: full-text over transcripts (prompts, assistant text, tool input and output, long
outputs kept as blobs included), hook calls, event payloads and state documents; the `search`
projection catches up and rebuilds like the others; serve has a search box on every page whose hits
open the run page at the hit's version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from eventstore.store import EventStore
from projections.search import SEARCH, search, terms, unmark
from tests import claude_usage_fixtures as F

FRIDAY = Path(__file__).parent / "data" / "friday" / "history"


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def _hits(run: Any, *args: str) -> list[dict[str, Any]]:
    r = run("search", "--json", *args)
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in r.stdout.splitlines()]


@pytest.fixture
def filled(run: Any, store_url: str, tmp_path: Path) -> str:
    files = F.write(tmp_path / "projects")
    # a tool output over the blob threshold, holding a word found nowhere else
    long_output = ("lorem " * 1500) + "zanzibarquux " + ("ipsum " * 200)
    line = json.dumps({"type": "user", "uuid": "big", "parentUuid": None, "sessionId": F.S3,
                       "timestamp": "2025-11-05T10:20:00.000Z", "message": {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "t20", "content": long_output}]}})
    with files["s3"].open("a") as f:
        f.write(line + "\n")
    assert run("ingest", "claude", str(tmp_path / "projects")).exit_code == 0
    history = tmp_path / "friday"
    shutil.copytree(FRIDAY, history)
    assert run("ingest", "friday", str(history), "--stream", "FRIDAY-1").exit_code == 0
    from eventstore import capture

    with EventStore(store_url) as store:
        capture.record_hook(store, json.dumps({
            "session_id": F.S1, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "t77",
            "tool_input": {"command": "make deploy-staging-quokka"}}).encode(), transcript_roots=(), via="http")
    return store_url


def test_search_finds_each_kind_of_text(run: Any, filled: str) -> None:
    prompt = _hits(run, "discount field")
    assert [(h["stream"], h["line"], h["kind"], h["type"]) for h in prompt] == [(F.S1, 1, "prompt", "claude.user_message")]
    plain, marks = prompt[0]["snippet"], prompt[0]["highlights"]
    assert [plain[a:b].lower() for a, b in marks] == ["discount", "field"]
    assert _hits(run, "Review checkout.py")[0]["kind"] in ("tool_use", "prompt")
    tool = _hits(run, "test_checkout.py")  # a Write's path, in a subagent file
    assert any(h["stream"] == f"{F.S2}/agent-{F.A_SUB}" and h["kind"] == "tool_use" for h in tool)
    blob = _hits(run, "zanzibarquux")  # inside a 10 KB tool output stored as a blob
    assert [(h["stream"], h["kind"]) for h in blob] == [(F.S3, "tool_result")]
    hook = _hits(run, "quokka")
    assert [(h["stream"], h["type"], h["kind"]) for h in hook] == [(F.S1, "claude.hook", "hook")]
    state = _hits(run, "--stream", "FRIDAY-1", "approved")  # a FRIDAY state document's values
    assert state and all(h["stream"] == "FRIDAY-1" and h["dialect"] == "friday" for h in state)
    # newest first: positions descend
    every = _hits(run, "the", "--limit", "500")
    assert [h["position"] for h in every] == sorted((h["position"] for h in every), reverse=True)


def test_filters_and_the_text_output(run: Any, filled: str) -> None:
    assert {h["stream"] for h in _hits(run, "checkout", "--stream", F.S2)} <= {F.S2, f"{F.S2}/agent-{F.A_SUB}"}
    assert {h["type"] for h in _hits(run, "checkout", "--type", "claude.")} <= {
        "claude.user_message", "claude.tool_use", "claude.assistant_message", "claude.tool_result"}
    assert _hits(run, "checkout", "--type", "claude.tool_use")
    assert all(h["type"] == "claude.tool_use" for h in _hits(run, "checkout", "--type", "claude.tool_use"))
    assert _hits(run, "checkout", "--dialect", "friday") == []
    assert {h["stream"] for h in _hits(run, "tests", "--since", "2025-11-06", "--dialect", "claude")} <= {F.S2, f"{F.S2}/agent-{F.A_SUB}"}
    assert _hits(run, "check*", "--stream", F.S1)  # prefix
    r = run("search", "discount field")
    assert r.exit_code == 0
    assert f"{F.S1} v1 line 1" in r.stdout and "«discount» «field»" in r.stdout and r.stderr.strip() == "1 hit"


@pytest.mark.parametrize("query", ['"', "   ", "*", "()"])
def test_a_query_without_words_is_refused(run: Any, filled: str, query: str) -> None:
    r = run("search", query)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith("Error: Nothing to search for") and " — give at least one word" in r.stderr


@pytest.mark.parametrize("query", ['a"b', "NEAR(x y)", "x OR", "col:val", "-x", "a AND", "^x"])
def test_fts_syntax_in_a_query_is_just_text(run: Any, filled: str, query: str) -> None:
    assert run("search", "--", query).exit_code == 0


def test_incremental_equals_rebuilt(run: Any, filled: str, tmp_path: Path) -> None:
    with EventStore(filled) as store:
        before = [h.to_dict() for h in search(store, "checkout", limit=1000)]
        assert run("append", "NOTES", "note.added", "--data", json.dumps({"text": "checkout looks slow"})).exit_code == 0
        after = [h.to_dict() for h in search(store, "checkout", limit=1000)]
        assert after[0]["stream"] == "NOTES" and after[1:] == before  # caught up: the new event first
    r = run("projections", "rebuild", "search")
    assert r.exit_code == 0, r.output
    with EventStore(filled) as store:
        assert [h.to_dict() for h in search(store, "checkout", limit=1000, refresh=False)] == after
    status = run("projections", "status", "--json")
    assert any(p["name"] == SEARCH.name and p["lag"] == 0 for p in json.loads(status.stdout))


def test_sqlite_keeps_no_second_copy_of_the_words_and_snippets_still_mark_them(run: Any, filled: str) -> None:
    """SQLite's index is contentless (``proj_search.body`` empty): a hit's snippet is made from its
    event's words derived again, its blobs put back, and marks the words as FTS5's snippet() does;
    PostgreSQL keeps the words (its GIN index and ts_headline read them)."""
    with EventStore(filled) as store:
        search(store, "checkout")  # built

        def count(cur: Any) -> tuple[int, int]:
            cur.execute("SELECT count(*), count(body) FROM proj_search")
            n, kept = cur.fetchone()
            return int(n), int(kept)

        from projections.engine import ProjectionRunner

        with ProjectionRunner(store) as runner:
            rows, kept = runner.read(count)
        assert rows > 0
        assert kept == (0 if store.backend.name == "sqlite" else rows)
    blob = _hits(run, "zanzibarquux")  # a word of a tool output held in a blob, far into it
    plain, marks = blob[0]["snippet"], blob[0]["highlights"]
    assert [plain[a:b] for a, b in marks] == ["zanzibarquux"]
    assert "lorem" in plain and "ipsum" in plain and len(plain) < 400  # the words around it, not the whole output
    phrase = _hits(run, '"discount field"')
    # (FTS5 marks a phrase whole, ts_headline word by word)
    assert " ".join(phrase[0]["snippet"][a:b] for a, b in phrase[0]["highlights"]).lower() == "discount field"
    # a tool output repeated in the line's toolUseResult is indexed once: its words as the message has them
    sub = _hits(run, "3 files")
    assert sub and all(h["kind"] == "tool_result" for h in sub)


def test_serve_search_box_and_hit_links(run: Any, filled: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from projections.serve.app import ServeConfig, create_app

    assert run("append", "XSS", "note.added", "--data", json.dumps({"text": "<script>alert(1)</script> evilword"})).exit_code == 0
    with TestClient(create_app(ServeConfig(url=filled, analytics_dir=str(tmp_path / "a"))),
                    base_url="http://127.0.0.1") as c:
        for page in ("/", f"/runs/{F.S1}", "/metrics", "/integrity"):
            assert 'action="/search"' in c.get(page).text, page
        found = c.get("/search", params={"q": "discount field"}).text
        assert f'href="/runs/{F.S1}?after=0#v1"' in found and "<mark>discount</mark>" in found
        evil = c.get("/search", params={"q": "evilword"}).text
        assert "<script>alert(1)</script>" not in evil and "<mark>evilword</mark>" in evil
        api = c.get("/api/search", params={"q": "quokka"}).json()
        assert api["hits"][0]["type"] == "claude.hook"
        bad = c.get("/api/search", params={"q": '"'})
        assert bad.status_code == 400
        page = c.get(f"/runs/{F.S1}?after=0").text
        assert 'id="v1"' in page


def test_snippets_are_escaped() -> None:
    from projections.serve.views import snippet_html

    assert snippet_html("<b>\x02x&\x03 \x02y") == "&lt;b&gt;<mark>x&amp;</mark> <mark>y</mark>"


def test_terms_and_unmark() -> None:
    assert terms('a "b c" d* "" *') == [("a", False), ("b c", False), ("d", True)]
    assert unmark("x \x02y\x03 z") == ("x y z", [[2, 3]])


def test_an_erased_session_is_found_no_more_and_its_turns_say_so(run: Any, filled: str) -> None:
    """After `evstore erase`, the search index holds nothing of the erased events (it is rebuilt from
    the log, whose payloads are tombstones now) and the session's turns say their content is gone."""
    assert _hits(run, "discount field")
    r = run("erase", "--stream", F.S1, "--reason", "a user's request")
    assert r.exit_code == 0, r.output
    assert _hits(run, "discount field") == []
    assert _hits(run, "quokka") == []  # the hook call of that session too
    assert _hits(run, "zanzibarquux")  # another session's text is still found
    from projections.timeline import session_items

    with EventStore(filled) as store:
        turns = session_items(store, F.S1)
    assert turns and all(t.text == "(content purged or erased)" for t in turns)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_written_table_ddl_is_what_sqlalchemy_compiles(backend: str) -> None:
    """Building the index creates ``proj_search`` from statements written out (no SQLAlchemy import
    in a process that only rebuilds it): they must be what the table's declaration compiles to (on
    SQLite an INTEGER PRIMARY KEY, so the position is the rowid)."""
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = sqlite.dialect() if backend == "sqlite" else postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    ddl = SEARCH.table_ddl(backend)
    assert ddl is not None
    names, statements = ddl
    tables = SEARCH.tables()
    assert names == [t.name for t in tables]
    assert statements == [s for t in tables for s in (str(CreateTable(t).compile(dialect=dialect)).strip(),
                                                      *(str(CreateIndex(i).compile(dialect=dialect)) for i in t.indexes))]
    assert ("position INTEGER NOT NULL" in statements[0]) == (backend == "sqlite")


def _blobbed(line: dict[str, Any], threshold: int = 64) -> tuple[bytes, bytes, dict[str, bytes]]:
    """A transcript line event's data as ingest stores it (its long strings cut out as blobs), the
    same line's data whole, and the blobs."""
    import msgspec

    from eventstore.dialects.claude.dialect import cut_blobs

    raw = json.dumps(line).encode()
    stored, refs, blobs = cut_blobs(raw, threshold)
    assert refs, "the line has no string long enough to be a blob"
    cut = msgspec.json.encode({"lineno": 3, "line": stored.decode(), "blobs": refs})
    whole = msgspec.json.encode({"lineno": 3, "line": raw.decode()})
    return cut, whole, blobs


_OUTPUT = "\n".join(f"{i:6}→ line {i} of a file read twice, zanzibar{i}" for i in range(40))


@pytest.mark.parametrize("line", [
    # a tool's output in the message and again in toolUseResult: both blobs, one SHA-256
    {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": _OUTPUT}]},
     "toolUseResult": {"stdout": _OUTPUT, "stderr": ""}},
    # blocks of text, one of them long; a tool's input with two long strings and a short one
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": [
        {"type": "text", "text": _OUTPUT}, {"type": "image", "source": {"data": "x" * 100}}, {"type": "text", "text": "ok"}]}]}},
    {"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": "t " * 50, "signature": "s" * 80},
                                                   {"type": "tool_use", "name": "Edit", "input": {
                                                       "old_string": _OUTPUT, "new_string": _OUTPUT.upper(), "n": 2}}]}},
    # an escaped NUL in the line (outside its blobs): read with its blobs put back; one inside a blob
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": _OUTPUT}, {"type": "text", "text": "a\u0000b"}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "a\u0000b " + _OUTPUT}]}},
    # no message words: the line's own fields, its blobs put back
    {"type": "system", "subtype": "compact", "content": _OUTPUT},
])
def test_a_blobbed_lines_words_are_those_of_the_whole_line(line: dict[str, Any]) -> None:
    """Search reads a line with blobs without putting them back into the line (each blob's place holds a
    place holder while the line is decoded): the kind and words are those of the whole line."""
    from eventstore.dialects import get_dialect

    claude = get_dialect("claude")
    cut, whole, blobs = _blobbed(line)
    reads: list[str] = []

    def blob(sha: str) -> bytes:
        reads.append(sha)
        return blobs[sha]

    def no_blob(sha: str) -> bytes:
        raise AssertionError("the whole line has no blobs")

    expected = claude.search_text("claude.user_message", whole, blob=no_blob)
    assert claude.search_text("claude.user_message", cut, blob=blob) == expected
    assert "\x00evstore-blob" not in expected[1] and reads
    assert claude.search_text("claude.user_message", cut, blob=blob) == expected  # its blobs' texts known now


def test_a_blobbed_line_whose_blob_is_missing_or_another_size_keeps_the_words_it_holds() -> None:
    """A blob gone (or not the size the line says): the words are those of the line as stored, as before."""
    from eventstore.dialects import get_dialect
    from eventstore.errors import EvstoreError

    claude = get_dialect("claude")
    line = {"type": "user", "message": {"content": [{"type": "tool_result", "content": _OUTPUT},
                                                    {"type": "text", "text": "kept words"}]}}
    cut, _, blobs = _blobbed(line)

    def missing(sha: str) -> bytes:
        raise EvstoreError("gone")

    kind, words = claude.search_text("claude.user_message", cut, blob=missing)
    assert (kind, words) == ("tool_result", "kept words")
    assert claude.search_text("claude.user_message", cut, blob=lambda sha: blobs[sha] + b"x") == (kind, words)


def test_the_index_loads_the_dialects_its_events_name_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the index imports a dialect when an event names it (not every registered one); one that
    does not load counts as unknown, as :func:`eventstore.dialects.available` leaves it out."""
    import projections.search as S
    from eventstore.errors import EvstoreError

    loaded: list[str] = []

    def get_dialect(name: str) -> object:
        loaded.append(name)
        if name == "broken":
            raise EvstoreError("does not load")
        return object()

    monkeypatch.setattr(S, "registered", lambda: ["broken", "claude", "friday"])
    monkeypatch.setattr(S, "get_dialect", get_dialect)
    names = S._Loadable()
    assert "claude" in names and "broken" not in names and "unknown" not in names and 3 not in names
    assert "claude" in names and "broken" not in names
    assert loaded == ["claude", "broken"]
