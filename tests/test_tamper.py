"""Tamper evidence, class by class: rows are altered behind the store's back (the append-only
triggers dropped first) and `verify` / `verify --seal` must name what each check catches,
on SQLite and on PostgreSQL.  The tamper matrix of docs/proofs.md is this matrix in prose."""

from __future__ import annotations

import inspect
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import drop_append_only_triggers as _drop_triggers
from conftest import exec_sql as _exec
from sqlalchemy import text

from eventstore import chain, codec, replay_cache
from eventstore.dialects import get_dialect
from eventstore.errors import ConcurrencyError
from eventstore.store import EventStore, NewEvent
from eventstore.verify import check_seal, check_tree_checkpoint, make_seal, verify
from projections import replay as rp

KEY = "tamper-k3y"
#: (stream, version, class) of each failure, sorted.
Found = list[tuple[str, int, str]]


def _pk(stream: str) -> str:
    return f"(SELECT stream_pk FROM streams WHERE stream_id = '{stream}')"


def _where(stream: str, version: int) -> str:
    return f"stream_pk = {_pk(stream)} AND version = {version}"


def _salt(store: EventStore, stream: str, version: int) -> bytes | None:
    """The event's salt as stored (readable to whoever holds the database, as to an attacker)."""
    with store.engine.connect() as conn:
        salt = conn.execute(text(f"SELECT salt FROM events WHERE {_where(stream, version)}")).scalar_one()
    return None if salt is None else bytes(salt)


def _digest(store: EventStore, stream: str, version: int, payload: bytes) -> bytes:
    """The digest an attacker who knows the scheme writes for ``payload`` at that event."""
    return chain.payload_digest(payload, _salt(store, stream, version))


def _patch(n: int) -> NewEvent:
    return NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/n", "value": n}]})


