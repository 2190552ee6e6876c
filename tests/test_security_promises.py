"""The security promises stated as tests (issue 33), whatever the code that keeps them looks like.

- ``evstore serve`` accepts a token only when it is exactly the token: any prefix, suffix, case
  change or extra byte is refused, on the read path (Bearer, Basic password) and the write path
  (Bearer, the integrity page's form field), for the token and the read token alike.
- The replay cache uses a cached document only for the exact event it was computed after: a row
  moved to another version, or to another stream's event, is not used (the stream is folded from
  its first event instead).
- The hook spool stores a record only when it is whole: what a dying hook left half-written
  (truncated, without its line end, partial JSON) is never stored as a call, and never stops the
  records spooled after it from being stored.

The secret scrubber's key formats are in ``test_secret_forms.py`` (one case per format).
"""

from __future__ import annotations

import base64
import json
import math
import secrets
from pathlib import Path

import pytest
from conftest import exec_sql, migrated
from serve_fixtures import LOCAL
from starlette.testclient import TestClient

from eventstore import capture, replay_cache, spool
from eventstore.dialects import get_dialect
from eventstore.errors import EvstoreError
from eventstore.store import EventStore, NewEvent
from projections.serve import ServeConfig, create_app
from projections.serve.access import SERVE_TOKEN, Grant, HTTPError, Policy

TOKEN = secrets.token_urlsafe(32)
READER = secrets.token_urlsafe(32)


def near_misses(token: str) -> list[str]:
    """Strings that are not ``token`` but share most of it: what a careless compare would let in."""
    letters = [i for i, c in enumerate(token) if c.isalpha()]
    one_case = [token[:i] + token[i].swapcase() + token[i + 1:] for i in (letters[0], letters[-1])]
    other = "A" if token[3] != "A" else "B"
    misses = [token[:-1], token[1:], token[: len(token) // 2], token + "x", "x" + token, token + token[-1],
              token.upper(), token.lower(), token.swapcase(), *one_case, token[:3] + other + token[4:],
              token + "\x00", "\x00" + token, token + "\x0b", token + "\x1f", token + "\x85", token + "\xa0",
              token + "\u3000", token[:5] + "\u0430" + token[6:], token + ":", token + "=", " ", ""]
    return [m for m in misses if m != token]  # upper() of a token without lower-case letters is itself


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def basic(token: str, user: str = "anyone") -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


@pytest.fixture
def policy() -> Policy:
    return Policy.of(host="0.0.0.0", token=TOKEN, read_token=READER, allowed_hosts=())


def test_near_misses_are_all_different_tokens() -> None:
    misses = near_misses(TOKEN)
    assert TOKEN not in misses and len(misses) >= 20


@pytest.mark.parametrize("scope", ["read", "write"])
def test_the_token_itself_is_accepted(policy: Policy, scope: str) -> None:
    assert policy.authorize(bearer(TOKEN), scope) == Grant(SERVE_TOKEN, TOKEN, frozenset({"read", "write", "admin"}))  # type: ignore[arg-type]
    assert policy.authorize({}, scope, form_token=TOKEN) is not None  # type: ignore[arg-type]
    if scope == "read":
        assert policy.authorize(basic(TOKEN), "read") is not None
        assert policy.authorize(basic(READER), "read") == Grant("read token", READER, frozenset({"read"}))
        assert policy.authorize(bearer(READER), "read") is not None
        assert policy.authorize(basic(TOKEN, user=""), "read") is not None  # any user name, even none


@pytest.mark.parametrize("secret", [TOKEN, READER], ids=["token", "read token"])
@pytest.mark.parametrize("scope", ["read", "write"])
def test_anything_but_exactly_the_token_is_refused(policy: Policy, scope: str, secret: str) -> None:
    for given in near_misses(secret):
        forms: list[tuple[dict[str, str], str | None]] = [({}, given)]  # the integrity page's form field
        if given.strip(" "):
            forms.append((bearer(given), None))
        if scope == "read":
            forms.append((basic(given), None))
        for headers, form in forms:
            with pytest.raises(HTTPError) as err:
                policy.authorize(headers, scope, form)  # type: ignore[arg-type]
            assert err.value.status in (401, 403), (given, headers, form)


def test_a_token_compared_as_bytes_not_as_normalised_text(policy: Policy) -> None:
    """Unicode that normalises to the token (NFKC: fullwidth letters) is another token."""
    import unicodedata

    fullwidth = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in TOKEN)
    assert unicodedata.normalize("NFKC", fullwidth) == TOKEN
    for scope in ("read", "write"):
        with pytest.raises(HTTPError) as err:
            policy.authorize(bearer(fullwidth), scope)  # type: ignore[arg-type]
        assert err.value.status == 403


