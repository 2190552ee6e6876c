"""The write routes of ``evstore serve`` as promises (issue 33): an append stores exactly what was
sent, and a body it cannot store is refused with a clear error naming what and where (nothing
written).  In-process (Starlette's TestClient and the parser itself), so mutation runs see them."""

from __future__ import annotations

import json
import secrets

import pytest
from conftest import migrated
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from eventstore import config
from eventstore.dialects import available
from eventstore.errors import InvalidEvent
from projections.serve import ServeConfig, create_app
from projections.serve.access import HTTPError
from projections.serve.app import parse_append

TOKEN = secrets.token_urlsafe(32)


def test_expected_version_takes_exactly_the_documented_spellings() -> None:
    def expected(value: object) -> object:
        return parse_append(json.dumps({"events": [{"type": "t"}], "expected_version": value}).encode())[1]

    assert parse_append(b'{"events": [{"type": "t"}]}')[1] == "any"
    assert expected(None) == expected("any") == "any"
    assert expected("no-stream") == expected("no stream") == "no stream"
    assert expected(0) == 0 and expected(1) == 1 and expected(7) == 7
    for bad in ("ANY", "Any", "NO STREAM", "no_stream", "", -1, 1.5, 0.0, True, "3", [], {}):
        with pytest.raises(InvalidEvent) as err:
            expected(bad)
        assert str(err.value) == ('expected_version must be "any", "no-stream" or a version number >= 0, '
                                  f"got {bad!r}."), bad


def test_a_dialect_is_a_known_one_or_none() -> None:
    def dialect(value: object) -> object:
        return parse_append(json.dumps({"events": [{"type": "t"}], "dialect": value}).encode())[3]

    assert dialect(None) is None
    for name in available():
        assert dialect(name) == name
    for bad in ("no-such-dialect", "GENERIC", "", 5, ["generic"]):
        with pytest.raises(InvalidEvent) as err:
            dialect(bad)
        assert str(err.value) == f'request body: "dialect" must be one of {", ".join(sorted(available()))}.', bad


def test_the_body_keys_are_events_expected_version_blobs_and_dialect() -> None:
    events, expected, blobs, dialect = parse_append(
        json.dumps({"events": [{"type": "t"}], "expected_version": "any", "blobs": {}, "dialect": None}).encode())
    assert (len(events), expected, blobs, dialect) == (1, "any", {}, None)
    with pytest.raises(InvalidEvent) as err:
        parse_append(b'{"events": [{"type": "t"}], "Blobs": {}, "extra": 1}')
    assert str(err.value) == "request body: unknown key(s) Blobs, extra."
    with pytest.raises(InvalidEvent) as err:
        parse_append(b'{"events": ')
    assert str(err.value).startswith("request body: not valid JSON at line 1"), str(err.value)
    with pytest.raises(InvalidEvent) as err:
        parse_append(b"[]")
    assert str(err.value) == 'request body: must be a JSON object with an "events" list.'


def test_an_event_at_the_size_limit_is_not_called_too_large() -> None:
    """The 413 is for data over the limit; a bad event whose data is exactly the limit is a 400
    naming its own problem."""
    pad = config.MAX_EVENT_BYTES - len(b'{"p":""}')
    at_limit = {"p": "x" * pad}
    assert len(json.dumps(at_limit, separators=(",", ":"))) == config.MAX_EVENT_BYTES
    body = json.dumps({"events": [{"type": "t", "data": at_limit, "event_id": "x"}]}).encode()
    with pytest.raises(InvalidEvent) as err:
        parse_append(body)
    assert not isinstance(err.value, HTTPError) and str(err.value) == "events[0]: event_id 'x' is not a UUID."
    over = {"p": "x" * (pad + 1)}
    with pytest.raises(HTTPError) as too_large:
        parse_append(json.dumps({"events": [{"type": "t", "data": over, "event_id": "x"}]}).encode())
    assert too_large.value.status == 413


@pytest.fixture
def client(sqlite_url: str) -> TestClient:
    return TestClient(create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN)), base_url=LOCAL)


