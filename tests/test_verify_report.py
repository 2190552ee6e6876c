"""What verify and check_seal say, word for word: the failure details, the report's JSON and
the refusals of malformed seals (test_tamper.py holds which class each tamper gets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import drop_append_only_triggers, exec_sql

from eventstore import chain
from eventstore.errors import EvstoreError, IntegrityViolation, StreamNotFound
from eventstore.store import EventStore, NewEvent
from eventstore.verify import MAX_POSITION, Failure, VerifyReport, check_seal, make_seal, verify


def _two_streams(store: EventStore) -> None:
    store.append("A", [NewEvent("t.x", {"i": i}) for i in range(4)])
    store.append("B", [NewEvent("t.x", {"i": 9})])


def _where(stream: str, version: int) -> str:
    return f"stream_pk = (SELECT stream_pk FROM streams WHERE stream_id = '{stream}') AND version = {version}"


def test_report_json_and_text() -> None:
    f = Failure("A", 3, "link", "prev_hash is not the previous event's hash")
    assert f.to_dict() == {"stream": "A", "version": 3, "field": "link",
                           "detail": "prev_hash is not the previous event's hash"}
    assert str(f) == 'stream "A" version 3: link — prev_hash is not the previous event\'s hash'
    report = VerifyReport(streams=2, events=5, cached=1, failures=[f])
    assert not report.ok and VerifyReport().ok
    assert report.to_dict() == {"ok": False, "streams": 2, "events": 5, "cached": 1, "blobs": 0,
                                "storage_check": None, "failures": [f.to_dict()], "seal": None,
                                "purged": 0, "erased": 0, "erased_blobs": 0}


@pytest.mark.parametrize(("sql", "failures"), [
    ("UPDATE events SET data = :v WHERE {A3}",
     [("A", 3, "data", "stored data does not match its recorded SHA-256")]),
    ("UPDATE events SET meta = :v WHERE {A3}",
     [("A", 3, "meta", "stored meta does not match its recorded SHA-256")]),
    ("UPDATE events SET type = 'forged' WHERE {A3}",
     [("A", 3, "header", "event hash does not recompute (type, ids, times or digests changed)")]),
    ("UPDATE events SET prev_hash = hash WHERE {A3}",
     [("A", 3, "link", "prev_hash is not the previous event's hash")]),
    ("DELETE FROM events WHERE {A3}",
     [("A", 4, "sequence", "expected version 3, found 4"),
      ("*", 0, "tree", "position 3 is missing (leaf 2): events deleted or positions rewritten; positions are "
                       "gapless")]),
    ("DELETE FROM events WHERE {A4}",
     [("A", 3, "head", "stream head says version 4 but the chain ends at version 3 (events missing or head "
                       "rewritten)"),
      ("*", 0, "tree", "position 4 is missing (leaf 3): events deleted or positions rewritten; positions are "
                       "gapless")]),
])
def test_verify_failure_details(store: EventStore, sql: str, failures: list[tuple[str, int, str, str]]) -> None:
    _two_streams(store)
    drop_append_only_triggers(store)
    exec_sql(store, sql.format(A3=_where("A", 3), A4=_where("A", 4)), v=b'{"i":999}')
    report = verify(store)
    assert [(f.stream_id, f.version, f.field_class, f.detail) for f in report.failures] == failures
    assert (report.streams, report.events) == (2, 5 - sql.startswith("DELETE"))
    assert verify(store, "B").ok and verify(store, "B").events == 1


def test_positions_out_of_order_within_a_stream(store: EventStore) -> None:
    _two_streams(store)
    drop_append_only_triggers(store)
    exec_sql(store, f"UPDATE events SET position = 100 WHERE {_where('A', 2)}")
    f, gap = verify(store).failures
    assert (f.stream_id, f.version, f.field_class) == ("A", 3, "position")
    assert (gap.stream_id, gap.field_class) == ("*", "tree") and "position 2 is missing" in gap.detail
    assert f.detail == ("position 3 is not after position 100 of the stream's previous event (events reordered)")


def test_verify_of_an_unknown_stream(store: EventStore) -> None:
    with pytest.raises(StreamNotFound) as info:
        verify(store, "nope")
    assert str(info.value) == 'No stream "nope"; `evstore runs` lists the streams.'


def test_seal_payload(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    cp = make_seal(store)
    assert set(cp) == {"format", "store_id", "event_count", "stream_count", "max_position", "merkle_root",
                       "order_digest", "created_at", "algorithm", "key_id", "signature"}
    assert (cp["format"], cp["event_count"], cp["stream_count"], cp["max_position"]) == \
        ("evstore.checkpoint.v2", 5, 2, 5)
    assert (cp["algorithm"], cp["key_id"], cp["store_id"]) == ("hmac-sha256", "", store.store_id())
    payload = {k: v for k, v in cp.items() if k != "signature"}
    assert chain.HmacKey(b"k").verify(chain.canonical(payload), cp["signature"])
    heads = sorted((e.stream_id, e.version, e.hash) for e in store.iter_all() if e.version == (4 if e.stream_id == "A"
                                                                                                else 1))
    assert cp["merkle_root"] == chain.merkle_root([chain.head_leaf(*h) for h in heads]).hex()
    assert check_seal(store, cp) == []


def test_seal_refusals(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVSTORE_SIGNING_KEY", raising=False)
    with pytest.raises(EvstoreError) as info:
        make_seal(store)
    assert str(info.value) == "EVSTORE_SIGNING_KEY is not set; export a secret key to sign and check seals."
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    cp = make_seal(store)
    with pytest.raises(IntegrityViolation) as iv:
        check_seal(store, {**cp, "format": "other"})
    assert str(iv.value) == "Seal format 'other' is not one evstore knows (evstore.checkpoint.v2)."
    with pytest.raises(EvstoreError) as info:
        check_seal(store, {**cp, "algorithm": "ed25519"})
    assert str(info.value) == "The seal is signed with ed25519; pass its public key (--public-key)."
    [f] = check_seal(store, {**cp, "event_count": 4})
    assert (f.stream_id, f.version, f.field_class, f.detail) == \
        ("*", 0, "seal", "signature does not verify (wrong key or edited seal)")


def _signed(cp: dict[str, object], **changes: object) -> dict[str, object]:
    payload = {k: v for k, v in {**cp, **changes}.items() if k != "signature"}
    return {**payload, "signature": chain.HmacKey(b"k").sign(chain.canonical(payload))}


@pytest.mark.parametrize(("key", "value"), [("max_position", -1), ("max_position", MAX_POSITION + 1),
                                            ("event_count", "5"), ("event_count", True), ("max_position", None)])
def test_validly_signed_malformed_seals(store: EventStore, monkeypatch: pytest.MonkeyPatch, key: str,
                                              value: object) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    with pytest.raises(IntegrityViolation) as info:
        check_seal(store, _signed(make_seal(store), **{key: value}))
    assert str(info.value) == (f'Seal is malformed: "{key}" must be an integer from 0 to {MAX_POSITION}, '
                               f"got {value}.")


def test_seal_bounds_are_inclusive(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """0 and MAX_POSITION are shapes a seal may have (mutation testing: ``0 < value`` and
    ``value < hi`` survived): an empty store's seal holds, and one signed at the top position is
    checked against the log (and fails on what it finds there), not refused as malformed."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    empty = make_seal(store)
    assert (empty["max_position"], empty["event_count"]) == (0, 0)
    assert check_seal(store, empty) == []
    _two_streams(store)
    details = [f.detail for f in check_seal(store, _signed(make_seal(store), max_position=MAX_POSITION,
                                                           event_count=MAX_POSITION))]
    assert details[0] == f"{MAX_POSITION} events up to position {MAX_POSITION} were signed, 5 are stored " \
                         "(history truncated or inserted)"