@pytest.fixture
def log(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EventStore, dict[str, Any]]]:
    """Streams A (versions 1-4 at positions 1, 2, 4, 7) and B (1-3 at 3, 5, 6), cached documents
    at A@2 and B@2, and an HMAC seal over all of it; then the triggers are dropped."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    observed = NewEvent("document.observed", {"doc": {"n": 0, "who": "a"}})
    store.append("A", [observed, _patch(1)], dialect="generic")
    store.append("B", [NewEvent("document.observed", {"doc": {"n": 10}})], dialect="generic")
    store.append("A", [NewEvent("document.patched", {"ops": [{"op": "replace", "path": "/n", "value": 2}]},
                                meta={"source": "x"}, occurred_at="2025-01-01T00:00:00Z")])
    store.append("B", [_patch(11), _patch(12)])
    store.append("A", [_patch(3)])
    generic = get_dialect("generic")
    for sid in ("A", "B"):
        info = store.stream_info(sid)
        assert info is not None
        doc, _, _ = replay_cache.fold(store, info.stream_pk, generic, 2, use_cache=False)
        replay_cache.save(store, info.stream_pk, replay_cache.cache_name(generic), 2, doc)
    cp = make_seal(store)
    assert (cp["event_count"], cp["stream_count"], cp["max_position"]) == (7, 2, 7)
    report = verify(store)
    assert report.ok and (report.streams, report.events, report.cached) == (2, 7, 2)
    assert check_seal(store, cp) == []
    with store.tree() as t:  # what a signed checkpoint of this log commits to: its size and root
        _TREES[id(store)] = (t.size, t.root())
    assert check_tree_checkpoint(store, *_TREES[id(store)]) == []
    _drop_triggers(store)
    yield store, cp
    del _TREES[id(store)]


#: id(store) -> (size, root) of the log fixture's tree before the tampering
_TREES: dict[int, tuple[int, bytes]] = {}


def _found(failures: list[Any]) -> Found:
    return sorted((f.stream_id, f.version, f.field_class) for f in failures)


def _rechain(store: EventStore, stream: str, forge: dict[int, bytes]) -> None:
    """What an attacker with write access does: rewrite ``stream``'s events (data of the versions in
    ``forge``), recompute every digest and hash to the end and the head, drop its cache rows."""
    prev = chain.GENESIS
    for e in store.read_stream(stream):
        data = forge.get(e.version, e.data)
        salt = _salt(store, stream, e.version)
        dsha, msha = chain.payload_digest(data, salt), chain.payload_digest(e.meta, salt)
        h = chain.event_hash(prev, stream, e.version, e.event_id, e.type, e.schema_version, e.occurred_at,
                             e.recorded_at, dsha, msha)
        _exec(store, "UPDATE events SET data = :d, data_sha256 = :ds, prev_hash = :p, hash = :h WHERE event_id = :id",
              d=data, ds=dsha, p=prev, h=h, id=e.event_id)
        prev = h
    _exec(store, "UPDATE streams SET head_hash = :h WHERE stream_id = :s", h=prev, s=stream)
    _exec(store, f"DELETE FROM replay_cache WHERE stream_pk = {_pk(stream)}")


def _swap_positions(store: EventStore, a: int, b: int) -> None:
    _exec(store, "UPDATE events SET position = -1 WHERE position = :a", a=a)
    _exec(store, "UPDATE events SET position = :a WHERE position = :b", a=a, b=b)
    _exec(store, "UPDATE events SET position = :b WHERE position = -1", b=b)


def _close_the_gaps(store: EventStore) -> None:
    """Renumber the positions 1..n in their order, as an attacker who deleted events would."""
    with store.engine.connect() as conn:
        positions = [r[0] for r in conn.execute(text("SELECT position FROM events ORDER BY position"))]
    for i, p in enumerate(positions, 1):
        if p != i:
            _exec(store, "UPDATE events SET position = :i WHERE position = :p", i=i, p=p)


def _swap_contents(store: EventStore) -> None:
    rows = {}
    with store.engine.connect() as conn:
        for sid, version in (("A", 3), ("B", 3)):
            rows[sid] = conn.execute(text("SELECT data, data_sha256, meta, meta_sha256, salt FROM events WHERE "
                                          f"{_where(sid, version)}")).one()
    for sid, other in (("A", "B"), ("B", "A")):  # payloads with their salt: each digest still recomputes
        _exec(store, f"UPDATE events SET data = :d, data_sha256 = :ds, meta = :m, meta_sha256 = :ms, salt = :salt "
                     f"WHERE {_where(sid, 3)}", d=bytes(rows[other][0]), ds=bytes(rows[other][1]),
              m=bytes(rows[other][2]), ms=bytes(rows[other][3]), salt=rows[other][4])


def _forge_cache(store: EventStore, recompute_digest: bool) -> None:
    state = replay_cache.encode_state({"n": 999, "who": "mallory"})
    sets = "state = :st, state_sha256 = :sh" if recompute_digest else "state = :st"
    _exec(store, f"UPDATE replay_cache SET {sets} WHERE {_where('A', 2)}", st=state, sh=chain.digest(state))


_FORGED = b'{"ops":[{"op":"replace","path":"/n","value":-1}]}'
_NO_VERIFY_FAILURE: Found = []

#: class -> (tamper, what `verify` reports, whether the seal itself catches it)
CASES: dict[str, tuple[Callable[[EventStore], None], Found, bool]] = {
    "payload": (lambda s: _exec(s, f"UPDATE events SET data = :d WHERE {_where('A', 3)}", d=_FORGED),
                [("A", 3, "data")], False),
    "payload, digest recomputed": (
        lambda s: _exec(s, f"UPDATE events SET data = :d, data_sha256 = :h WHERE {_where('A', 3)}",
                        d=_FORGED, h=_digest(s, "A", 3, _FORGED)), [("A", 3, "header")], False),
    "meta": (lambda s: _exec(s, f"UPDATE events SET meta = :m WHERE {_where('A', 3)}", m=b'{"source":"y"}'),
             [("A", 3, "meta")], False),
    "meta, digest recomputed": (
        lambda s: _exec(s, f"UPDATE events SET meta = :m, meta_sha256 = :h WHERE {_where('A', 3)}",
                        m=b'{"source":"y"}', h=_digest(s, "A", 3, b'{"source":"y"}')), [("A", 3, "header")], False),
    # The salt is not hashed itself; the digests it salts are: another salt (or none: the plain
    # SHA-256 of an event stored before salts) and neither data nor meta recomputes.
    "salt": (lambda s: _exec(s, f"UPDATE events SET salt = :salt WHERE {_where('A', 3)}", salt=bytes(16)),
             [("A", 3, "data"), ("A", 3, "meta")], False),
    "salt removed": (lambda s: _exec(s, f"UPDATE events SET salt = NULL WHERE {_where('A', 3)}"),
                     [("A", 3, "data"), ("A", 3, "meta")], False),
    "type": (lambda s: _exec(s, f"UPDATE events SET type = 'document.observed' WHERE {_where('A', 3)}"),
             [("A", 3, "header")], False),
    "recorded_at": (lambda s: _exec(s, f"UPDATE events SET recorded_at = '2020-01-01T00:00:00.000000Z' "
                                       f"WHERE {_where('A', 3)}"), [("A", 3, "header")], False),
    "event id": (lambda s: _exec(s, "UPDATE events SET event_id = '00000000-0000-4000-8000-000000000000' "
                                    f"WHERE {_where('A', 3)}"), [("A", 3, "header")], False),
    "prev_hash": (lambda s: _exec(s, f"UPDATE events SET prev_hash = hash WHERE {_where('A', 3)}"),
                  [("A", 3, "link")], False),
    "stream id": (lambda s: _exec(s, "UPDATE streams SET stream_id = 'A2' WHERE stream_id = 'A'"),
                  [("A2", 1, "header")], True),
    "version": (lambda s: _exec(s, f"UPDATE events SET version = 5 WHERE {_where('A', 4)}"),
                [("A", 5, "sequence")], True),
    "schema_version": (lambda s: _exec(s, f"UPDATE events SET schema_version = 2 WHERE {_where('A', 3)}"),
                       [("A", 3, "header")], False),
    "occurred_at": (lambda s: _exec(s, "UPDATE events SET occurred_at = '2025-01-02T00:00:00.000000Z' "
                                       f"WHERE {_where('A', 3)}"), [("A", 3, "header")], False),
    "swapped contents": (_swap_contents, [("A", 3, "header"), ("B", 3, "header")], False),
    "middle delete": (lambda s: _exec(s, f"DELETE FROM events WHERE {_where('A', 3)}"),
                      [("*", 0, "tree"), ("A", 4, "sequence")], True),
    "tail truncation": (lambda s: _exec(s, f"DELETE FROM events WHERE {_where('A', 4)}"), [("A", 3, "head")], True),
    "tail truncation, head rewritten": (
        lambda s: (_exec(s, f"DELETE FROM events WHERE {_where('A', 4)}"),
                   _exec(s, "UPDATE streams SET version = 3, head_hash = (SELECT hash FROM events WHERE "
                            f"{_where('A', 3)}) WHERE stream_id = 'A'")), _NO_VERIFY_FAILURE, True),
    "stream deleted": (
        lambda s: (_exec(s, f"DELETE FROM replay_cache WHERE stream_pk = {_pk('B')}"),
                   _exec(s, f"DELETE FROM events WHERE stream_pk = {_pk('B')}"),
                   _exec(s, "DELETE FROM streams WHERE stream_id = 'B'")), [("*", 0, "tree")], True),
    "stream deleted, positions renumbered": (
        lambda s: (_exec(s, f"DELETE FROM replay_cache WHERE stream_pk = {_pk('B')}"),
                   _exec(s, f"DELETE FROM events WHERE stream_pk = {_pk('B')}"),
                   _exec(s, "DELETE FROM streams WHERE stream_id = 'B'"), _close_the_gaps(s)),
        _NO_VERIFY_FAILURE, True),
    "forged and re-chained: middle": (lambda s: _rechain(s, "A", {3: _FORGED}), _NO_VERIFY_FAILURE, True),
    "forged and re-chained: one stream": (
        lambda s: _rechain(s, "A", {1: b'{"doc":{"n":0,"who":"mallory"}}'}), _NO_VERIFY_FAILURE, True),
    "forged and re-chained: all streams": (
        lambda s: (_rechain(s, "A", {1: b'{"doc":{"n":0,"who":"mallory"}}'}),
                   _rechain(s, "B", {1: b'{"doc":{"n":-10}}'})), _NO_VERIFY_FAILURE, True),
    "positions swapped: one stream": (lambda s: _swap_positions(s, 2, 4), [("A", 3, "position")], True),
    "positions swapped: two streams": (lambda s: _swap_positions(s, 4, 5), _NO_VERIFY_FAILURE, True),
    "cache row edited": (lambda s: _forge_cache(s, False), [("A", 2, "cache")], False),
    "cache row forged, digest recomputed": (lambda s: _forge_cache(s, True), [("A", 2, "cache")], False),
    "cache row bound to another event": (
        lambda s: _exec(s, f"UPDATE replay_cache SET event_hash = (SELECT hash FROM events WHERE {_where('A', 1)}) "
                           f"WHERE {_where('A', 2)}"), [("A", 2, "cache")], False),
    "empty table": (lambda s: _exec(s, "DELETE FROM events"),
                    [("A", 0, "head"), ("A", 2, "cache"), ("B", 0, "head"), ("B", 2, "cache")], True),
    "everything erased": (
        lambda s: (_exec(s, "DELETE FROM replay_cache"), _exec(s, "DELETE FROM events"),
                   _exec(s, "DELETE FROM streams")), _NO_VERIFY_FAILURE, True),
    # Not tampering, and not detectable: the seal covers what existed when it was made.
    "appended after the seal": (lambda s: s.append("A", [_patch(4)]) and None, _NO_VERIFY_FAILURE, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tamper_matrix(log: tuple[EventStore, dict[str, Any]], case: str) -> None:
    store, cp = log
    tamper, expected, seal_catches = CASES[case]
    tamper(store)
    assert _found(verify(store).failures) == expected
    from_seal = _found(check_seal(store, cp))
    assert bool(from_seal) == seal_catches, from_seal
    assert {c for _, _, c in from_seal} <= {"seal"}
    # The column "caught by an earlier checkpoint": `verify --checkpoint FILE` (verify, then the first
    # N leaves against the signed root) fails for every tampering; what was appended after it is no tampering.
    from_checkpoint = check_tree_checkpoint(store, *_TREES[id(store)])
    assert bool(expected or from_checkpoint) == (case != "appended after the seal"), from_checkpoint
    assert {f.field_class for f in from_checkpoint} <= {"checkpoint"}
    if case in LEAF_NAMED:
        assert LEAF_NAMED[case] in from_checkpoint[0].detail, from_checkpoint


#: Tamperings whose first differing leaf the checkpoint check names from the store alone (the others,
#: the leaves rewritten in place, fail it with both roots: with the stored tree rebuilt to match, a root alone
#: cannot say which leaf moved).
LEAF_NAMED = {
    "tail truncation": "leaf 6 (position 7) is missing",
    "tail truncation, head rewritten": "leaf 6 (position 7) is missing",
    "stream deleted": "leaf 2 (position 3) is missing",
    "middle delete": "leaf 3 (position 4) is missing",
    "stream deleted, positions renumbered": "leaf 4 (position 5) is missing",
    "empty table": "leaf 0 (position 1) is missing",
    "everything erased": "leaf 0 (position 1) is missing",
}


def test_verify_of_one_stream_reads_that_streams_cache_rows(log: tuple[EventStore, dict[str, Any]]) -> None:
    """A forged cache row of A fails ``verify A`` and ``verify``, never ``verify B``."""
    store, _ = log
    _forge_cache(store, True)
    b = verify(store, "B")
    assert b.ok and b.cached == 1
    assert [(f.stream_id, f.version, f.field_class) for f in verify(store, "A").failures] == [("A", 2, "cache")]
    assert [(f.stream_id, f.version, f.field_class) for f in verify(store).failures] == [("A", 2, "cache")]


def test_every_hashed_field_has_a_tamper_case() -> None:
    """chain.HASHED_FIELDS names event_hash's parameters; a newly hashed field needs a case above."""
    assert tuple(inspect.signature(chain.event_hash).parameters) == tuple(chain.HASHED_FIELDS)
    assert set(HASHED_FIELD_CASES) == set(chain.HASHED_FIELDS)
    assert all(CASES[case][1] for case in HASHED_FIELD_CASES.values())  # verify alone catches each


