"""``meta.blobs`` is the store's own key (found missing by mutation testing of verify's blob notes).

An event's ``meta.blobs`` lists the SHA-256 digests of the content-addressed blobs it refers to, and
``evstore verify`` fails an event naming a blob the store does not hold.  So the store must never
write one: the append path refuses a ``meta.blobs`` that is not a list of digests or that names a
blob neither given with the append nor stored, on SQLite and PostgreSQL, writing nothing.  Only an
edit behind the store's back can then put a bad name there, and verify says which.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from conftest import drop_append_only_triggers, exec_sql

from eventstore import chain
from eventstore.errors import IntegrityViolation, InvalidEvent
from eventstore.store import EventStore, NewEvent
from eventstore.verify import verify

DATA = b"a large tool output " * 300
DIGEST = hashlib.sha256(DATA).hexdigest()
OTHER = hashlib.sha256(b"never stored").hexdigest()


@pytest.mark.parametrize("blobs, message", [
    ("abc", "meta.blobs of \"x.y\" must be a list of SHA-256 hex digests, got 'abc'."),
    ([42], "meta.blobs[0] of \"x.y\" is not a SHA-256 hex digest (64 lowercase hex digits): 42."),
    ([DIGEST, "zz"], "meta.blobs[1] of \"x.y\" is not a SHA-256 hex digest (64 lowercase hex digits): 'zz'."),
    ([DIGEST.upper()], f"meta.blobs[0] of \"x.y\" is not a SHA-256 hex digest (64 lowercase hex digits): "
                       f"'{DIGEST.upper()}'."),
    ([DIGEST[:-2]], f"meta.blobs[0] of \"x.y\" is not a SHA-256 hex digest (64 lowercase hex digits): "
                    f"'{DIGEST[:-2]}'."),
])
def test_meta_blobs_that_are_not_digests_are_refused(blobs: Any, message: str) -> None:
    with pytest.raises(InvalidEvent) as exc:
        NewEvent("x.y", {}, meta={"blobs": blobs})
    assert str(exc.value) == message


def test_meta_blobs_must_name_blobs_the_store_holds(store: EventStore) -> None:
    first = NewEvent("x.y", {"n": 1})
    dangling = NewEvent("x.y", {"n": 2}, meta={"blobs": [OTHER]})
    with pytest.raises(InvalidEvent) as exc:
        store.append("S", [first, dangling])
    assert str(exc.value) == (f'Event 2 of the append to stream "S" (version 2, x.y) names blob {OTHER} in '
                              "meta.blobs, which is neither given with the append nor stored.")
    assert store.stream_info("S") is None  # nothing of the append was written

    # given with the append: written; named again later without its bytes: the store holds it
    store.append("S", [NewEvent("x.y", {"n": 1}, meta={"blobs": [DIGEST]})], blobs={DIGEST: DATA})
    store.append("T", [NewEvent("x.y", {"n": 1}, meta={"blobs": [DIGEST, DIGEST]})])
    assert (store.stream_version("S"), store.stream_version("T")) == (1, 1)
    with pytest.raises(InvalidEvent) as exc:  # the offset within the append, the version within the stream
        store.append("S", [NewEvent("x.y", {"n": 2}), NewEvent("x.y", {"n": 3}, meta={"blobs": [OTHER]})])
    assert str(exc.value).startswith(f'Event 2 of the append to stream "S" (version 3, x.y) names blob {OTHER}')
    with pytest.raises(InvalidEvent, match=f"names blob {OTHER}"):
        store.append("T", [NewEvent("x.y", {"n": 2}, meta={"blobs": [DIGEST, OTHER]})])
    assert store.stream_version("T") == 1
    report = verify(store)
    assert report.ok and report.blobs == 1, report.failures


def _rewrite_meta(store: EventStore, stream: str, meta: bytes) -> None:
    """An attacker with owner rights: replace the meta of ``stream``'s only event and re-chain it."""
    drop_append_only_triggers(store)
    [e] = store.read_stream(stream)
    msha, dsha = chain.digest(meta), chain.digest(e.data)  # plain digests, the salt dropped (as before salts)
    h = chain.event_hash(chain.GENESIS, stream, 1, e.event_id, e.type, e.schema_version, e.occurred_at,
                         e.recorded_at, dsha, msha)
    exec_sql(store, "UPDATE events SET meta = :m, meta_sha256 = :ms, data_sha256 = :ds, salt = NULL, hash = :h "
             "WHERE event_id = :id", m=meta, ms=msha, ds=dsha, h=h, id=e.event_id)
    exec_sql(store, "UPDATE streams SET head_hash = :h WHERE stream_id = :s", h=h, s=stream)


