"""Named tokens of a team's ``evstore serve`` (issue 36, item 1), on SQLite and PostgreSQL: ``evstore tokens
add/list/revoke`` store only a hash and record each action in the admin stream; the server reads the table
per request, so a revoked or expired token is refused at once; every event written over HTTP records its
sender (token name, machine) in meta, where the chain commits to it, and ``log``, the API and the pages
show it."""

from __future__ import annotations

import hashlib
import json
import re
import secrets

import pytest
from click.testing import CliRunner
from conftest import migrated
from starlette.testclient import TestClient

from eventstore import tokens
from eventstore.cli import register
from eventstore.store import EventStore
from projections.serve import ServeConfig, create_app

SERVE_TOKEN = secrets.token_urlsafe(24)


def cli(url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(register(), ["--url", url, *args])
    return r.exit_code, r.stdout, r.stderr


def bearer(token: str, machine: str | None = "laptop-1") -> dict[str, str]:
    h = {"Authorization": f"Bearer {token}"}
    if machine is not None:
        h["X-Evstore-Machine"] = machine
    return h


@pytest.fixture
def url(store_url: str) -> str:
    return migrated(store_url)


def test_tokens_add_list_revoke_store_only_a_hash_and_record_admin_events(url: str) -> None:
    code, out, err = cli(url, "tokens", "add", "alice-laptop", "--scope", "append", "--expires", "2099-01-31")
    assert code == 0, err
    secret = out.strip()
    assert len(secret) >= 43 and "shown only this once" in err  # 256 bits, urlsafe base64
    code, listed, _ = cli(url, "tokens", "list", "--json")
    [row] = json.loads(listed)
    assert row["name"] == "alice-laptop" and row["scope"] == "append" and row["revoked_at"] is None
    assert row["expires_at"].startswith("2099-02-01T00:00:00") and row["last_used_at"] is None
    assert secret not in listed
    with EventStore(url) as store:
        assert tokens.get_token(store, "alice-laptop") is not None
        found = tokens.find_token(store, secret)
        assert found is not None and found.name == "alice-laptop"
        # the table holds the SHA-256, never the secret
        with store.reading() as cur:
            [stored] = store.backend.token_rows(cur)
        assert secret not in repr(stored)
        assert store.backend is not None and tokens.digest(secret) == hashlib.sha256(secret.encode()).digest()
    assert cli(url, "tokens", "revoke", "alice-laptop")[0] == 0
    code, _, err = cli(url, "tokens", "revoke", "alice-laptop")
    assert code == 1 and "revoked already" in err
    code, _, err = cli(url, "tokens", "add", "alice-laptop", "--scope", "read")
    assert code == 1 and "never reused" in err
    code, _, err = cli(url, "tokens", "add", "bob", "--scope", "read", "--expires", "2001-01-01")
    assert code == 1 and "in the past" in err
    with EventStore(url) as store:
        admin = [(e.type, json.loads(e.data)) for e in store.read_stream(tokens.ADMIN_STREAM)]
    assert [t for t, _ in admin] == ["token.added", "token.revoked"]
    assert admin[0][1] == {"name": "alice-laptop", "scope": "append", "expires_at": row["expires_at"]}
    assert cli(url, "verify")[0] == 0


def test_server_uses_named_tokens_refuses_a_revoked_one_at_once_and_records_the_sender(url: str) -> None:
    with EventStore(url) as store:
        writer = tokens.add_token(store, "ci-runner", "append")
        reader = tokens.add_token(store, "dashboard", "read")
    app = create_app(ServeConfig(url=url, token=SERVE_TOKEN, read_token=None, host="127.0.0.1", workers=2))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        body = {"events": [{"type": "demo.note", "data": {"n": 1}, "meta": {"sent_by": "forged", "k": 1}}]}
        r = http.post("/api/streams/r-1/events", json=body, headers=bearer(writer, "build-7"))
        assert r.status_code == 201, r.text
        # the read token may not write; the append token may not read when reads need a token
        r = http.post("/api/streams/r-1/events", json=body, headers=bearer(reader))
        assert r.status_code == 403 and "may not write" in r.json()["error"]
        r = http.post("/api/streams/r-1/events", json={"events": [{"type": "demo.note", "data": {"n": 2}}]},
                      headers=bearer(SERVE_TOKEN, None))
        assert r.status_code == 201
        r = http.post("/api/streams/r-1/events", json=body, headers=bearer(writer, "bad\x01name"))
        assert r.status_code == 400 and "X-Evstore-Machine" in r.json()["error"].replace("x-evstore-machine",
                                                                                         "X-Evstore-Machine")
        events = http.get("/api/runs/r-1/events").json()
        assert events[0]["meta"] == {"k": 1, "sent_by": {"token": "ci-runner", "machine": "build-7"}}
        assert events[1]["meta"]["sent_by"] == {"token": "EVSTORE_SERVE_TOKEN", "machine": None}
        page = http.get("/runs/r-1").text
        assert "sent by token ci-runner from machine build-7" in page
        with EventStore(url) as store:
            assert tokens.get_token(store, "ci-runner").last_used_at is not None  # type: ignore[union-attr]
            tokens.revoke_token(store, "ci-runner")
        r = http.post("/api/streams/r-1/events", json=body, headers=bearer(writer))  # the very next request
        assert r.status_code == 403 and "revoked" in r.json()["error"]
        assert http.get("/healthz").json() == {"status": "ok"}
    code, out, _ = cli(url, "log", "r-1")
    assert code == 0 and "sent by token ci-runner from machine build-7" in out
    assert cli(url, "verify")[0] == 0


def test_a_token_the_worker_remembers_is_still_refused_at_once_when_revoked_and_writes_nothing(url: str) -> None:
    """An append whose token the worker has seen valid skips the look-up before its body (group
    commit, projections/serve/grouping.py); the group's transaction reads the token again and refuses
    a revoked one: 403, nothing written, and the worker forgets it."""
    with EventStore(url) as store:
        writer = tokens.add_token(store, "ci-runner", "append")
        other = tokens.add_token(store, "other", "append")
    app = create_app(ServeConfig(url=url, token=SERVE_TOKEN, read_token=None, host="127.0.0.1", workers=2))
    note = {"events": [{"type": "demo.note", "data": {"n": 1}}]}
    with TestClient(app, base_url="http://127.0.0.1") as http:
        for token in (writer, other):
            assert http.post("/api/streams/r-1/events", json=note, headers=bearer(token)).status_code == 201
        grants = app.state.server.grants
        assert grants.cached(writer) is not None and grants.cached(other) is not None
        with EventStore(url) as store:
            tokens.revoke_token(store, "ci-runner")
        r = http.post("/api/streams/r-9/events", json=note, headers=bearer(writer))
        assert r.status_code == 403 and 'the token "ci-runner" was revoked' in r.json()["error"]
        assert grants.cached(writer) is None and grants.cached(other) is not None
        r = http.post("/api/streams/r-9/events", json=note, headers=bearer(writer))  # now refused before its body
        assert r.status_code == 403 and "revoked" in r.json()["error"]
        assert http.post("/api/streams/r-1/events", json=note, headers=bearer(other)).status_code == 201
    with EventStore(url) as store:
        assert store.stream_info("r-9") is None and store.stream_version("r-1") == 3


def test_named_tokens_alone_open_writes_and_reads_beyond_loopback(url: str) -> None:
    """No EVSTORE_SERVE_TOKEN: writes are disabled until a token that may write is in force."""
    app = create_app(ServeConfig(url=url, token=None, read_token=None, host="0.0.0.0", workers=2))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        note = {"events": [{"type": "demo.note", "data": {"n": 1}}]}
        r = http.post("/api/streams/r-2/events", json=note, headers=bearer("x" * 40))
        assert r.status_code == 403 and "writes are disabled" in r.json()["error"]
        with EventStore(url) as store:
            admin = tokens.add_token(store, "ops", "admin")
            appender = tokens.add_token(store, "m1", "append")
        assert http.post("/api/streams/r-2/events", json=note, headers=bearer(appender)).status_code == 201
        assert http.get("/api/runs", headers=bearer(appender)).status_code == 403  # append cannot read
        assert http.get("/api/runs", headers=bearer(admin)).status_code == 200
        assert http.get("/api/runs", headers=bearer("y" * 40)).status_code == 403
        assert http.get("/api/runs").status_code == 401


def test_a_hook_call_over_http_records_its_sender_on_every_event_it_writes(url: str) -> None:
    """POST /hooks/claude-code: the hook event and the state version the Write made both name the sender."""
    with EventStore(url) as store:
        secret = tokens.add_token(store, "alice-laptop", "append")
    content = json.dumps({"schemaVersion": 1, "taskId": "PROJ-7", "status": "running"}, indent=2)
    path = "/nowhere/proj/agent-state.json"
    call = {"session_id": "sess-1", "transcript_path": "/nowhere/sess-1.jsonl", "cwd": "/nowhere/proj",
            "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": "toolu_1",
            "tool_input": {"file_path": path, "content": content},
            "tool_response": {"type": "update", "filePath": path, "content": content}}
    app = create_app(ServeConfig(url=url, token=None, read_token=None, host="127.0.0.1", workers=2))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        r = http.post("/hooks/claude-code", json=call, headers=bearer(secret, "alice-mbp"))
        assert r.status_code == 204, r.text
    with EventStore(url) as store:
        events = [e for e in store.iter_all() if e.stream_id != tokens.ADMIN_STREAM]
    assert len(events) >= 2  # the hook event and the state file's version
    for e in events:
        assert json.loads(e.meta)["sent_by"] == {"token": "alice-laptop", "machine": "alice-mbp"}, e.stream_id


def test_serve_with_named_writers_listens_beyond_loopback_and_runs_workers(url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No EVSTORE_SERVE_TOKEN: refused beyond loopback until a named token may write; then the start-up line says
    who writes, and --workers/--forwarded-allow-ips reach the workers (each builds the app after its fork)."""
    from projections import prefork

    monkeypatch.delenv("EVSTORE_SERVE_TOKEN", raising=False)
    started: list[tuple[object, dict[str, object]]] = []
    monkeypatch.setattr(prefork, "serve", lambda sock, build, **kw: started.append((build, kw)))
    args = ["serve", "--no-drain", "--host", "0.0.0.0", "--port", "0", "--workers", "3",
            "--forwarded-allow-ips", "10.0.0.5"]
    code, _, err = cli(url, *args)
    assert code == 1 and "Refusing to listen on 0.0.0.0 without a token" in err
    with EventStore(url) as store:
        tokens.add_token(store, "m1", "append")
    code, _, err = cli(url, *args)
    assert code == 0, err
    assert "with 3 workers" in err and "writes: holders of a named token with append or admin scope" in err
    [(build, kw)] = started
    assert kw["workers"] == 3
    assert kw["options"]["forwarded_allow_ips"] == "10.0.0.5" and kw["options"]["proxy_headers"] is True  # type: ignore[index]
    assert build.args[0].url == url and build.args[0].host == "0.0.0.0"  # type: ignore[attr-defined]


# The promises of eventstore/tokens.py itself (issue 33): each test below is one that a one-line change
# of tokens.py once broke without any other test noticing.


def test_tokens_list_json_shows_each_field_of_a_token_by_its_name(url: str) -> None:
    with EventStore(url) as store:
        tokens.add_token(store, "ci", "append")
    code, listed, err = cli(url, "tokens", "list", "--json")
    assert code == 0, err
    [row] = json.loads(listed)
    assert set(row) == {"name", "scope", "created_at", "last_used_at", "expires_at", "revoked_at"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", row["created_at"])


def test_a_sender_is_named_whatever_meta_sent_by_holds() -> None:
    assert tokens.sent_by_line({"token": "ci", "machine": "m1"}) == "sent by token ci from machine m1"
    assert tokens.sent_by_line({"token": "ci", "machine": None}) == "sent by token ci (no machine named)"
    assert tokens.sent_by_line({"token": "ci"}) == "sent by token ci (no machine named)"
    assert tokens.sent_by_line({"token": 7, "machine": ["x"]}) == "sent by token ? (no machine named)"
    assert tokens.sent_by_line({}) == "sent by token ? (no machine named)"


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_an_expiry_is_read_in_utc_whatever_the_local_time_zone(tz: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--expires 2099-01-31`` is the end of that day in UTC; an ISO time without an offset is UTC; one with
    ``Z`` or an offset is that instant; all are stored as UTC times, on any machine's time zone."""
    import time

    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        assert tokens.parse_expiry("2099-01-31") == "2099-02-01T00:00:00.000000Z"
        assert tokens.parse_expiry("2099-06-30T18:00:00Z") == "2099-06-30T18:00:00.000000Z"
        assert tokens.parse_expiry("2099-06-30T18:00:00") == "2099-06-30T18:00:00.000000Z"
        assert tokens.parse_expiry("2099-06-30T18:00:00+02:00") == "2099-06-30T16:00:00.000000Z"
        assert tokens.parse_expiry("2099-06-30T18:00:00.25-05:30") == "2099-06-30T23:30:00.250000Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_expiry_that_is_no_date_or_not_in_the_future_is_refused_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore.errors import EvstoreError

    for value in ("next week", "2099-13-01", "2099-06-30T25:00Z", ""):
        with pytest.raises(EvstoreError) as err:
            tokens.parse_expiry(value)
        assert str(err.value) == (f'--expires "{value}" is not a date; give YYYY-MM-DD or an ISO time such as '
                                  "2027-06-30T18:00:00Z."), value
    # an expiry of exactly now is already past (a token expiring at `now` is refused at `now`: Token.problem)
    monkeypatch.setattr(tokens, "utcnow", lambda: "2099-06-30T18:00:00.000000Z")
    with pytest.raises(EvstoreError, match=r'--expires "2099-06-30T18:00:00Z" is in the past; give a later date\.'):
        tokens.parse_expiry("2099-06-30T18:00:00Z")
    assert tokens.parse_expiry("2099-06-30T18:00:00.000001Z") == "2099-06-30T18:00:00.000001Z"


def test_revoking_one_token_revokes_that_one_only_and_records_it(url: str) -> None:
    from eventstore.errors import EvstoreError

    with EventStore(url) as store:
        for name in ("a-first", "b-second", "c-third"):
            tokens.add_token(store, name, "read" if name == "b-second" else "append")
        with pytest.raises(EvstoreError) as err:
            tokens.revoke_token(store, "nobody")
        assert str(err.value) == 'No token is named "nobody"; `evstore tokens list` shows them.'
        revoked = tokens.revoke_token(store, "b-second")
        assert revoked.name == "b-second" and revoked.scope == "read" and revoked.revoked_at is not None
        assert [t.name for t in tokens.list_tokens(store) if t.revoked_at] == ["b-second"]
        with pytest.raises(EvstoreError) as err:
            tokens.revoke_token(store, "b-second")
        assert re.fullmatch(r'The token "b-second" was revoked already \(at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)\.',
                            str(err.value)), str(err.value)
        assert tokens.revoke_token(store, "c-third").name == "c-third"  # a-first revoked by no one
        assert [t.name for t in tokens.list_tokens(store) if not t.revoked_at] == ["a-first"]
        admin = list(store.read_stream(tokens.ADMIN_STREAM))
    assert [json.loads(e.data) for e in admin if e.type == "token.revoked"] == [{"name": "b-second", "scope": "read"},
                                                                              {"name": "c-third", "scope": "append"}]
    for e in admin:  # who did it, on which machine, for every action
        by = json.loads(e.meta)["by"]
        assert set(by) == {"user", "machine"} and all(isinstance(v, str) and v for v in by.values()), e.type


def test_write_tokens_in_force_count_the_unexpired_unrevoked_writers(url: str) -> None:
    with EventStore(url) as store:
        assert tokens.write_tokens_in_force(store) == 0
        tokens.add_token(store, "reader", "read")
        tokens.add_token(store, "later", "append", expires="2099-01-01T00:00:00.000000Z")
        tokens.add_token(store, "gone", "append", expires="2001-01-01T00:00:00.000000Z")  # as stored: expired
        assert tokens.write_tokens_in_force(store) == 1
        tokens.add_token(store, "ops", "admin")
        assert tokens.write_tokens_in_force(store) == 2
        tokens.revoke_token(store, "later")
        assert tokens.write_tokens_in_force(store) == 1


def test_a_tokens_use_is_noted_at_most_once_a_minute(url: str) -> None:
    with EventStore(url) as store:
        secret = tokens.add_token(store, "ci", "append")
        assert tokens.get_token(store, "ci").last_used_at is None  # type: ignore[union-attr]
        tokens.find_token(store, secret)
        first = tokens.get_token(store, "ci").last_used_at  # type: ignore[union-attr]
        assert first is not None
        for _ in range(3):
            assert tokens.find_token(store, secret).name == "ci"  # type: ignore[union-attr]
        assert tokens.get_token(store, "ci").last_used_at == first  # type: ignore[union-attr]
        # a minute later it is noted again
        with store.writing("test: a use two minutes ago") as cur:
            store.backend.touch_token(cur, "ci", "2001-01-01T00:00:00.000000Z")
        tokens.find_token(store, secret)
        again = tokens.get_token(store, "ci").last_used_at  # type: ignore[union-attr]
        assert again is not None and again >= first


def test_a_token_is_refused_from_the_instant_it_expires_or_is_revoked_saying_when() -> None:
    at = "2099-06-30T18:00:00.000000Z"
    token = tokens.Token("ci", "append", "2026-01-01T00:00:00.000000Z", at, None, None)
    assert token.problem("2099-06-30T17:59:59.999999Z") is None
    for now in (at, "2099-06-30T18:00:00.000001Z"):
        assert token.problem(now) == 'the token "ci" expired at 2099-06-30T18:00:00Z'
    assert token.problem() is None  # now: the clock's
    revoked = tokens.Token("ci", "append", "2026-01-01T00:00:00.000000Z", None, "2026-05-01T09:30:15.123456Z", None)
    assert revoked.problem() == revoked.problem("2001-01-01T00:00:00.000000Z") == (
        'the token "ci" was revoked at 2026-05-01T09:30:15Z')


def test_a_bad_token_name_or_scope_is_refused_naming_it(url: str) -> None:
    from eventstore.errors import EvstoreError

    long_bad = "x" * 130 + "!"
    with EventStore(url) as store:
        for name in ("", "-lead", "a b", "a" * 101, long_bad):
            with pytest.raises(EvstoreError) as err:
                tokens.add_token(store, name, "read")
            assert str(err.value) == (f'Token name "{name[:120]}" is not valid; use letters, digits and . _ @ - '
                                      "(at most 100, starting with a letter or digit), e.g. alice-laptop."), name
        with pytest.raises(EvstoreError) as err:
            tokens.add_token(store, "ci", "write")
        assert str(err.value) == 'Scope "write" is not one of read, append, admin.'
        assert tokens.list_tokens(store) == []


def test_an_admin_action_by_a_user_the_system_cannot_name_records_a_question_mark(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container whose uid has no passwd entry and no USER/LOGNAME, getpass raises: the action is still
    recorded, by "?" on this machine."""
    import getpass
    import socket

    def no_user() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", no_user)
    with EventStore(url) as store:
        tokens.add_token(store, "ci", "append")
        tokens.revoke_token(store, "ci")
        admin = list(store.read_stream(tokens.ADMIN_STREAM))
    assert [json.loads(e.meta)["by"] for e in admin] == [{"user": "?", "machine": socket.gethostname()}] * 2


def test_a_name_in_use_or_revoked_is_refused_saying_which(url: str) -> None:
    from eventstore.errors import EvstoreError

    with EventStore(url) as store:
        tokens.add_token(store, "ci", "append")
        with pytest.raises(EvstoreError) as err:
            tokens.add_token(store, "ci", "read")
        assert str(err.value) == 'A token named "ci" exists (in use); choose another name (e.g. ci-2).'
        tokens.revoke_token(store, "ci")
        with pytest.raises(EvstoreError) as err:
            tokens.add_token(store, "ci", "read")
        assert str(err.value) == 'A token named "ci" exists (revoked; names are never reused); choose another name (e.g. ci-2).'


def test_a_secret_that_is_not_valid_unicode_finds_no_token_and_is_no_crash(sqlite_url: str) -> None:
    """What a server was sent can hold a lone surrogate (undecodable bytes): no token, never an exception."""
    with EventStore(migrated(sqlite_url)) as store:
        secret = tokens.add_token(store, "ci", "append")
        for sent in (secret + "\udcff", "\ud800" + secret[1:], "\udcff"):
            assert tokens.find_token(store, sent) is None
        assert tokens.find_token(store, secret).name == "ci"  # type: ignore[union-attr]


def test_a_token_whose_admin_event_cannot_be_recorded_is_not_kept(sqlite_url: str) -> None:
    """The admin stream records every token in force: when its ``token.added`` event cannot be appended,
    the token is taken back (it was never usable) and the append's error is what the caller sees."""
    from conftest import exec_sql

    with EventStore(migrated(sqlite_url)) as store:
        tokens.add_token(store, "kept", "read")
        exec_sql(store, "CREATE TRIGGER no_admin BEFORE INSERT ON events WHEN NEW.type = 'token.added' "
                        "BEGIN SELECT RAISE(ABORT, 'admin events refused by the test'); END")
        with pytest.raises(Exception, match="admin events refused by the test"):
            tokens.add_token(store, "lost", "append")
        assert [t.name for t in tokens.list_tokens(store)] == ["kept"]
        assert tokens.write_tokens_in_force(store) == 0


def test_a_busy_database_is_reported_with_what_each_token_action_was_doing(sqlite_url: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holding SQLite's write lock past the busy timeout: adding, revoking and noting a
    token's use each fail saying which of them could not be written."""
    import sqlite3

    from eventstore.backends import sqlite as sqlite_backend
    from eventstore.errors import EvstoreError

    url = migrated(sqlite_url)
    with EventStore(url) as store:
        secret = tokens.add_token(store, "ci", "append")
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.05)
    other = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with EventStore(url) as store:
            for action, call in (("adding an API token", lambda: tokens.add_token(store, "cd", "read")),
                                 ("revoking an API token", lambda: tokens.revoke_token(store, "ci")),
                                 ("noting an API token's use", lambda: tokens.find_token(store, secret))):
                with pytest.raises(EvstoreError) as err:
                    call()
                assert f"The database failed {action} (database is locked)" in str(err.value), str(err.value)
    finally:
        other.close()
    with EventStore(url) as store:
        assert [(t.name, t.revoked_at, t.last_used_at) for t in tokens.list_tokens(store)] == [("ci", None, None)]


def test_a_use_a_minute_after_the_last_one_is_noted(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with EventStore(url) as store:
        secret = tokens.add_token(store, "ci", "append")
        monkeypatch.setattr(tokens, "utcnow", lambda: "2030-01-01T00:00:00.000000Z")
        tokens.find_token(store, secret)
        monkeypatch.setattr(tokens, "utcnow", lambda: "2030-01-01T00:00:59.999999Z")
        tokens.find_token(store, secret)
        assert tokens.get_token(store, "ci").last_used_at == "2030-01-01T00:00:00.000000Z"  # type: ignore[union-attr]
        monkeypatch.setattr(tokens, "utcnow", lambda: "2030-01-01T00:01:00.000000Z")
        tokens.find_token(store, secret)
        assert tokens.get_token(store, "ci").last_used_at == "2030-01-01T00:01:00.000000Z"  # type: ignore[union-attr]


def test_a_token_that_cannot_be_taken_back_either_is_reported_as_such(sqlite_url: str) -> None:
    """The admin event refused and the token's row then impossible to delete (here a deferred foreign key
    pins it): the error says that taking the token back failed, so whoever added it knows it may exist."""
    from conftest import exec_sql

    from eventstore.errors import EvstoreError

    with EventStore(migrated(sqlite_url)) as store:
        exec_sql(store, "CREATE TABLE pin (name TEXT REFERENCES api_tokens(name) DEFERRABLE INITIALLY DEFERRED)")
        exec_sql(store, "CREATE TRIGGER pin_token AFTER INSERT ON api_tokens BEGIN INSERT INTO pin VALUES (NEW.name); END")
        exec_sql(store, "CREATE TRIGGER no_admin BEFORE INSERT ON events WHEN NEW.type = 'token.added' "
                        "BEGIN SELECT RAISE(ABORT, 'admin events refused by the test'); END")
        with pytest.raises(EvstoreError) as err:
            tokens.add_token(store, "stuck", "append")
        assert str(err.value).startswith("The database failed taking back an API token (FOREIGN KEY constraint"), (
            str(err.value))


def test_tokens_in_a_write_transaction_are_read_as_they_are_now(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What serve's group commit checks each named token against: the stored token of each digest as it is
    in the transaction (a revocation committed before included), none for a digest no token has; a use
    noted at most once a minute, and only for a token still valid."""
    with EventStore(url) as store:
        ci, gone, late = (tokens.add_token(store, n, "append") for n in ("ci", "gone", "late"))
        tokens.revoke_token(store, "gone")
        digests = [tokens.digest(s) for s in (ci, ci, gone, "not-a-token", late)]
        monkeypatch.setattr(tokens, "utcnow", lambda: "2030-01-01T00:00:00.000000Z")
        with store.writing("test: the group's check") as cur:
            store.backend.touch_token(cur, "late", "2029-12-31T23:59:00.000000Z")  # exactly a minute ago
            found = tokens.tokens_in_transaction(store, cur, digests)
        assert {k: (t.name, t.revoked_at is not None) for k, t in found.items()} == {
            digests[0]: ("ci", False), digests[2]: ("gone", True), digests[4]: ("late", False)}
        used = {t.name: t.last_used_at for t in tokens.list_tokens(store)}
        assert used == {"ci": "2030-01-01T00:00:00.000000Z", "gone": None, "late": "2030-01-01T00:00:00.000000Z"}
        monkeypatch.setattr(tokens, "utcnow", lambda: "2030-01-01T00:00:59.999999Z")
        with store.writing("test: the group's check") as cur:
            assert set(tokens.tokens_in_transaction(store, cur, digests[:1])) == {digests[0]}
        assert tokens.get_token(store, "ci").last_used_at == "2030-01-01T00:00:00.000000Z"  # type: ignore[union-attr]


def test_a_write_takes_its_token_only_as_a_bearer_even_one_the_worker_remembers(url: str) -> None:
    """HTTP Basic (a browser's, the token as its password) is for reads: a write sent so is refused and
    writes nothing, also with a named token this worker has seen write; an append answers its stream,
    version, log positions and whether it was a duplicate."""
    import base64

    with EventStore(url) as store:
        writer = tokens.add_token(store, "ci-runner", "append")
    app = create_app(ServeConfig(url=url, token=SERVE_TOKEN, read_token=None, host="127.0.0.1", workers=2))
    note = {"events": [{"type": "demo.note", "data": {"n": 1}}]}
    basic = {"Authorization": "Basic " + base64.b64encode(f"me:{writer}".encode()).decode(), "X-Evstore-Machine": "m"}
    with TestClient(app, base_url="http://127.0.0.1") as http:
        r = http.post("/api/streams/r-1/events", json=note, headers=bearer(writer))
        assert app.state.server.grants.cached(writer) is not None
        r2 = http.post("/api/streams/r-2/events", json=note, headers=basic)
        assert r2.status_code == 401, r2.text
    with EventStore(url) as store:
        [event] = store.read_stream("r-1")
        assert r.status_code == 201 and r.json() == {"stream": "r-1", "version": 1, "positions": [event.position],
                                                     "duplicate": False}
        assert store.stream_info("r-2") is None