#: parameter of chain.event_hash -> the case of CASES that alters that column alone
HASHED_FIELD_CASES = {
    "prev_hash": "prev_hash", "stream_id": "stream id", "version": "version", "event_id": "event id",
    "type_": "type", "schema_version": "schema_version", "occurred_at": "occurred_at",
    "recorded_at": "recorded_at", "data_sha": "payload, digest recomputed", "meta_sha": "meta, digest recomputed",
}


# ------------------------------------------------------------------ the replay cache through the CLI


def _long_stream(store: EventStore) -> int:
    n = rp.CACHE_EVERY + 5
    store.append("L", [NewEvent("document.observed", {"doc": {"n": 0}})] + [_patch(i) for i in range(1, n)],
                 dialect="generic")
    return n


def test_an_edited_cache_row_is_never_printed(run: Callable[..., Any], store: EventStore, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 10, defect 2): an edited replay-cache row was printed by `replay --json`
    and passed `verify --seal`."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    n = _long_stream(store)
    assert json.loads(run("replay", "L", "--json").stdout) == {"n": n - 1}  # caches L@n
    cp = _cli_seal(run, tmp_path)
    assert replay_cache.latest(store, "L", "replay.generic.v1") is not None
    forged = replay_cache.encode_state({"n": -1})
    _drop_triggers(store)
    _exec(store, f"UPDATE replay_cache SET state = :s WHERE stream_pk = {_pk('L')}", s=forged)
    assert replay_cache.latest(store, "L", "replay.generic.v1") is None  # the row no longer counts
    assert json.loads(run("replay", "L", "--json").stdout) == {"n": n - 1}
    for args in ((), ("--seal", str(cp))):
        r = run("verify", *args)
        assert r.exit_code == 1 and f'stream "L" version {n}: cache' in r.stderr, r.output
    # With the digest recomputed the row looks intact to replay; verify re-folds and says no.
    _exec(store, f"UPDATE replay_cache SET state_sha256 = :h WHERE stream_pk = {_pk('L')}", h=chain.digest(forged))
    assert json.loads(run("replay", "L", "--json", "--no-cache").stdout) == {"n": n - 1}
    r = run("verify", "--json")
    report = json.loads(r.stdout)
    assert r.exit_code == 1 and [(f["stream"], f["version"], f["field"]) for f in report["failures"]] == [
        ("L", n, "cache")]
    assert "differs from the document folded" in report["failures"][0]["detail"]