@pytest.mark.parametrize("names, detail", [
    (["zz"], "meta.blobs names 'zz', which is no SHA-256 hex digest"),
    ([7], "meta.blobs names 7, which is no SHA-256 hex digest"),
    ("oops", "meta.blobs names 'oops', which is no SHA-256 hex digest"),
    ([DIGEST.upper()], f"meta.blobs names '{DIGEST.upper()}', which is no SHA-256 hex digest"),  # the store's rule
    ([OTHER], f"blob {OTHER} is referenced but not stored"),
])
def test_verify_names_a_meta_blobs_entry_written_behind_the_store(store: EventStore, names: Any,
                                                                   detail: str) -> None:
    store.append("S", [NewEvent("x.y", {"n": 1})])
    _rewrite_meta(store, "S", json.dumps({"blobs": names}).encode())
    failures = [(f.stream_id, f.version, f.field_class, f.detail) for f in verify(store).failures]
    assert failures == [("S", 1, "blob", detail)]


def test_reading_a_blob_the_store_does_not_hold_says_so(store: EventStore) -> None:
    with pytest.raises(IntegrityViolation) as exc:
        store.read_blob(OTHER)
    assert str(exc.value) == f"Blob {OTHER} is not in the store (an event refers to it); run `evstore verify`."
    with pytest.raises(InvalidEvent) as bad:
        store.read_blob("zz")
    assert str(bad.value) == "'zz' is not a SHA-256 hex digest."
    with pytest.raises(InvalidEvent) as upper:  # one rule for a blob name, as meta.blobs has it
        store.read_blob(DIGEST.upper())
    assert str(upper.value) == f"'{DIGEST.upper()}' is not a SHA-256 hex digest."


def test_a_64_character_name_that_is_not_hex_is_named_as_such(store: EventStore) -> None:
    """64 characters, not hex: the name is no digest (not "a blob referenced but not stored")."""
    store.append("S", [NewEvent("x.y", {"n": 1})])
    _rewrite_meta(store, "S", json.dumps({"blobs": ["g" * 64]}).encode())
    failures = [(f.stream_id, f.version, f.field_class, f.detail) for f in verify(store).failures]
    assert failures == [("S", 1, "blob", f"meta.blobs names {'g' * 64!r}, which is no SHA-256 hex digest")]


def test_verify_of_one_stream_checks_its_blobs_and_a_full_verify_every_blob(store: EventStore) -> None:
    """``verify STREAM`` reads the blobs that stream names; ``verify`` reads every stored blob, also one
    no event names (given with an append that does not name it), reported on no stream."""
    content = {name: name.encode() * 3000 for name in ("a", "b", "orphan")}
    key = {name: hashlib.sha256(data).hexdigest() for name, data in content.items()}
    store.append("A", [NewEvent("x.y", {}, meta={"blobs": [key["a"]]})], blobs={key["a"]: content["a"]})
    store.append("B", [NewEvent("x.y", {}, meta={"blobs": [key["b"]]})], blobs={key["b"]: content["b"]})
    store.append("C", [NewEvent("x.y", {})], blobs={key["orphan"]: content["orphan"]})
    assert verify(store).ok and verify(store).blobs == 3
    if store.engine.dialect.name == "sqlite":
        exec_sql(store, "DROP TRIGGER blobs_no_update")
    else:
        exec_sql(store, "DROP TRIGGER blobs_no_update_delete ON blobs")
    for name in ("b", "orphan"):  # other bytes of the same size
        exec_sql(store, "UPDATE blobs SET data = :d WHERE sha256 = :k", d=content[name][:-1] + b"!",
                 k=bytes.fromhex(key[name]))

    def found(report: Any) -> list[tuple[str, int, str, str]]:
        return sorted((f.stream_id, f.version, f.field_class, f.detail) for f in report.failures)

    mismatch = "stored bytes do not match their SHA-256"
    one = verify(store, "A")
    assert one.ok and one.blobs == 1  # B's and the unnamed blob are not A's
    assert found(verify(store, "B")) == [("B", 1, "blob", f"blob {key['b']}: {mismatch}")]
    assert found(verify(store)) == sorted([("B", 1, "blob", f"blob {key['b']}: {mismatch}"),
                                           ("", 0, "blob", f"blob {key['orphan']}: {mismatch}")])
    assert store.read_blob(key["a"]) == content["a"]
    with pytest.raises(IntegrityViolation) as info:  # the bytes are checked on every read, not only by verify
        store.read_blob(key["b"])
    assert str(info.value) == f"Blob {key['b']}: the stored bytes do not match their SHA-256; run `evstore verify`."