def test_the_compare_is_constant_time_over_every_grant(policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hmac.compare_digest`` decides, and is asked about every grant whatever the first answered
    (how long a refusal takes says nothing about which grant a guess came close to)."""
    import hmac

    from projections.serve import access

    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(access.hmac, "compare_digest", spy)
    assert policy.authorize(bearer(TOKEN), "write") is not None
    assert calls == [(TOKEN.encode(), TOKEN.encode()), (TOKEN.encode(), READER.encode())]
    calls.clear()
    with pytest.raises(HTTPError):
        policy.authorize(bearer(TOKEN[:-1]), "write")
    assert [b for _, b in calls] == [TOKEN.encode(), READER.encode()]


def test_the_token_as_the_rfc_writes_it(policy: Policy) -> None:
    """``Bearer`` and ``Basic`` take one or more spaces before the credentials (RFC 9110, 11.4)
    and the scheme in any case; the Basic password is everything after the first colon."""
    for header in (f"Bearer  {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}\t"):
        assert policy.authorize({"authorization": header}, "write") is not None, header
    with pytest.raises(HTTPError) as err:
        policy.authorize({"authorization": f"Bearer {TOKEN} {TOKEN}"}, "write")
    assert err.value.status == 403
    colons = "Zq:" + TOKEN + ":x"
    with_colons = Policy.of(host="0.0.0.0", token=colons, read_token=None, allowed_hosts=())
    assert with_colons.authorize(basic(colons), "read") is not None
    assert with_colons.authorize(basic(colons, user="me"), "read") is not None
    x_token = "X" + TOKEN + "X"  # a token that begins and ends with a letter a sloppy strip would eat
    xs = Policy.of(host="0.0.0.0", token=x_token, read_token=None, allowed_hosts=())
    assert xs.authorize(bearer(x_token), "write") is not None
    for given in (x_token[1:], x_token[:-1]):
        with pytest.raises(HTTPError):
            xs.authorize(bearer(given), "write")


def test_basic_credentials_that_are_not_strict_base64_are_refused(policy: Policy) -> None:
    good = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    for value in (good[:4] + "*" + good[4:], good[:4] + "\n" + good[4:], good + "!", good[:-1]):
        with pytest.raises(HTTPError) as err:
            policy.authorize({"authorization": "Basic " + value}, "read")
        assert err.value.status == 401, value  # no token could be read from it
    not_utf8 = base64.b64encode(b"anyone:\xff" + TOKEN.encode()).decode()
    with pytest.raises(HTTPError) as err:
        policy.authorize({"authorization": "Basic " + not_utf8}, "read")
    assert err.value.status == 401


def test_a_token_with_a_lone_surrogate_is_refused_not_a_crash(policy: Policy) -> None:
    for given in (TOKEN + "\udcff", "\ud800"):
        for scope in ("read", "write"):
            with pytest.raises(HTTPError) as err:
                policy.authorize({}, scope, form_token=given)  # type: ignore[arg-type]
            assert err.value.status == 403


def test_token_strength_is_counted_in_bits() -> None:
    from projections.serve.access import check_token_strength, token_bits

    digits = "0123456789" * 4  # every digit: the digits alphabet itself, not a bigger one
    assert token_bits(digits) == pytest.approx(40 * math.log2(10))
    assert token_bits(digits.replace("0", "a")) == pytest.approx(40 * 4)  # hex
    assert token_bits("é" * 20) == 320.0  # beyond ASCII: 8 bits per UTF-8 byte
    check_token_strength("0123456789abcdef" * 2)  # exactly 128 bits is enough
    with pytest.raises(EvstoreError, match=r"too short to be secret \(31 characters, at most 124 bits"):
        check_token_strength(("0123456789abcdef" * 2)[:-1])


def test_refusals_say_why(policy: Policy) -> None:
    for scope in ("read", "write"):
        with pytest.raises(HTTPError) as err:
            policy.authorize(bearer(TOKEN + "x"), scope)  # type: ignore[arg-type]
        assert (err.value.status, err.value.message, str(err.value)) == (
            403, "the token is not valid for this server.", "the token is not valid for this server.")
    assert policy.host_problem(None) == policy.host_problem("") == (
        "the request has no Host header; send the address of this server as its Host.")


def test_the_host_check_reads_the_name_exactly() -> None:
    from projections.serve.access import host_name

    assert host_name("[::1]:8765") == host_name("[::1]") == "::1"
    assert host_name("[::1]]:8765") == "::1"  # the first closing bracket ends the address
    assert host_name("[]") == "" and host_name("[::1") == "[::1"  # no address inside, no closing bracket
    v6 = Policy(host="[2001:db8::1]", allowed_hosts=frozenset(), grants=(), reads_need_token=True)
    assert v6.host_problem("[2001:db8::1]:8765") is None  # a host given in brackets is its address
    assert v6.host_problem("[2001:db8::2]:8765") is not None
    local = Policy.of(host="127.0.0.1", token=None, read_token=None, allowed_hosts=())
    long_name = "a" * 100 + ".example"
    assert f'Host "{"a" * 80}" is not a name' in (local.host_problem(long_name) or "")  # shown cut to 80
    assert 'Host "ex\\xe4mple.com" is not a name' in (local.host_problem("exämple.com") or "")  # escaped


def test_a_server_without_the_token_refuses_every_write_saying_why() -> None:
    read_only = Policy.of(host="0.0.0.0", token=None, read_token=READER, allowed_hosts=())
    assert not read_only.writable
    for headers, form in (({}, None), (bearer(TOKEN), None), ({}, TOKEN)):
        with pytest.raises(HTTPError) as err:
            read_only.authorize(headers, "write", form)
        assert (err.value.status, err.value.message) == (403, "writes are disabled on this server; start `evstore "
                                                              "serve` with EVSTORE_SERVE_TOKEN or --token-file, or add "
                                                              "a token with `evstore tokens add NAME --scope append`, "
                                                              "to allow them.")
    with pytest.raises(HTTPError) as err:
        read_only.authorize(bearer(READER), "write")
    assert (err.value.status, err.value.message) == (403, "the read token may not write; use a token with write access.")
    assert read_only.authorize(bearer(READER), "read") is not None


def test_once_no_token_may_write_every_write_is_refused_as_disabled(sqlite_url: str) -> None:
    """A revoked or unknown token on a server where no token may write any more: the answer says writes
    are disabled (how to enable them), not only that this token is no good."""
    from eventstore import tokens
    from projections.serve.app import StoreTokens

    with EventStore(migrated(sqlite_url)) as store:
        appender = tokens.add_token(store, "m1", "append")
        policy = Policy.of(host="0.0.0.0", token=None, read_token=None, allowed_hosts=(), tokens=StoreTokens(store))
        assert policy.authorize(bearer(appender), "write") is not None
        tokens.revoke_token(store, "m1")
        assert not policy.writable
        for given in (appender, "z" * 43):
            with pytest.raises(HTTPError) as err:
                policy.authorize(bearer(given), "write")
            assert (err.value.status, err.value.message.split(";")[0]) == (403, "writes are disabled on this server")


def test_a_named_token_is_accepted_only_exactly(sqlite_url: str) -> None:
    """The store's named tokens (``evstore tokens add``), looked up by the SHA-256 of what was sent."""
    from eventstore import tokens
    from projections.serve.app import StoreTokens

    with EventStore(migrated(sqlite_url)) as store:
        admin = tokens.add_token(store, "ci", "admin")
        policy = Policy.of(host="0.0.0.0", token=None, read_token=None, allowed_hosts=(), tokens=StoreTokens(store))
        for scope in ("read", "write"):
            grant = policy.authorize(bearer(admin), scope)  # type: ignore[arg-type]
            assert grant is not None and grant.name == "ci"
        for given in near_misses(admin)[:14]:
            for scope in ("read", "write"):
                with pytest.raises(HTTPError) as err:
                    policy.authorize(bearer(given), scope)  # type: ignore[arg-type]
                assert err.value.status == 403, given


def test_a_named_token_with_a_lone_surrogate_is_refused_not_a_crash(sqlite_url: str) -> None:
    """As for the token of the command line: any str is looked up (a 403), none raises."""
    from eventstore import tokens
    from projections.serve.app import StoreTokens

    with EventStore(migrated(sqlite_url)) as store:
        admin = tokens.add_token(store, "ci", "admin")
        policy = Policy.of(host="0.0.0.0", token=None, read_token=None, allowed_hosts=(), tokens=StoreTokens(store))
        for given in ("\ud800" + admin[1:], admin + "\udbff", admin[:-1] + "\udcff", "\udfff"):
            with pytest.raises(HTTPError) as err:
                policy.authorize(bearer(given), "write")
            assert err.value.status == 403, ascii(given)


def test_a_request_without_a_token_is_told_how_to_send_one(policy: Policy) -> None:
    """Writes are challenged for a Bearer token (never Basic: a browser would then attach the
    token to a cross-site form by itself); reads for Basic, so a browser asks for it."""
    with pytest.raises(HTTPError) as err:
        policy.authorize({}, "write")
    assert (err.value.status, err.value.message, err.value.headers) == (
        401, 'this needs a token with write access: send "Authorization: Bearer TOKEN".',
        {"www-authenticate": 'Bearer realm="evstore"'})
    with pytest.raises(HTTPError) as err:
        policy.authorize({"authorization": "Basic " + base64.b64encode(f"me:{TOKEN}".encode()).decode()}, "write")
    assert err.value.status == 401  # Basic credentials are no write token
    with pytest.raises(HTTPError) as err:
        policy.authorize({}, "read")
    assert (err.value.status, err.value.message, err.value.headers) == (
        401, 'this needs a token with read access: send "Authorization: Bearer TOKEN" (a browser: the token as '
             "the password).", {"www-authenticate": 'Basic realm="evstore", charset="UTF-8"'})


@pytest.fixture
def app_client(sqlite_url: str) -> TestClient:
    return TestClient(create_app(ServeConfig(url=migrated(sqlite_url), token=TOKEN, read_token=READER)), base_url=LOCAL)


def test_the_write_routes_refuse_every_near_miss_and_write_nothing(app_client: TestClient) -> None:
    body = json.dumps({"events": [{"type": "demo.note", "data": {"n": 1}}]})
    hook = json.dumps({"session_id": "S", "hook_event_name": "Stop"})
    with app_client as c:
        for given in [*near_misses(TOKEN)[:12], READER]:
            if not given.strip():
                continue
            assert c.post("/api/streams/s-1/events", content=body, headers=bearer(given)).status_code == 403, given
            assert c.post("/hooks/claude-code", content=hook, headers=bearer(given)).status_code == 403, given
            assert c.post("/api/verify", headers=bearer(given)).status_code == 403, given
            r = c.post("/integrity/verify", content=f"token={given}",
                       headers={"content-type": "application/x-www-form-urlencoded"})
            assert r.status_code == 403, given
        assert c.get("/api/runs", headers=bearer(READER)).json()["runs"] == []  # nothing was written
        r = c.post("/api/streams/s-1/events", content=body, headers=bearer(TOKEN))
        assert r.status_code in (200, 201), r.text
        for given in near_misses(READER)[:12]:
            if given.strip():
                assert c.get("/api/runs", headers=bearer(given)).status_code == 403, given


# -- the replay cache -----------------------------------------------------------------------------


def _patch(n: int) -> NewEvent:
    return NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/n", "value": n}]})


def _cached_streams(store: EventStore) -> tuple[int, int, str]:
    """Streams A and B of five versions each (n = 1..5 and 11..15), a cached document at A@2."""
    store.append("A", [NewEvent("document.observed", {"doc": {"n": 1, "s": "A"}}), *(_patch(n) for n in range(2, 6))],
                 dialect="generic")
    store.append("B", [NewEvent("document.observed", {"doc": {"n": 11, "s": "B"}}),
                       *(_patch(n) for n in range(12, 16))], dialect="generic")
    generic = get_dialect("generic")
    a, b = store.stream_info("A"), store.stream_info("B")
    assert a is not None and b is not None
    doc, last, _ = replay_cache.fold(store, a.stream_pk, generic, 2, use_cache=False)
    assert (doc, last) == ({"n": 2, "s": "A"}, 2)
    replay_cache.save(store, a.stream_pk, replay_cache.cache_name(generic), 2, doc)
    return a.stream_pk, b.stream_pk, replay_cache.cache_name(generic)


def test_a_cached_state_is_used_for_the_event_it_was_computed_after(store: EventStore) -> None:
    a, _, name = _cached_streams(store)
    assert replay_cache.latest_by_pk(store, a, name, 5) == (2, {"n": 2, "s": "A"})
    assert replay_cache.latest_by_pk(store, a, name, 1) is None  # a row after the asked version is never used
    doc, last, folded = replay_cache.fold(store, a, get_dialect("generic"), 4)
    assert (doc, last, folded) == ({"n": 4, "s": "A"}, 4, 2)  # folded from the row: two events, not four
    assert replay_cache.fold(store, a, get_dialect("generic"), 2) == ({"n": 2, "s": "A"}, None, 0)  # the row alone
    assert replay_cache.latest(store, "A", name) == (2, {"n": 2, "s": "A"})  # up to the stream's head
    assert replay_cache.latest(store, "A", name, 2) == (2, {"n": 2, "s": "A"})
    assert replay_cache.latest(store, "A", name, 1) is None
    assert replay_cache.latest(store, "B", name) is None and replay_cache.latest(store, "C", name) is None


def test_a_cache_write_the_database_refuses_says_it_was_the_replay_cache_and_a_replay_still_answers(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds SQLite's write lock past the busy timeout: saving a cached state fails naming
    what it was writing, and a replay that would save one answers all the same (the cache is never
    needed for a read)."""
    import sqlite3

    from eventstore.backends import sqlite as sqlite_backend
    from projections.replay import replay

    url = migrated(sqlite_url)
    with EventStore(url) as store:
        store.append("A", [NewEvent("document.observed", {"doc": {"n": 0}}), *(_patch(n) for n in range(1, 300))],
                     dialect="generic")
        info = store.stream_info("A")
        assert info is not None
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.05)
    other = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with EventStore(url) as store:
            with pytest.raises(EvstoreError) as err:
                replay_cache.save(store, info.stream_pk, replay_cache.cache_name(get_dialect("generic")), 2, {"n": 2})
            assert "The database failed writing the replay cache (database is locked)" in str(err.value), str(err.value)
            assert replay(store, "A").doc == {"n": 299}
    finally:
        other.close()
    with EventStore(url) as store:
        assert replay_cache.latest(store, "A", replay_cache.cache_name(get_dialect("generic"))) is None


@pytest.mark.parametrize("move", ["to a later version", "to an earlier version", "to another stream",
                                  "to another stream's same version", "past the stream's head"])
def test_a_cached_row_moved_to_another_event_is_not_used(store: EventStore, move: str) -> None:
    a, b, name = _cached_streams(store)
    sets, stream = {"to a later version": ("version = 3", a), "to an earlier version": ("version = 1", a),
                    "to another stream": (f"stream_pk = {b}, version = 3", b),
                    "to another stream's same version": (f"stream_pk = {b}", b),
                    "past the stream's head": ("version = 9", a)}[move]
    exec_sql(store, f"UPDATE replay_cache SET {sets} WHERE stream_pk = :a AND version = 2", a=a)
    assert replay_cache.latest_by_pk(store, stream, name, 9) is None
    generic = get_dialect("generic")
    for upto in range(1, 6):
        doc, last, folded = replay_cache.fold(store, stream, generic, upto)
        assert (doc, last, folded) == replay_cache.fold(store, stream, generic, upto, use_cache=False)
        assert folded == upto  # every event from the first, none skipped for the row
    assert replay_cache.latest(store, "A" if stream == a else "B", name) is None


def test_a_row_whose_event_was_replaced_is_not_used(store: EventStore) -> None:
    """The event the row was computed after rewritten in place (triggers dropped): another event."""
    from conftest import drop_append_only_triggers

    a, _, name = _cached_streams(store)
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET hash = :h WHERE stream_pk = :a AND version = 2", h=b"\x01" * 32, a=a)
    assert replay_cache.latest_by_pk(store, a, name, 5) is None


def test_a_row_copied_under_another_name_or_with_other_bytes_is_not_used(store: EventStore) -> None:
    a, _, name = _cached_streams(store)
    exec_sql(store, "UPDATE replay_cache SET state = :st WHERE stream_pk = :a",
             st=replay_cache.encode_state({"n": 99}), a=a)  # the digest no longer matches
    assert replay_cache.latest_by_pk(store, a, name, 5) is None
    assert replay_cache.latest_by_pk(store, a, "replay.generic.v999", 5) is None


# -- the hook spool -------------------------------------------------------------------------------


def _call(i: int) -> bytes:
    return json.dumps({"session_id": "S", "hook_event_name": "PreToolUse", "tool_use_id": f"t{i}"}).encode()


def _line(i: int) -> bytes:
    """One whole spool record of call ``i``, as ``spool.write`` writes it."""
    header = json.dumps({"received_at": 1.5, "pid": 1, "bytes": len(_call(i))}).encode()
    return base64.b64encode(header) + b"\t" + base64.b64encode(_call(i)) + b"\n"


def _tool_uses(store: EventStore) -> list[str]:
    """The tool-use ids of the calls stored in stream "S", in order."""
    return [json.loads(e.data)["tool_use_id"] for e in store.read_stream("S")]


def _cuts(line: bytes) -> list[bytes]:
    """Every way a hook can die writing ``line``: each proper prefix of it (no line end)."""
    return [line[:n] for n in range(1, len(line) - 1)]


def test_the_record_format_is_what_write_writes(tmp_path: Path) -> None:
    spool.write(tmp_path, _call(0), now=1.5)
    text = (tmp_path / spool.SPOOL).read_bytes()
    header, stdin = text.rstrip(b"\n").split(b"\t")
    assert json.loads(base64.b64decode(header))["bytes"] == len(_call(0)) and base64.b64decode(stdin) == _call(0)


def test_a_half_written_last_record_is_not_stored(sqlite_url: str, tmp_path: Path) -> None:
    url = migrated(sqlite_url)
    line = _line(1)
    for n, cut in enumerate(_cuts(line)[:: max(1, len(line) // 25)]):
        directory = tmp_path / f"s{n}"
        directory.mkdir()
        (directory / spool.SPOOL).write_bytes(_line(0) + cut)
        records = [r for r in spool.read(directory / spool.SPOOL)]
        assert [r.stdin for r in records] == [_call(0)], cut
    with EventStore(url) as store:
        directory = tmp_path / "drained"
        directory.mkdir()
        (directory / spool.SPOOL).write_bytes(_line(0) + line[: len(line) // 2])
        result = capture.drain(store, directory)
        assert result.hooks == 1
        assert _tool_uses(store) == ["t0"]
        assert store.stream_version("claude-hooks") == 0


@pytest.mark.parametrize("where", ["in the header", "in the header's JSON", "in the input", "at the tab",
                                   "just before the line end"])
def test_a_half_written_record_never_stored_and_never_blocks_the_next(store_url: str, tmp_path: Path,
                                                                      where: str) -> None:
    """A hook died mid-write; the hooks after it appended their whole records behind its remains."""
    line = _line(1)
    header_end = line.index(b"\t")
    cut = {"in the header": 5, "in the header's JSON": header_end - 4, "in the input": header_end + 9,
           "at the tab": header_end + 1, "just before the line end": len(line) - 1}[where]
    directory = tmp_path / "spool"
    directory.mkdir()
    (directory / spool.SPOOL).write_bytes(_line(0) + line[:cut])
    spool.write(directory, _call(2), now=2.5)  # later hooks append behind the dead one's bytes
    spool.write(directory, _call(3), now=3.5)
    with EventStore(store_url) as store:
        result = capture.drain(store, directory)
        assert _tool_uses(store) == ["t0", "t2", "t3"], result
        assert store.stream_version("claude-hooks") == 0  # the remains were not stored as a call
        assert result.hooks == 3
    assert list(directory.glob("claimed-*")) == []


@pytest.mark.parametrize("damage", ["input cut short (partial JSON)", "bad base64", "header not JSON",
                                    "header not an object", "one field", "input longer than its header says"])
def test_a_terminated_record_that_is_not_whole_is_never_stored(store_url: str, tmp_path: Path, damage: str) -> None:
    call = _call(1)
    header = json.dumps({"received_at": 1.5, "pid": 1, "bytes": len(call)}).encode()
    b64 = base64.b64encode
    bad = {"input cut short (partial JSON)": b64(header) + b"\t" + b64(call[:-4]),
           "bad base64": b64(header) + b"\t" + b64(call)[:-3] + b"!!",
           "header not JSON": b64(header[:-3]) + b"\t" + b64(call),
           "header not an object": b64(b"[1, 2]") + b"\t" + b64(call),
           "one field": b64(header),
           "input longer than its header says": b64(header) + b"\t" + b64(call + b" ")}[damage]
    directory = tmp_path / "spool"
    directory.mkdir()
    (directory / spool.SPOOL).write_bytes(_line(0) + bad + b"\n" + _line(2))
    records = list(spool.read(directory / spool.SPOOL))
    assert [r.stdin for r in records if not r.header.get("corrupt")] == [_call(0), _call(2)]
    assert [r.header for r in records][1] == {"corrupt": True}
    with EventStore(store_url) as store:
        result = capture.drain(store, directory)
        assert _tool_uses(store) == ["t0", "t2"]
        assert store.stream_version("claude-hooks") == 0
        assert result.hooks == 2 and len(result.errors) == 1 and "not whole" in result.errors[0]
    assert "not whole" in (directory / spool.DRAIN_ERRORS).read_text()


def test_a_record_truncated_by_its_hook_on_purpose_is_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input over the limit is kept in part on purpose, and says so: that record is whole."""
    monkeypatch.setattr(spool, "MAX_INPUT_BYTES", 10)
    spool.write(tmp_path, _call(0), now=1.0)
    [record] = spool.read(tmp_path / spool.SPOOL)
    assert record.stdin == _call(0)[:10] and record.header["truncated"] is True
    assert record.header["bytes"] == len(_call(0))


def test_a_record_with_its_copied_file_cut_short_is_not_whole(tmp_path: Path) -> None:
    """The file a Write hook copies is counted in the header: a record whose copy is short is not whole."""
    written = tmp_path / "tasks.json"
    written.write_bytes(b'{"tasks": []}')
    call = json.dumps({"session_id": "S", "hook_event_name": "PostToolUse", "tool_name": "Write",
                       "tool_input": {"file_path": str(written)}}).encode()
    spool.write(tmp_path / "s", call, now=1.0)
    path = tmp_path / "s" / spool.SPOOL
    [record] = spool.read(path)
    assert (record.file_bytes, record.header["file_bytes"], record.header["file"]) == (
        b'{"tasks": []}', 13, str(written))
    header, stdin, copy = path.read_bytes().rstrip(b"\n").split(b"\t")
    for short in (base64.b64encode(b'{"tasks": ]}'), b""):
        path.write_bytes(b"\t".join([header, stdin, short]) + b"\n")
        assert [r.header for r in spool.read(path)] == [{"corrupt": True}]
    path.write_bytes(b"\t".join([header, stdin]) + b"\n")  # the copy's field gone altogether
    assert [r.header for r in spool.read(path)] == [{"corrupt": True}]


def test_a_fold_over_an_erased_event_says_which_and_why(store: EventStore) -> None:
    """An erased payload ends a fold with its version and the erasure's reason, never a wrong document."""
    from eventstore import erasure
    from eventstore.errors import ContentErased

    a, _, _ = _cached_streams(store)
    erasure.erase(store, reason="GDPR request 7", stream_ids=["A"], scrub=False)
    with pytest.raises(ContentErased) as err:
        replay_cache.fold(store, a, get_dialect("generic"), 5, use_cache=False)
    assert str(err.value).startswith("The content of version 1 was ") and "GDPR request 7" in str(err.value)
    with pytest.raises(ContentErased, match="The content of version 1 was "):
        replay_cache.fold(store, a, get_dialect("generic"), 5)  # the cached row went with the erasure


def test_a_record_is_read_exactly_as_written(tmp_path: Path) -> None:
    """Strict base64 in every field (a stray byte is damage, not skipped), the line's SHA-256 as its digest."""
    import hashlib

    path = tmp_path / spool.SPOOL
    line = _line(0)
    header, stdin = line.rstrip(b"\n").split(b"\t")
    path.write_bytes(line)
    [record] = spool.read(path)
    assert (record.stdin, record.digest) == (_call(0), hashlib.sha256(line).hexdigest())
    for damaged in (header[:4] + b"!" + header[4:] + b"\t" + stdin, header + b"\t" + stdin[:4] + b"!" + stdin[4:],
                    header + b" \t" + stdin, header + b"\t" + stdin + b" "):
        path.write_bytes(damaged + b"\n")
        [record] = spool.read(path)
        assert (record.header, record.stdin) == ({"corrupt": True}, damaged + b"\n"), damaged
        assert record.digest == hashlib.sha256(damaged + b"\n").hexdigest()


@pytest.mark.parametrize("host", ["localhost", "LocalHost", "127.0.0.1", "::1", "[::1]"])
def test_a_server_on_a_loopback_name_is_a_loopback_server(host: str) -> None:
    """`--host localhost` (any case) is this machine only, as 127.0.0.1 and ::1 are: reads need no token, and
    loopback addresses and localhost are names of the server."""
    policy = Policy.of(host=host, token=TOKEN, read_token=None, allowed_hosts=())
    assert not policy.reads_need_token and policy.authorize({}, "read") is None
    assert policy.host_problem("127.0.0.1:8765") is None and policy.host_problem("localhost:8765") is None
    assert "is not a name of this server" in (policy.host_problem("attacker.example") or "")


@pytest.mark.parametrize("host", ["evstore.example", "localhost.example", "10.0.0.1", "[2001:db8::1]"])
def test_a_server_on_any_other_name_or_address_needs_a_token_to_read(host: str) -> None:
    policy = Policy.of(host=host, token=TOKEN, read_token=None, allowed_hosts=())
    assert policy.reads_need_token
    with pytest.raises(HTTPError) as err:
        policy.authorize({}, "read")
    assert err.value.status == 401


def test_a_server_answers_to_the_name_it_was_started_on_in_any_case() -> None:
    """Host names are compared as DNS compares them: `--host Evstore.Example.` answers to `evstore.example:8765`."""
    policy = Policy.of(host="Evstore.Example.", token=TOKEN, read_token=None, allowed_hosts=())
    assert policy.host == "evstore.example"
    for header in ("evstore.example:8765", "EVSTORE.EXAMPLE", "evstore.example."):
        assert policy.host_problem(header) is None, header
    assert policy.host_problem("other.example") is not None