def test_log_state_digests_follow_their_definition(store: EventStore) -> None:
    """The order digest and the Merkle root a seal signs, recomputed here from the events with
    hashlib alone: SHA-256 over the domain and each event's ``[position, stream, version, hash]``
    in position order; leaves ``[stream, version, head hash]`` by stream id."""
    import hashlib
    import json

    from eventstore.verify import log_state

    _two_streams(store)
    store.append("A", [NewEvent("t.x", {"i": 5})])  # positions interleave the streams
    events = sorted((e for s in ("A", "B") for e in store.read_stream(s)), key=lambda e: e.position)
    order = hashlib.sha256(b"evstore.order.v1\x00")
    for e in events:
        order.update(json.dumps([e.position, e.stream_id, e.version, e.hash.hex()], separators=(",", ":")).encode())
    state = log_state(store, store.max_position())
    assert state.order_digest == order.hexdigest()
    assert (state.event_count, state.stream_count) == (6, 2)
    assert state.heads == {"A": (5, events[-1].hash), "B": (1, events[4].hash)}

    def leaf(sid: str) -> bytes:
        version, h = state.heads[sid]
        return hashlib.sha256(b"\x00" + json.dumps([sid, version, h.hex()], separators=(",", ":")).encode()).digest()

    assert state.merkle_root == hashlib.sha256(b"\x01" + leaf("A") + leaf("B")).hexdigest()
    half = log_state(store, 3)  # up to a position: only what was there
    assert (half.event_count, half.heads["A"][0]) == (3, 3) and "B" not in half.heads