def test_a_cache_row_is_bound_to_the_event_at_its_version(store: EventStore) -> None:
    n = _long_stream(store)
    assert rp.replay(store, "L").doc == {"n": n - 1}
    with store.engine.connect() as conn:
        row = conn.execute(text(f"SELECT c.event_hash, e.hash, c.position, e.position, c.state, c.state_sha256 "
                                f"FROM replay_cache c JOIN events e ON e.stream_pk = c.stream_pk AND "
                                f"e.version = c.version WHERE c.stream_pk = {_pk('L')}")).one()
    assert bytes(row[0]) == bytes(row[1]) and row[2] == row[3]
    assert bytes(row[5]) == chain.digest(bytes(row[4]))
    assert codec.decode(zlib.decompress(bytes(row[4]))) == {"n": n - 1}
    assert verify(store).cached == 1 and verify(store).ok


# ------------------------------------------------------------------ expected-version edges


def test_expected_version_edges(store: EventStore) -> None:
    with pytest.raises(ConcurrencyError) as err:
        store.append("NEW", [_patch(1)], expected_version=1)
    assert (type(err.value), str(err.value)) == (
        ConcurrencyError, 'Stream "NEW" is at version 0, expected 1; re-read and retry.')
    assert store.stream_info("NEW") is None
    assert store.append("NEW", [_patch(1)], expected_version=0).version == 1  # 0: the stream does not exist yet
    with pytest.raises(ConcurrencyError) as err:
        store.append("NEW", [_patch(2)], expected_version="no stream")
    assert (type(err.value), str(err.value)) == (
        ConcurrencyError, 'Stream "NEW" is at version 1, expected no stream; re-read and retry.')
    with pytest.raises(ConcurrencyError) as err:
        store.append("NEW", [_patch(2)], expected_version=0)
    assert str(err.value) == 'Stream "NEW" is at version 1, expected 0; re-read and retry.'
    assert store.stream_version("NEW") == 1