def test_an_append_stores_exactly_what_was_sent(client: TestClient) -> None:
    event_id = "6f1c1b9e-3f0a-4c55-9a3b-2f6c1d2e3a4b"
    sent = {"type": "demo.note", "data": {"n": 1, "text": "héllo", "list": [1, 2.5, None, True]},
            "meta": {"why": "test"}, "event_id": event_id, "occurred_at": "2026-01-02T03:04:05Z"}
    auth = {"authorization": f"Bearer {TOKEN}", "x-evstore-machine": "box-1"}
    with client as c:
        r = c.post("/api/streams/s-1/events", content=json.dumps({"events": [sent], "expected_version": "no-stream"}),
                   headers=auth)
        assert (r.status_code, r.json()["stream"], r.json()["version"], r.json()["duplicate"]) == (
            201, "s-1", 1, False), r.text
        got = c.get("/api/runs/s-1/events", headers=auth).json()
        assert len(got) == 1
        assert (got[0]["type"], got[0]["data"], got[0]["event_id"]) == (sent["type"], sent["data"], event_id)
        assert got[0]["meta"]["why"] == "test"
        assert got[0]["meta"]["sent_by"] == {"token": "EVSTORE_SERVE_TOKEN", "machine": "box-1"}
        # the same event again: a duplicate (200), nothing new
        r = c.post("/api/streams/s-1/events", content=json.dumps({"events": [sent]}), headers=auth)
        assert (r.status_code, r.json()["duplicate"], r.json()["version"]) == (200, True, 1), r.text
        # a wrong expected version: 409 saying where the stream is; nothing written
        r = c.post("/api/streams/s-1/events", content=json.dumps({"events": [{"type": "t"}], "expected_version": 0}),
                   headers=auth)
        assert r.status_code == 409 and r.json()["stream_version"] == 1, r.text
        r = c.post("/api/streams/s-1/events", content=json.dumps({"events": [{"type": "t"}], "expected_version": "ANY"}),
                   headers=auth)
        assert r.status_code == 400 and "expected_version must be" in r.json()["error"], r.text
        assert len(c.get("/api/runs/s-1/events", headers=auth).json()) == 1


def test_the_start_up_line_names_the_token_and_the_named_tokens_that_may_write(sqlite_url: str) -> None:
    from eventstore import tokens
    from eventstore.store import EventStore
    from projections.serve.access import Policy
    from projections.serve.app import StoreTokens

    with EventStore(migrated(sqlite_url)) as store:
        tokens.add_token(store, "ci", "append")
        both = Policy.of(host="0.0.0.0", token=TOKEN, read_token=None, allowed_hosts=(), tokens=StoreTokens(store))
        assert both.describe() == ("reads: holders of the token; writes: holders of the token or a named token "
                                   "with append or admin scope")
        named = Policy.of(host="0.0.0.0", token=None, read_token=None, allowed_hosts=(), tokens=StoreTokens(store))
        assert named.describe() == "reads: holders of the token; writes: holders of a named token with append or admin scope"


def test_a_hook_calls_warning_goes_to_the_log_naming_the_route(sqlite_url: str, tmp_path, monkeypatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """What a hook call could not do (here: read a transcript outside the projects folder) is answered
    in ``evstore-warnings`` and written to the server's log, naming the route and the problem."""
    import logging

    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    projects = tmp_path / "projects"
    projects.mkdir()
    app = create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN, hook_files=(projects,)))
    body = json.dumps({"session_id": "S-1", "transcript_path": "/etc/passwd", "hook_event_name": "Stop"})
    with TestClient(app, base_url=LOCAL) as c, caplog.at_level(logging.WARNING):
        r = c.post("/hooks/claude-code", content=body, headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 204 and r.headers["evstore-warnings"] == "1", r.text
    logged = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("POST /hooks/claude-code: ")]
    assert len(logged) == 1, [rec.getMessage() for rec in caplog.records]
    problem = logged[0].removeprefix("POST /hooks/claude-code: ")
    assert problem and problem != "None" and "transcript" in problem, problem