def test_a_seal_for_another_store_names_it_cut_to_an_id(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    forged_id = "0123456789abcdef0123456789abcdef0123456789"  # 42 characters: shown as the 36 of a UUID
    [f] = check_seal(store, _signed(make_seal(store), store_id=forged_id))
    assert (f.stream_id, f.version, f.field_class, f.detail) == (
        "*", 0, "seal", f"signed for store {forged_id[:36]}, this is store {store.store_id()} (another or a "
                        "recreated store)")


def test_seal_failure_details(store: EventStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    cp = make_seal(store)
    def on_the_log(*details: str) -> list[Failure]:  # a seal's failures are on the whole log: stream "*", version 0
        return [Failure("*", 0, "seal", d) for d in details]

    assert check_seal(store, _signed(cp, store_id="another", event_count=6)) == on_the_log(
        f"signed for store another, this is store {store.store_id()} (another or a recreated store)",
        "6 events up to position 5 were signed, 5 are stored (history truncated or inserted)")
    assert check_seal(store, _signed(cp, merkle_root="00")) == \
        on_the_log("Merkle root over stream heads differs (history rewritten)")
    assert check_seal(store, _signed(cp, order_digest="00")) == \
        on_the_log("the global order of events differs (positions changed, events moved, inserted or removed)")
    unsigned = {k: v for k, v in cp.items() if k != "signature"}  # no signature at all, for either kind of key
    assert check_seal(store, unsigned) == on_the_log("signature does not verify (wrong key or edited seal)")
    _key, public = chain.generate_keypair(tmp_path / "k")
    assert check_seal(store, {**unsigned, "algorithm": "ed25519"}, chain.load_public_key(public)) == \
        on_the_log("signature does not verify (wrong key or edited seal)")


def test_seal_messages_cut_what_the_seal_says_to_a_bound(store: EventStore, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """A seal is data from a file: its format, algorithm and numbers appear in a message cut to 40, 20 and
    40 characters, and a seal for another key type is one failure on the whole log (mutation testing:
    the bounds and the failure's fields survived)."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    cp = make_seal(store)
    with pytest.raises(IntegrityViolation) as iv:
        check_seal(store, {**cp, "format": "f" * 100})
    assert str(iv.value) == f"Seal format {'f' * 40!r} is not one evstore knows (evstore.checkpoint.v2)."
    with pytest.raises(EvstoreError) as info:
        check_seal(store, {**cp, "algorithm": "a" * 100})
    assert str(info.value) == f"The seal is signed with {'a' * 20}; pass its public key (--public-key)."
    with pytest.raises(IntegrityViolation) as iv:
        check_seal(store, _signed(cp, event_count="9" * 100))
    assert str(iv.value) == (f'Seal is malformed: "event_count" must be an integer from 0 to {MAX_POSITION}, '
                             f"got {'9' * 40}.")
    _key, public = chain.generate_keypair(tmp_path / "k")
    verifier = chain.load_public_key(public)
    assert check_seal(store, {**cp, "algorithm": "b" * 100}, verifier) == \
        [Failure("*", 0, "seal", f"signed with {'b' * 20}, not with the ed25519 key given")]


def test_two_events_of_a_stream_swapping_positions_fail_the_order_not_the_heads(
        store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream's head is its highest version wherever the events sit: after A@3 and A@4 swap positions
    the seal finds the global order changed and nothing else (the heads, so the Merkle root, are intact)."""
    monkeypatch.setenv("EVSTORE_SIGNING_KEY", "k")
    _two_streams(store)
    cp = make_seal(store)
    drop_append_only_triggers(store)
    exec_sql(store, f"UPDATE events SET position = 100 WHERE {_where('A', 3)}")
    exec_sql(store, f"UPDATE events SET position = 3 WHERE {_where('A', 4)}")
    exec_sql(store, f"UPDATE events SET position = 4 WHERE {_where('A', 3)}")  # A@4 now comes before A@3
    assert check_seal(store, cp) == [Failure("*", 0, "seal", "the global order of events differs (positions "
                                                              "changed, events moved, inserted or removed)")]


def test_verify_reports_progress_every_10000_events(sqlite_url: str) -> None:
    """``progress`` hears of every 10,000th event and of the count at the end of the scan; without it
    verify runs the same (mutation testing: calling a missing callback, or never calling it, survived)."""
    from conftest import migrated

    with EventStore(migrated(sqlite_url)) as store:
        store.append("A", [NewEvent("t.x", {"i": i}) for i in range(10_001)])
        heard: list[int] = []
        assert verify(store, progress=heard.append).events == 10_001 and heard == [10_000, 10_001]
        assert verify(store).ok