# ------------------------------------------------------------------ seals through the CLI


def _cli_seal(run: Callable[..., Any], tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "cp.json"
    r = run("seal", "--out", str(out), *args)
    assert r.exit_code == 0, r.output
    return out


def test_positions_swapped_across_streams_fail_the_seal(
        run: Callable[..., Any], store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 10, defect 3): swapping two events' positions went unnoticed."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    store.append("A", [_patch(1)])
    store.append("B", [_patch(2)])
    cp = _cli_seal(run, tmp_path)
    _drop_triggers(store)
    _swap_positions(store, 1, 2)
    assert run("verify").exit_code == 0  # each stream alone is still in order
    r = run("verify", "--seal", str(cp))
    assert r.exit_code == 1 and "the global order of events differs" in r.stderr


def test_ed25519_seals(run: Callable[..., Any], store: EventStore, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """keygen writes a private key only its owner can read; an auditor verifies with the public key."""
    monkeypatch.delenv("EVSTORE_SIGNING_KEY", raising=False)  # no shared secret anywhere
    prefix = tmp_path / "keys" / "audit"
    prefix.parent.mkdir()
    r = run("keygen", "--out", str(prefix))
    assert r.exit_code == 0 and f"{prefix}.pub" in r.stdout
    key, pub = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    r = run("keygen", "--out", str(prefix))  # never overwrites a key
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {key} exists")
    store.append("A", [_patch(1), _patch(2)])
    cp = _cli_seal(run, tmp_path, "--key-file", str(key))
    signed = json.loads(cp.read_text())
    assert signed["algorithm"] == "ed25519" and len(signed["signature"]) == 128
    r = run("verify", "--seal", str(cp), "--public-key", str(pub))
    assert r.exit_code == 0 and "seal" in r.stdout and "holds" in r.stdout
    # Without the public key there is nothing to check it with; with another key it fails.
    r = run("verify", "--seal", str(cp))
    assert r.exit_code == 1 and "pass its public key (--public-key)" in r.stderr
    assert run("keygen", "--out", str(tmp_path / "other")).exit_code == 0
    r = run("verify", "--seal", str(cp), "--public-key", str(tmp_path / "other.pub"))
    assert r.exit_code == 1 and "signature does not verify" in r.stderr
    # An edited seal (fewer events, as after a truncation) no longer verifies.
    cp.write_text(json.dumps({**signed, "event_count": 1}))
    r = run("verify", "--seal", str(cp), "--public-key", str(pub))
    assert r.exit_code == 1 and "signature does not verify" in r.stderr
    # A private key is not a public key, and a public key does not sign.
    r = run("verify", "--seal", str(cp), "--public-key", str(key))
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {key} is not a PEM public key")
    r = run("seal", "--out", str(tmp_path / "x.json"), "--key-file", str(pub))
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {pub} is not an unencrypted PEM private key")


def test_hmac_seal_against_a_public_key_fails(run: Callable[..., Any], store: EventStore, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    store.append("A", [_patch(1)])
    cp = _cli_seal(run, tmp_path)
    assert run("verify", "--seal", str(cp)).exit_code == 0
    assert run("keygen", "--out", str(tmp_path / "k")).exit_code == 0
    r = run("verify", "--seal", str(cp), "--public-key", str(tmp_path / "k.pub"))
    assert r.exit_code == 1 and "signed with hmac-sha256, not with the ed25519 key given" in r.stderr


@pytest.mark.parametrize("value", [10**30, -1, "7", True, None])
def test_a_validly_signed_absurd_seal_is_an_error(run: Callable[..., Any], store: EventStore, tmp_path: Path,
                                                        value: object) -> None:
    """Regression (issue 10, defect 9): max_position 10**30 in a validly signed seal gave a
    traceback (OverflowError from the driver)."""
    store.append("A", [_patch(1)])
    assert run("keygen", "--out", str(tmp_path / "k")).exit_code == 0
    signer = chain.load_private_key(tmp_path / "k.key")
    payload = {k: v for k, v in make_seal(store, signer).items() if k != "signature"}
    payload["max_position"] = value
    cp = tmp_path / "absurd.json"
    cp.write_text(json.dumps({**payload, "signature": signer.sign(chain.canonical(payload))}))
    r = run("verify", "--seal", str(cp), "--public-key", str(tmp_path / "k.pub"))
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith('Error: Seal is malformed: "max_position" must be an integer from 0 to '), r.stderr


def test_version_1_seals_still_verify(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seal written before the order digest (format v1, HMAC over the file's key order)."""
    import hashlib
    import hmac

    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    store.append("A", [_patch(1), _patch(2)])
    state = make_seal(store)
    v1 = {"format": "evstore.checkpoint.v1", "event_count": 2, "stream_count": 1, "max_position": 2,
          "merkle_root": state["merkle_root"], "created_at": state["created_at"]}
    v1["signature"] = hmac.new(KEY.encode(), chain.legacy_encoding(v1), hashlib.sha256).hexdigest()
    assert check_seal(store, v1) == []
    _drop_triggers(store)
    _exec(store, f"DELETE FROM events WHERE {_where('A', 2)}")
    assert [f.field_class for f in check_seal(store, v1)] == ["seal", "seal"]


def test_version_1_seals_keep_their_database_order_of_streams(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """v1 seals ordered their Merkle leaves by the database's collation of stream ids; on a
    PostgreSQL whose collation is linguistic ("a" < "B") that differs from code points ("B" < "a"),
    and a v1 seal made there must still verify, as a v2 seal made there does (mutation testing: checking
    either against the other's root survived on C and SQLite ordering)."""
    import hashlib
    import hmac

    from conftest import migrated

    from eventstore.verify import log_state

    monkeypatch.setenv("EVSTORE_SIGNING_KEY", KEY)
    with EventStore(migrated(pg_url)) as store:
        with store.reading() as cur:
            cur.execute("SELECT count(*) FROM pg_collation WHERE collname = 'en-US-x-icu'")
            if not cur.fetchone()[0]:
                pytest.skip("this PostgreSQL server has no ICU collations (built without ICU)")
        _exec(store, 'ALTER TABLE streams ALTER COLUMN stream_id TYPE varchar(255) COLLATE "en-US-x-icu"')
        store.append("a", [_patch(1)])
        store.append("B", [_patch(2)])
        state = log_state(store, 2)
        assert state.legacy_root(store) != state.merkle_root  # the two orders differ here
        v1 = {"format": "evstore.checkpoint.v1", "event_count": 2, "stream_count": 2, "max_position": 2,
              "merkle_root": state.legacy_root(store), "created_at": "2026-01-01T00:00:00Z"}
        v1["signature"] = hmac.new(KEY.encode(), chain.legacy_encoding(v1), hashlib.sha256).hexdigest()
        assert check_seal(store, v1) == []
        assert check_seal(store, make_seal(store)) == []  # and a v2 seal there holds by code points


def test_what_verify_says_of_cache_rows(log: tuple[EventStore, dict[str, Any]]) -> None:
    """The cache failure's words, and rows of an older lens (another cache name) never checked:
    they are never read either (mutation testing: checking them, or other words, survived)."""
    store, _ = log
    info = store.stream_info("A")
    assert info is not None
    stale = "replay.generic.v0"  # what an older lens of the dialect cached under
    assert stale != replay_cache.cache_name(get_dialect("generic"))
    replay_cache.save(store, info.stream_pk, stale, 3, {"n": "not what the events fold to"})
    report = verify(store)
    assert report.ok and report.cached == 3, report.failures
    _exec(store, f"UPDATE replay_cache SET event_hash = (SELECT hash FROM events WHERE {_where('A', 1)}) "
                 f"WHERE {_where('A', 2)}")
    assert [str(f) for f in verify(store).failures] == [
        'stream "A" version 2: cache — replay cache "replay.generic.v1": bound to another event than the one '
        "stored at this version"]


_CACHE = 'replay cache "replay.generic.v1": '


@pytest.mark.parametrize("tamper, detail", [
    (lambda s: _forge_cache(s, False), _CACHE + "stored state does not match its recorded SHA-256"),
    (lambda s: _forge_cache(s, True), _CACHE + "differs from the document folded from the events"),
    (lambda s: _exec(s, f"UPDATE replay_cache SET version = 9 WHERE {_where('A', 2)}"),
     _CACHE + "no event is stored at this version"),
    (lambda s: _exec(s, f"UPDATE events SET data = :d WHERE {_where('A', 2)}",
                     d=b'{"ops":[{"op":"remove","path":"/missing"}]}'),
     _CACHE + "cannot be checked by folding the events (InvalidEvent: JSON Patch operation 0 (remove '/missing') "
              "does not apply: KeyError('missing'))"),
], ids=["state edited", "state forged, digest recomputed", "no event at its version", "events do not fold"])
def test_each_cache_problem_in_its_words(log: tuple[EventStore, dict[str, Any]], tamper: Callable[[EventStore], None],
                                         detail: str) -> None:
    """What verify says of each way a cache row can be wrong (mutation testing: other words survived, and
    a fold that raises going unreported)."""
    store, _ = log
    tamper(store)
    cache = [f for f in verify(store).failures if f.field_class == "cache"]
    assert len(cache) == 1 and cache[0].stream_id == "A", cache
    assert cache[0].detail == detail


def test_cache_rows_of_a_dialect_stream_are_checked_by_its_lens(store: EventStore) -> None:
    """A mapipe run's cache rows (two, so the second is folded on from the first) are checked with
    mapipe's lens: they hold, and a forged one (digest recomputed) is found (mutation testing: checking
    every row with the generic lens, which skips them, or folding the second from the start, survived)."""
    import random
    from datetime import UTC, datetime

    from eventstore.ingest import Ingestor

    mapipe = get_dialect("mapipe")
    ing = Ingestor(store, mapipe)
    for snap in mapipe.simulate(random.Random(3), run_id="M-1", start=datetime(2026, 1, 5, 9, tzinfo=UTC)):
        stream = ing.ingest(snap).stream
    info = store.stream_info(stream)
    assert info is not None and info.version >= 6
    name = replay_cache.cache_name(mapipe)
    for version in (3, info.version):
        doc, _, _ = replay_cache.fold(store, info.stream_pk, mapipe, version, use_cache=False)
        replay_cache.save(store, info.stream_pk, name, version, doc)
    report = verify(store)
    assert report.ok and report.cached == 2, report.failures
    state = replay_cache.encode_state({"forged": True})
    _exec(store, f"UPDATE replay_cache SET state = :st, state_sha256 = :sh WHERE {_where(stream, info.version)}",
          st=state, sh=chain.digest(state))
    assert [(f.stream_id, f.version, f.detail) for f in verify(store).failures] == [
        (stream, info.version, f'replay cache "{name}": differs from the document folded from the events')]


def test_cache_rows_are_checked_a_page_at_a_time_as_in_one_read(store: EventStore,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """verify reads the replay cache a page at a time (``verify.CACHE_PAGE`` rows, each page after the last
    row's stream id, name and version): with pages of 1, 2 and 3 rows it counts, checks and names the same rows
    as in one read, folding on across pages, with forged rows at page edges and rows of an older lens between
    (stream ids whose order differs by case and by code point: the database's order, not Python's)."""
    import eventstore.verify as v

    generic = get_dialect("generic")
    name = replay_cache.cache_name(generic)
    streams = ["b", "B", "a/ü", "a/z"]
    for n, sid in enumerate(streams):
        store.append(sid, [NewEvent("document.observed", {"doc": {"n": n}})] + [_patch(n + i) for i in range(1, 6)],
                     dialect="generic")
        info = store.stream_info(sid)
        assert info is not None
        for version in (2, 4, 6):
            doc, _, _ = replay_cache.fold(store, info.stream_pk, generic, version, use_cache=False)
            replay_cache.save(store, info.stream_pk, name, version, doc)
        replay_cache.save(store, info.stream_pk, "replay.generic.v0", 3, {"stale": True})  # never checked
    forged = replay_cache.encode_state({"forged": True})
    for sid, version in (("B", 2), ("a/z", 6), ("b", 4)):
        _exec(store, f"UPDATE replay_cache SET state = :st, state_sha256 = :sh WHERE {_where(sid, version)} "
                     "AND name = :nm", st=forged, sh=chain.digest(forged), nm=name)
    pages: list[int] = []
    entries = store.backend.cache_entries

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = entries(*args, **kwargs)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(store.backend, "cache_entries", counted)
    monkeypatch.setattr(v, "CACHE_PAGE", 10_000)
    whole = verify(store)
    assert pages == [16] and whole.cached == 16
    found = sorted((f.stream_id, f.version, f.detail) for f in whole.failures)
    assert found == sorted((sid, version, f'replay cache "{name}": differs from the document folded from the events')
                           for sid, version in (("B", 2), ("a/z", 6), ("b", 4)))
    for page in (1, 2, 3):
        pages.clear()
        monkeypatch.setattr(v, "CACHE_PAGE", page)
        paged = verify(store)
        assert paged.cached == 16 and [str(f) for f in paged.failures] == [str(f) for f in whole.failures]
        assert sum(pages) == 16 and max(pages) == page and len(pages) == 16 // page + 1
        assert sorted((f.stream_id, f.version) for f in verify(store, "a/z").failures) == [("a/z", 6)]