def test_the_machine_header_is_a_name_of_1_to_100_printable_ascii_characters(client: TestClient) -> None:
    body = json.dumps({"events": [{"type": "t"}]})
    auth = {"authorization": f"Bearer {TOKEN}"}
    with client as c:
        r = c.post("/api/streams/m/events", content=body, headers={**auth, "x-evstore-machine": "m" * 100})
        assert r.status_code == 201, r.text
        assert c.get("/api/runs/m/events", headers=auth).json()[0]["meta"]["sent_by"]["machine"] == "m" * 100
        for bad in ("m" * 101, " ", "a\tb", "b\x7f"):
            r = c.post("/api/streams/m/events", content=body, headers={**auth, "x-evstore-machine": bad})
            assert (r.status_code, r.json()["error"]) == (400, "the x-evstore-machine header must be a machine name of "
                                                               "1 to 100 printable ASCII characters."), repr(bad)
        r = c.post("/api/streams/m/events", content=body,
                   headers=[("authorization", f"Bearer {TOKEN}"), ("x-evstore-machine", "h\u00e9".encode())])
        assert r.status_code == 400, r.text
        assert len(c.get("/api/runs/m/events", headers=auth).json()) == 1


def test_blobs_are_stored_exactly_and_bad_ones_refused_naming_which() -> None:
    import base64
    import hashlib

    data = b"\x00blob bytes\xff"
    digest = hashlib.sha256(data).hexdigest()
    sent = {"events": [{"type": "t", "meta": {"blobs": [digest]}}], "blobs": {digest: base64.b64encode(data).decode()}}
    assert parse_append(json.dumps(sent).encode())[2] == {digest: data}
    long_key = "k" * 70
    cases = [([], 'request body: "blobs" must be an object of SHA-256 hex digests to base64 bytes.'),
             ({long_key: 5}, f'request body: blobs["{"k" * 64}"] must be a base64 string.'),
             ({long_key: "YWJj!"}, f'request body: blobs["{"k" * 64}"] is not base64.'),
             ({long_key: "YW Jj"}, f'request body: blobs["{"k" * 64}"] is not base64.'),
             ({long_key: "YWJ"}, f'request body: blobs["{"k" * 64}"] is not base64.')]
    for blobs, message in cases:
        with pytest.raises(InvalidEvent) as err:
            parse_append(json.dumps({"events": [{"type": "t"}], "blobs": blobs}).encode())
        assert str(err.value) == message, blobs


def test_each_event_is_checked_naming_where() -> None:
    cases = [(b'{"events": []}', 'request body: "events" must be a non-empty list.'),
             (b'{"events": [{"type": "t"}, 5]}', "events[1]: each event must be a JSON object."),
             (b'{"events": [{"type": "t", "b": 1, "a": 2}]}', "events[0]: unknown key(s) a, b.")]
    for body, message in cases:
        with pytest.raises(InvalidEvent) as err:
            parse_append(body)
        assert str(err.value) == message, body
    events = parse_append(b'{"events": [{"type": "t", "schema_version": 3}, {"type": "u"}]}')[0]
    assert [e.schema_version for e in events] == [3, 1]
    over = {"p": "x" * config.MAX_EVENT_BYTES}
    with pytest.raises(HTTPError) as err:
        parse_append(json.dumps({"events": [{"type": "t", "meta": over}]}).encode())
    assert err.value.status == 413 and str(err.value).startswith("events[0]: "), str(err.value)[:200]


def test_an_append_stores_the_blobs_and_the_dialect_it_was_sent(client: TestClient, sqlite_url: str) -> None:
    import base64
    import hashlib

    from eventstore.store import EventStore
    from projections.replay import dialect_of

    data = b"the blob"
    digest = hashlib.sha256(data).hexdigest()
    other = sorted(d for d in available() if d != "generic")[0]
    auth = {"authorization": f"Bearer {TOKEN}"}
    with client as c:
        r = c.post("/api/streams/b/events", headers=auth, content=json.dumps(
            {"events": [{"type": "t", "meta": {"blobs": [digest]}}], "blobs": {digest: base64.b64encode(data).decode()},
             "dialect": other}))
        assert r.status_code == 201, r.text
    with EventStore(migrated(sqlite_url)) as store:
        assert store.read_blob(digest) == data
        assert dialect_of(store, "b").name == other


