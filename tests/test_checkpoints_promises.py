"""The store's checkpoints and proofs (eventstore/checkpoints.py), each promise a test, on both backends.

A checkpoint signs the log's size and root and is recorded only once every witness cosigned; a proof
is answered only for a checkpoint the store's log still extends, for the exact event and sizes asked;
otherwise a ProofError (or StreamNotFound) says what and how to go on.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import drop_append_only_triggers, exec_sql
from test_witness_promises import _Handler

from eventstore import checkpoints as c
from eventstore.errors import ProofError, StreamNotFound, WitnessError
from eventstore.store import EventStore, NewEvent
from eventstore.tlog import merkle
from eventstore.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner
from eventstore.tlog.proofs import verify_consistency_proof, verify_inclusion_proof
from eventstore.tlog.witness import Answer, Witness, format_request

LOG = NoteSigner.generate("evstore.example/store-log")
WKEY = NoteSigner.generate("witness.example/w", ALG_COSIGNATURE_V1)
NOW_TS = 1_764_000_000


def _append(store: EventStore, n: int, stream: str = "S") -> None:
    store.append(stream, [NewEvent("demo.note", {"i": i}) for i in range(n)])


def _root(store: EventStore, n: int) -> bytes:
    with store.tree(n) as t:
        return t.root()


def test_read_checkpoint_names_where_it_failed() -> None:
    cp = Checkpoint("o", 1, bytes(32))
    assert c.read_checkpoint(sign_checkpoint(cp, LOG)) == cp
    with pytest.raises(ProofError, match=r"^the checkpoint is not a signed checkpoint: "):
        c.read_checkpoint("o\n1\n")
    with pytest.raises(ProofError, match=r"^FILE is not a signed checkpoint: .*tree size"):
        c.read_checkpoint(sign_checkpoint(cp, LOG).replace("\n1\n", "\n01\n"), "FILE")


def test_a_checkpoint_signs_the_logs_size_and_root_and_is_recorded(store: EventStore) -> None:
    assert c.latest_checkpoint(store) is None
    empty = c.make_checkpoint(store, LOG)
    assert open_checkpoint(empty, LOG.verifier).checkpoint == Checkpoint(LOG.name, 0, merkle.EMPTY_ROOT)
    _append(store, 5)
    note = c.make_checkpoint(store, LOG)
    got = open_checkpoint(note, LOG.verifier).checkpoint
    assert (got.origin, got.size, got.root) == (LOG.name, 5, _root(store, 5))
    latest = c.latest_checkpoint(store)
    assert latest is not None and (latest.note, latest.tree_size, latest.origin) == (note, 5, LOG.name)
    other = c.make_checkpoint(store, LOG, origin="another/origin")
    assert open_checkpoint(other, LOG.verifier, origin="another/origin").checkpoint.origin == "another/origin"
    assert [r.note for r in c.recorded_checkpoints(store)] == [other, note, empty]
    assert [r.note for r in c.recorded_checkpoints(store, origin=LOG.name)] == [note, empty]
    assert [r.note for r in c.recorded_checkpoints(store, tree_size=0)] == [empty]
    assert [r.note for r in c.recorded_checkpoints(store, limit=1)] == [other]


def test_cosign_sees_the_note_and_checkpoint_and_nothing_is_recorded_when_it_raises(store: EventStore) -> None:
    _append(store, 3)
    seen = []

    def cosign(note: str, cp: Checkpoint) -> str:
        seen.append((note, cp))
        return note + "\u2014 extra line\n"

    note = c.make_checkpoint(store, LOG, cosign=cosign)
    assert seen == [(note[: -len("\u2014 extra line\n")], Checkpoint(LOG.name, 3, _root(store, 3)))]
    assert c.recorded_checkpoints(store)[0].note == note

    def refuse(note: str, cp: Checkpoint) -> str:
        raise WitnessError("no", url="u")

    with pytest.raises(WitnessError):
        c.make_checkpoint(store, LOG, cosign=refuse)
    assert len(c.recorded_checkpoints(store)) == 1


def test_signed_heads_are_the_recorded_checkpoints_the_key_signed(store: EventStore) -> None:
    _append(store, 2)
    c.make_checkpoint(store, LOG)
    _append(store, 2)
    c.make_checkpoint(store, LOG)
    forger = NoteSigner.generate(LOG.name)
    c.make_checkpoint(store, forger)
    heads = c.signed_heads(store, LOG.verifier, LOG.name)
    assert heads == [(4, _root(store, 4)), (2, _root(store, 2))]
    assert c.signed_heads(store, LOG.verifier, LOG.name, limit=2) == heads[:1]  # the newest 2 notes: one is forged
    assert c.signed_heads(store, LOG.verifier, "other/origin") == []


def test_signers_name_the_log_and_the_witnesses_with_their_time() -> None:
    cp = Checkpoint(LOG.name, 3, bytes(32))
    note = sign_checkpoint(cp, LOG) + WKEY.signature_line(cp.body, timestamp=1_700_000_000)
    assert c.signers(note) == [c.Signer(LOG.name, f"{LOG.verifier.key_id:08x}", None),
                               c.Signer(WKEY.name, f"{WKEY.verifier.key_id:08x}", 1_700_000_000)]
    assert c.signers("not a note") == []


def test_inclusion_proves_exactly_the_event_asked_in_the_checkpoint(store: EventStore) -> None:
    _append(store, 6, "A")
    _append(store, 3, "B")
    note = c.make_checkpoint(store, LOG)
    _append(store, 2, "A")
    for stream, version, position in (("A", 1, 1), ("A", 6, 6), ("B", 1, 7), ("B", 3, 9)):
        proof = c.inclusion(store, note, stream_id=stream, version=version)
        assert (proof.leaf_index, proof.tree_size, proof.stream, proof.version) == (position - 1, 9, stream, version)
        assert proof.checkpoint == note
        report = verify_inclusion_proof(proof, LOG.verifier)
        assert report.details["leaf_index"] == position - 1
        by_id = c.inclusion(store, note, event_id=proof.event_id)
        assert by_id == proof
    event_id = c.find_leaf(store, stream_id="A", version=7).event_id
    with pytest.raises(ProofError, match=r'^Stream "A" version 7 is leaf 9, after the 9 leaves the checkpoint covers; '
                                         r"make a newer checkpoint \(`evstore checkpoint`\)\.$"):
        c.inclusion(store, note, event_id=event_id)
    with pytest.raises(StreamNotFound, match=r'^No version 9 of stream "A" in the log; `evstore log` lists a '
                                             r"stream's events\.$"):
        c.inclusion(store, note, stream_id="A", version=9)
    with pytest.raises(StreamNotFound, match=r"^No event 00000000-0000-0000-0000-000000000000 in the log"):
        c.inclusion(store, note, event_id="00000000-0000-0000-0000-000000000000")


def test_the_proof_of_an_erased_event_says_so_and_other_proofs_are_unchanged(store: EventStore) -> None:
    """An erased event's inclusion proof still proves its event hash, and carries (as a note beside the
    proof, not signed) when, why and by which admin event its content was erased; a proof of any other
    event has no such note, in the proof or its JSON."""
    from eventstore import erasure

    _append(store, 3, "A")
    _append(store, 1, "B")
    note = c.make_checkpoint(store, LOG)
    erasure.erase(store, reason="GDPR 9", stream_ids=["A"], scrub=False)
    for version in (1, 3):  # positions 1 and 3
        proof = c.inclusion(store, note, stream_id="A", version=version)
        assert proof.content == erasure.describe(erasure.explain(store, [version])[version])
        assert proof.content is not None and proof.content.startswith("erased at ") and "GDPR 9" in proof.content
        assert c.to_json(proof)["content"] == proof.content
        report = verify_inclusion_proof(proof, LOG.verifier)
        assert report.details["content"] == proof.content
        assert f"; its content was {proof.content}, as the proof file says" in report.summary
    kept = c.inclusion(store, note, stream_id="B", version=1)
    assert kept.content is None and "content" not in c.to_json(kept)
    assert "content" not in verify_inclusion_proof(kept, LOG.verifier).details
    assert "its content was" not in verify_inclusion_proof(kept, LOG.verifier).summary


def test_find_leaf_names_what_it_did_not_find(store: EventStore) -> None:
    _append(store, 2, "A")
    leaf = c.find_leaf(store, stream_id="A", version=2)
    assert (leaf.stream_id, leaf.version, leaf.position) == ("A", 2, 2)
    assert c.find_leaf(store, event_id=leaf.event_id) == leaf
    with pytest.raises(StreamNotFound, match=r'^No version 3 of stream "A" in the log; `evstore log` lists'):
        c.find_leaf(store, stream_id="A", version=3)
    with pytest.raises(StreamNotFound, match=r"^No event nope in the log; "):
        c.find_leaf(store, event_id="nope")


def test_no_proof_for_a_checkpoint_the_log_no_longer_extends(store: EventStore) -> None:
    _append(store, 6)
    note = c.make_checkpoint(store, LOG)
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET hash = :h WHERE position = 2", h=bytes(32))
    with pytest.raises(ProofError, match=r"^The log's first 6 events no longer hash to the root of the checkpoint "
                                         r"\([0-9a-f]{16}… here, [0-9a-f]{16}… signed\): the log no longer extends it "
                                         r"\(rewritten after it\); run `evstore verify --checkpoint`\.$"):
        c.inclusion(store, note, stream_id="S", version=5)


def test_no_proof_for_a_checkpoint_longer_than_the_log(store: EventStore) -> None:
    _append(store, 4)
    note = sign_checkpoint(Checkpoint(LOG.name, 5, bytes(32)), LOG)
    with pytest.raises(ProofError, match=r"^The log has 4 events, fewer than the 5 the checkpoint covers: it no longer "
                                         r"extends it \(truncated, or another log\); run `evstore verify --checkpoint`\.$"):
        c.inclusion(store, note, stream_id="S", version=1)
    old = c.make_checkpoint(store, LOG)
    with pytest.raises(ProofError, match=r"^The log has 4 events, fewer than the 5 the new checkpoint covers"):
        c.consistency(store, old, note)


def test_consistency_proves_the_newer_checkpoint_extends_the_older(store: EventStore) -> None:
    notes = [c.make_checkpoint(store, LOG)]
    for n in (1, 2, 4, 1):
        _append(store, n)
        notes.append(c.make_checkpoint(store, LOG))
    for i, old in enumerate(notes):
        for new in notes[i:]:
            proof = c.consistency(store, old, new)
            assert (proof.old_checkpoint, proof.new_checkpoint) == (old, new)
            report = verify_consistency_proof(proof, LOG.verifier)
            assert (report.details["old_size"], report.details["new_size"]) == (proof.old_size, proof.new_size)
    assert c.to_json(c.consistency(store, notes[1], notes[3])) == {
        "old_size": 1, "new_size": 7, "consistency": c.consistency(store, notes[1], notes[3]).consistency,
        "old_checkpoint": notes[1], "new_checkpoint": notes[3]}
    with pytest.raises(ProofError, match=r"^The old checkpoint covers 7 leaves, more than the new one's 3; give the "
                                         r"older checkpoint first\.$"):
        c.consistency(store, notes[3], notes[2])
    other = c.make_checkpoint(store, LOG, origin="x/y")
    with pytest.raises(ProofError, match=rf"^The checkpoints are of two logs \('x/y' and '{LOG.name}'\)\.$"):
        c.consistency(store, other, notes[-1])
    with pytest.raises(ProofError, match=r"^the old checkpoint is not a signed checkpoint: "):
        c.consistency(store, "garbage", notes[-1])
    with pytest.raises(ProofError, match=r"^the new checkpoint is not a signed checkpoint: "):
        c.consistency(store, notes[0], "garbage")


def test_consistency_refuses_an_old_checkpoint_the_log_does_not_extend(store: EventStore) -> None:
    _append(store, 8)
    new = c.make_checkpoint(store, LOG)
    forged = sign_checkpoint(Checkpoint(LOG.name, 3, bytes(32)), LOG)
    with pytest.raises(ProofError, match=r"^The log's first 3 events no longer hash to the root of the old checkpoint "
                                         r"\([0-9a-f]{16}… here, 0000000000000000… signed\): the log no longer extends "
                                         r"it \(rewritten after it\); run `evstore verify --checkpoint`\.$"):
        c.consistency(store, forged, new)
    empty = sign_checkpoint(Checkpoint(LOG.name, 0, bytes(32)), LOG)
    with pytest.raises(ProofError, match=r"^The old checkpoint is of an empty log, but its root is not the empty "
                                         r"tree's\.$"):
        c.consistency(store, empty, new)
    real_empty = sign_checkpoint(Checkpoint(LOG.name, 0, merkle.EMPTY_ROOT), LOG)
    assert c.consistency(store, real_empty, new).consistency == []


def test_consistency_hashes_from_a_witness_size(store: EventStore) -> None:
    _append(store, 9)
    cp = Checkpoint(LOG.name, 9, _root(store, 9))
    for old in range(1, 10):
        merkle.verify_consistency(old, 9, _root(store, old), cp.root, c.consistency_hashes(store, old, cp))
    assert c.consistency_hashes(store, 0, cp) == []
    with pytest.raises(ProofError, match=r"^Cannot prove 10 leaves consistent with the 9 of the new checkpoint\.$"):
        c.consistency_hashes(store, 10, cp)


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[tuple[str, type[_Handler]]]:
    w = Witness(tmp_path / "w.db", WKEY, [LOG.verifier])
    handler = type("H", (_Handler,), {"witness": w, "paths": [], "answer": None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _checkpoint(store: EventStore, url: str) -> str:
    return c.make_checkpoint(store, LOG, cosign=lambda note, cp: c.cosign(store, note, cp, [(url, WKEY.verifier)]))


def test_cosign_proves_from_the_last_size_the_witness_cosigned(store: EventStore,
                                                                witness: tuple[str, type[_Handler]]) -> None:
    url, _ = witness
    assert c.last_cosigned_size(store, LOG.name, WKEY.verifier) == 0
    for n in (3, 4, 1):
        _append(store, n)
        note = _checkpoint(store, url)
        got = open_checkpoint(note, LOG.verifier, require_witnesses=[WKEY.verifier])
        assert len(got.cosignatures) == 1
        assert c.last_cosigned_size(store, LOG.name, WKEY.verifier) == got.checkpoint.size
    c.make_checkpoint(store, LOG)  # not cosigned: the newest recorded, but not the witness's
    assert c.last_cosigned_size(store, LOG.name, WKEY.verifier) == 8
    assert c.last_cosigned_size(store, "other/log", WKEY.verifier) == 0


def test_cosign_retries_once_from_the_size_a_409_names(store: EventStore,
                                                       witness: tuple[str, type[_Handler]]) -> None:
    url, handler = witness
    _append(store, 4)
    _checkpoint(store, url)
    # the witness cosigned size 6 for another store of the same log: this store did not record it
    _append(store, 2)
    other = sign_checkpoint(Checkpoint(LOG.name, 6, _root(store, 6)), LOG)
    body = format_request(4, c.consistency_hashes(store, 4, c.read_checkpoint(other)), other)
    assert handler.witness.add_checkpoint(body).status == 200
    assert c.last_cosigned_size(store, LOG.name, WKEY.verifier) == 4
    _append(store, 1)
    handler.paths.clear()
    note = _checkpoint(store, url)  # 409 (6), then from 6
    assert handler.paths == ["/add-checkpoint", "/add-checkpoint"]
    assert open_checkpoint(note, LOG.verifier, require_witnesses=[WKEY.verifier]).checkpoint.size == 7


def test_cosign_gives_up_on_a_409_it_cannot_act_on(store: EventStore, witness: tuple[str, type[_Handler]]) -> None:
    url, handler = witness
    _append(store, 4)
    # the witness says it is at size 0 again (what it was sent): no second try
    for answer in (Answer(409, "0\n", "text/x.tlog.size"), Answer(409, "99\n", "text/x.tlog.size"),
                   Answer(409, "x\n", "text/x.tlog.size"), Answer(422, "no\n")):
        handler.answer = answer
        handler.paths.clear()
        with pytest.raises(WitnessError) as info:
            _checkpoint(store, url)
        assert info.value.status == answer.status
        assert handler.paths == ["/add-checkpoint"], answer
    assert c.recorded_checkpoints(store) == []
    # a 409 naming the checkpoint's own size is acted on (the witness has it from elsewhere)
    handler.answer = None
    c.make_checkpoint(store, LOG)  # recorded, not cosigned
    assert handler.witness.add_checkpoint(format_request(0, [], c.recorded_checkpoints(store)[0].note)).status == 200
    note = _checkpoint(store, url)
    assert open_checkpoint(note, LOG.verifier, require_witnesses=[WKEY.verifier]).checkpoint.size == 4


def test_recorded_checkpoints_are_the_newest_100_unless_asked(store: EventStore) -> None:
    note = sign_checkpoint(Checkpoint(LOG.name, 0, merkle.EMPTY_ROOT), LOG)
    for _ in range(101):
        c.record_checkpoint(store, note, Checkpoint(LOG.name, 0, merkle.EMPTY_ROOT))
    assert len(c.recorded_checkpoints(store)) == 100
    assert len(c.recorded_checkpoints(store, limit=101)) == 101


def test_signed_heads_count_and_check_only_their_origin(store: EventStore) -> None:
    _append(store, 2)
    c.make_checkpoint(store, LOG)
    c.make_checkpoint(store, LOG, origin="x/y")  # newer, another origin
    assert c.signed_heads(store, LOG.verifier, LOG.name, limit=1) == [(2, _root(store, 2))]
    assert c.signed_heads(store, LOG.verifier, "x/y") == [(2, _root(store, 2))]


def test_consistency_names_the_new_checkpoint_when_the_log_no_longer_extends_it(store: EventStore) -> None:
    _append(store, 4)
    old = c.make_checkpoint(store, LOG)
    _append(store, 2)
    new = c.make_checkpoint(store, LOG)
    drop_append_only_triggers(store)
    exec_sql(store, "UPDATE events SET hash = :h WHERE position = 5", h=bytes(32))
    with pytest.raises(ProofError, match=r"^The log's first 6 events no longer hash to the root of the new checkpoint "):
        c.consistency(store, old, new)


def test_consistency_hashes_are_of_the_checkpoints_tree_not_the_grown_log(store: EventStore) -> None:
    _append(store, 5)
    cp = c.read_checkpoint(c.make_checkpoint(store, LOG))
    _append(store, 4)
    merkle.verify_consistency(3, 5, _root(store, 3), cp.root, c.consistency_hashes(store, 3, cp))


def test_cosign_starts_from_the_size_cosigned_for_this_origin(store: EventStore, tmp_path: Path) -> None:
    other_log = NoteSigner.generate("x/y")
    w = Witness(tmp_path / "w2.db", WKEY, [LOG.verifier, other_log.verifier])
    handler = type("H", (_Handler,), {"witness": w, "paths": [], "answer": None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        _append(store, 3)
        _checkpoint(store, url)
        _append(store, 2)
        c.make_checkpoint(store, other_log, cosign=lambda note, cp: c.cosign(store, note, cp, [(url, WKEY.verifier)]))
        _append(store, 1)
        handler.paths.clear()
        note = _checkpoint(store, url)  # from 3 (this log's), not 5 (the other's): one request
        assert handler.paths == ["/add-checkpoint"]
        assert open_checkpoint(note, LOG.verifier, require_witnesses=[WKEY.verifier]).checkpoint.size == 6
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_busy_database_names_the_checkpoint_being_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holding SQLite's write lock past the busy timeout: the error says a checkpoint
    could not be recorded, and none was."""
    import sqlite3

    from conftest import migrated

    from eventstore.backends import sqlite as sqlite_backend
    from eventstore.errors import EvstoreError

    url = migrated(f"sqlite:///{tmp_path}/events.db")
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.05)
    other = sqlite3.connect(tmp_path / "events.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with EventStore(url) as store, pytest.raises(EvstoreError) as err:
            c.make_checkpoint(store, LOG)
        assert "The database failed recording a checkpoint (database is locked)" in str(err.value), str(err.value)
    finally:
        other.close()
    with EventStore(url) as store:
        assert c.recorded_checkpoints(store) == []


def test_the_last_cosigned_size_is_found_behind_up_to_1000_checkpoints(store: EventStore) -> None:
    _append(store, 2)
    cp = Checkpoint(LOG.name, 2, _root(store, 2))
    c.record_checkpoint(store, sign_checkpoint(cp, LOG) + WKEY.signature_line(cp.body, timestamp=NOW_TS), cp)
    plain = sign_checkpoint(cp, LOG)
    for _ in range(150):
        c.record_checkpoint(store, plain, cp)
    assert c.last_cosigned_size(store, LOG.name, WKEY.verifier) == 2