def test_a_body_over_the_limit_is_a_413_sent_whole_or_in_chunks(sqlite_url: str) -> None:
    """The limit is on the bytes of the body: exactly the limit is read; one byte more is a 413 saying
    so, whether the client declares its length or streams the body in chunks."""
    body = json.dumps({"events": [{"type": "t", "data": {"p": "x" * 200}}]}).encode()
    auth = {"authorization": f"Bearer {TOKEN}"}
    app = create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN, max_body=len(body)))
    with TestClient(app, base_url=LOCAL) as c:
        assert c.post("/api/streams/a/events", content=body, headers=auth).status_code == 201
        r = c.post("/api/streams/b/events", content=body + b" ", headers=auth)
        assert (r.status_code, r.json()["error"]) == (
            413, f"request body of {len(body) + 1} bytes exceeds the limit of {len(body)} bytes "
                 "(EVSTORE_MAX_SNAPSHOT_BYTES)."), r.text

        def chunks(data: bytes):  # type: ignore[no-untyped-def]
            for i in range(0, len(data), 50):
                yield data[i:i + 50]

        r = c.post("/api/streams/c/events", content=chunks(body), headers=auth)
        assert r.status_code == 201, r.text
        r = c.post("/api/streams/d/events", content=chunks(body + b" "), headers=auth)
        assert (r.status_code, r.json()["error"]) == (
            413, f"request body exceeds the limit of {len(body)} bytes (EVSTORE_MAX_SNAPSHOT_BYTES)."), r.text
        assert [x["stream_id"] for x in c.get("/api/runs", headers=auth).json()["runs"]] in (["a", "c"], ["c", "a"])


def test_a_refused_host_is_logged_with_the_method_path_and_why(sqlite_url: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import logging

    app = create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN))
    with TestClient(app, base_url=LOCAL) as c, caplog.at_level(logging.WARNING):
        r = c.get("/api/runs", headers={"host": "attacker.example"})
    assert r.status_code == 421
    logged = [rec.getMessage() for rec in caplog.records if " refused: " in rec.getMessage()]
    assert logged == ['GET /api/runs refused: Host "attacker.example" is not a name of this server (a guard against '
                      "DNS rebinding); if clients reach it by that name, start `evstore serve` with --allowed-host "
                      "attacker.example."], logged


def test_a_body_streamed_in_many_chunks_is_counted_whole(sqlite_url: str) -> None:
    """The limit counts every chunk a client streams (as an ASGI server hands them over), not the last."""
    import asyncio

    from starlette.requests import Request

    from projections.serve.app import Server

    def request(chunks: list[bytes]) -> Request:
        messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

        async def receive() -> dict[str, object]:
            return messages.pop(0)
        return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)  # type: ignore[arg-type]

    server = Server(ServeConfig(url=migrated(sqlite_url), token=TOKEN, max_body=100))
    try:
        assert asyncio.run(server.read_body(request([b"x" * 25] * 4))) == b"x" * 100
        with pytest.raises(HTTPError) as err:
            asyncio.run(server.read_body(request([b"x" * 25] * 4 + [b"y"])))
        assert (err.value.status, err.value.message) == (
            413, "request body exceeds the limit of 100 bytes (EVSTORE_MAX_SNAPSHOT_BYTES).")
    finally:
        server.store.close()


@pytest.mark.parametrize("mode", ["FULL", "NORMAL"])
def test_a_server_commits_its_appends_as_synchronous_says(sqlite_url: str, mode: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`evstore serve --synchronous FULL` (ServeConfig.synchronous): every write of the server's store is
    flushed to disk before it is answered (SQLite's PRAGMA synchronous 2; NORMAL is 1), whatever the
    environment's default."""
    monkeypatch.setenv("EVSTORE_SQLITE_SYNCHRONOUS", "NORMAL" if mode == "FULL" else "FULL")
    app = create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN, synchronous=mode))
    with TestClient(app, base_url=LOCAL):
        with app.state.server.store.reading() as cur:
            cur.execute("PRAGMA synchronous")
            assert cur.fetchone()[0] == {"FULL": 2, "NORMAL": 1}[mode]


def test_every_page_says_whether_writes_are_on(sqlite_url: str) -> None:
    """The pages tell a visitor whether this server takes writes: "writes on (token)" when some token may
    write, "read-only" when none may."""
    url = migrated(sqlite_url)
    for token, said, not_said in ((TOKEN, "writes on (token)", "read-only"), (None, "read-only", "writes on")):
        with TestClient(create_app(ServeConfig(url=url, token=token)), base_url=LOCAL) as c:
            for path in ("/", "/integrity"):
                page = c.get(path).text
                assert said in page and not_said not in page, (token is not None, path)
