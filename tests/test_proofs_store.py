"""The store side of issue 34 on SQLite and PostgreSQL: keygen's verifier keys, `evstore checkpoint`
(recorded in the store, cosigned by witnesses), `evstore prove` (inclusion and consistency, from the
stored tree), `verify --checkpoint`; and a property over random logs comparing the store's proofs
with the RFC verifier of eventstore/tlog/merkle.py and with proofs over the leaves themselves."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EVSTORE, drop_append_only_triggers, evstore_child, exec_sql, migrated
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import checkpoints
from eventstore.errors import ProofError
from eventstore.store import EventStore, NewEvent
from eventstore.tlog import merkle
from eventstore.tlog.note import ALG_COSIGNATURE_V1, ALG_ED25519, NoteSigner

NAME = "example.com/evstore-test"


def _keys(run: Callable[..., Any], tmp_path: Path, prefix: str = "log", name: str = NAME) -> Path:
    r = run("keygen", "--out", str(tmp_path / prefix), "--name", name)
    assert r.exit_code == 0, r.output
    return tmp_path / prefix


def _append(store: EventStore, n: int, stream: str = "S") -> None:
    store.append(stream, [NewEvent("demo.note", {"i": i}) for i in range(n)])


def test_keygen_writes_the_verifier_keys_of_the_specs(run: Callable[..., Any], tmp_path: Path) -> None:
    """PREFIX.vkey is NAME+<key id>+base64(0x01 || pub), PREFIX.witness.vkey the same key as 0x04; the key
    id is SHA-256(NAME || 0x0A || alg || pub)[:4] (C2SP signed-note), computed here from the PEM key."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

    prefix = _keys(run, tmp_path)
    pub = load_pem_public_key((tmp_path / "log.pub").read_bytes()).public_bytes(Encoding.Raw, PublicFormat.Raw)
    for suffix, alg in ((".vkey", 0x01), (".witness.vkey", 0x04)):
        text = Path(f"{prefix}{suffix}").read_text()
        key_id = hashlib.sha256(NAME.encode() + b"\n" + bytes([alg]) + pub).digest()[:4].hex()
        assert text == f"{NAME}+{key_id}+{base64.b64encode(bytes([alg]) + pub).decode()}\n"
    r = run("keygen", "--out", str(prefix), "--name", NAME)
    assert r.exit_code == 1 and "exists; keygen never overwrites" in r.stderr


def test_checkpoint_prove_and_verify_proof(run: Callable[..., Any], store: EventStore, tmp_path: Path) -> None:
    prefix = _keys(run, tmp_path)
    _append(store, 20, "A")
    _append(store, 3, "B")
    cp1 = tmp_path / "cp1"
    r = run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp1))
    assert r.exit_code == 0 and r.stdout == "", r.output
    body = cp1.read_text().split("\n\n")[0] + "\n"
    leaves = [e.hash for e in store.iter_all()]
    assert body == f"{NAME}\n23\n{base64.b64encode(merkle.root(leaves)).decode()}\n"
    assert cp1.read_text().split("\n\n")[1].startswith(f"— {NAME} ")
    recorded = checkpoints.recorded_checkpoints(store)
    assert [(c.origin, c.tree_size, c.root_hash, c.note) for c in recorded] == [
        (NAME, 23, merkle.root(leaves), cp1.read_text())]

    r = run("prove", "B", "--version", "2", "--checkpoint", str(cp1))
    assert r.exit_code == 0, r.output
    proof = json.loads(r.stdout)
    assert list(proof) == ["leaf_index", "tree_size", "event_hash", "inclusion", "checkpoint", "stream", "version",
                           "event_id"]
    assert (proof["leaf_index"], proof["tree_size"], proof["stream"], proof["version"]) == (21, 23, "B", 2)
    assert bytes.fromhex(proof["event_hash"]) == leaves[21] and proof["checkpoint"] == cp1.read_text()
    path = [base64.b64decode(h) for h in proof["inclusion"]]
    merkle.verify_inclusion(21, 23, merkle.leaf_hash(leaves[21]), path, merkle.root(leaves))
    assert path == merkle.inclusion_proof(21, 23, lambda s, e: merkle.root(leaves[s:e]))
    (tmp_path / "p.json").write_text(r.stdout)
    ok = run("verify-proof", str(tmp_path / "p.json"), "--vkey", f"{prefix}.vkey")
    assert ok.exit_code == 0, ok.output
    by_id = run("prove", "--event-id", proof["event_id"], "--checkpoint", str(cp1))
    assert json.loads(by_id.stdout) == proof

    _append(store, 9, "A")
    cp2 = tmp_path / "cp2"
    assert run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp2)).exit_code == 0
    r = run("prove", "--consistency", str(cp1), str(cp2))
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)
    assert list(c) == ["old_size", "new_size", "consistency", "old_checkpoint", "new_checkpoint"]
    assert (c["old_size"], c["new_size"]) == (23, 32)
    leaves = [e.hash for e in store.iter_all()]
    merkle.verify_consistency(23, 32, merkle.root(leaves[:23]), merkle.root(leaves),
                              [base64.b64decode(h) for h in c["consistency"]])
    (tmp_path / "c.json").write_text(r.stdout)
    assert run("verify-proof", str(tmp_path / "c.json"), "--vkey", f"{prefix}.vkey").exit_code == 0
    assert [x.tree_size for x in checkpoints.recorded_checkpoints(store)] == [32, 23]

    # an event after the checkpoint cannot be proven in it
    r = run("prove", "A", "--version", "29", "--checkpoint", str(cp1))
    assert r.exit_code == 1 and "after the 23 leaves the checkpoint covers" in r.stderr
    r = run("prove", "A", "--version", "99", "--checkpoint", str(cp1))
    assert r.exit_code == 1 and 'No version 99 of stream "A"' in r.stderr


def test_a_log_that_no_longer_extends_a_checkpoint(run: Callable[..., Any], store: EventStore,
                                                   tmp_path: Path) -> None:
    """Rewritten after the checkpoint: prove refuses (consistency and inclusion), verify --checkpoint fails."""
    prefix = _keys(run, tmp_path)
    _append(store, 5, "A")
    _append(store, 5, "B")
    cp1, cp2 = tmp_path / "cp1", tmp_path / "cp2"
    assert run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp1)).exit_code == 0
    r = run("verify", "--checkpoint", str(cp1), "--vkey", f"{prefix}.vkey")
    assert r.exit_code == 0 and f"checkpoint {cp1} holds (the first 10 events)" in r.stdout
    drop_append_only_triggers(store)
    exec_sql(store, "DELETE FROM events WHERE position = 10")  # the tail truncated ...
    exec_sql(store, "UPDATE streams SET version = 4, head_hash = (SELECT hash FROM events WHERE position = 9) "
                    "WHERE stream_id = 'B'")
    store.append("B", [NewEvent("demo.note", {"forged": True})])  # ... and another event in its place
    assert run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(cp2)).exit_code == 0
    r = run("prove", "--consistency", str(cp1), str(cp2))
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {cp1} -> {cp2}: The log's first 10 events no longer "
                                                    "hash to the root of the old checkpoint"), r.stderr
    assert "the log no longer extends it" in r.stderr
    r = run("prove", "A", "--version", "1", "--checkpoint", str(cp1))
    assert r.exit_code == 1 and "no longer extends it" in r.stderr
    r = run("verify", "--checkpoint", str(cp1), "--vkey", f"{prefix}.vkey")
    assert r.exit_code == 1 and "checkpoint — the log's first 10 leaves hash to" in r.stderr, r.stderr
    # another key's checkpoint is refused, naming the file
    other = _keys(run, tmp_path, "other", "other.example")
    r = run("verify", "--checkpoint", str(cp1), "--vkey", f"{other}.vkey")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {cp1}: ") and "known key" in r.stderr


def test_checkpoint_errors(run: Callable[..., Any], store: EventStore, tmp_path: Path) -> None:
    prefix = _keys(run, tmp_path)
    _append(store, 2)
    r = run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(tmp_path / "cp"), "--witness", "http://x")
    assert r.exit_code == 2 and "one --witness-vkey for each --witness" in r.stderr
    Path(f"{prefix}.vkey").unlink()
    r = run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(tmp_path / "cp"))
    assert r.exit_code == 1 and "give --name NAME" in r.stderr
    r = run("checkpoint", "--key-file", f"{prefix}.key", "--name", "n.example", "--origin", "o.example",
            "--out", str(tmp_path / "cp"))
    assert r.exit_code == 0 and (tmp_path / "cp").read_text().startswith("o.example\n2\n")
    r = run("verify", "--checkpoint", str(tmp_path / "cp"))
    assert r.exit_code == 2 and "--vkey" in r.stderr


def test_checkpoint_with_witnesses(run: Callable[..., Any], store: EventStore, tmp_path: Path) -> None:
    """`checkpoint --witness URL --witness-vkey FILE`: a real `evstore witness serve` cosigns, from the size it
    last cosigned (the store's record); a witness that refuses is an error naming it and its answer."""
    from test_serve_drain import free_port, wait_until

    from eventstore.tlog.checkpoint import open_checkpoint
    from eventstore.tlog.note import read_verifier_key

    prefix = _keys(run, tmp_path)
    w = _keys(run, tmp_path, "w", "witness.example")
    _append(store, 7)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with evstore_child("witness", "serve", "--key-file", f"{w}.key", "--trust", f"{prefix}.vkey",
                       "--db", str(tmp_path / "w.db"), "--port", str(port)) as child:
        import urllib.request

        def up() -> bool:
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()  # noqa: S310
                return True
            except OSError:
                return child.proc.poll() is not None
        wait_until(up, 60, "evstore witness serve answering")
        args = ["--key-file", f"{prefix}.key", "--witness", url, "--witness-vkey", f"{w}.witness.vkey"]
        for i in range(2):
            out = tmp_path / f"cp{i}"
            r = run("checkpoint", *args, "--out", str(out))
            assert r.exit_code == 0, r.output
            opened = open_checkpoint(out.read_text(), read_verifier_key(Path(f"{prefix}.vkey")),
                                     require_witnesses=[read_verifier_key(Path(f"{w}.witness.vkey"))])
            assert opened.checkpoint.size == 7 + 3 * i and len(opened.cosignatures) == 1
            assert checkpoints.recorded_checkpoints(store)[0].note == out.read_text()
            _append(store, 3)
        # a log that rewrote history since: the witness refuses (422: the proof does not verify)
        drop_append_only_triggers(store)
        exec_sql(store, "UPDATE events SET hash = :h WHERE position = 2", h=bytes(32))
        before = len(checkpoints.recorded_checkpoints(store))
        r = run("checkpoint", *args, "--out", str(tmp_path / "bad"))
        assert r.exit_code == 1, r.output
        assert f"witness witness.example at {url}/add-checkpoint refused the checkpoint: 422" in r.stderr, r.stderr
        assert not (tmp_path / "bad").exists() and len(checkpoints.recorded_checkpoints(store)) == before
    assert EVSTORE


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_store_proofs_are_the_rfcs(data: st.DataObject) -> None:
    """Random logs (appends of random sizes) and random (old, new) sizes and leaves: the store's subtree
    hashes give the very proofs the leaves give, and merkle.py's RFC verifier accepts them."""
    import tempfile

    sizes = data.draw(st.lists(st.integers(1, 70), min_size=1, max_size=8), label="appends")
    with tempfile.TemporaryDirectory() as d, EventStore(migrated(f"sqlite:///{d}/e.db")) as store:
        base = 1
        rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
        for n in sizes:
            store.append(f"p{rng.randrange(3)}", [NewEvent("demo.note", {"r": rng.random()}) for _ in range(n)])
        leaves = [e.hash for e in store.iter_all()]
        total = len(leaves)
        new = data.draw(st.integers(max(1, base), total), label="new")
        old = data.draw(st.integers(0, new), label="old")
        index = data.draw(st.integers(0, new - 1), label="index")
        memory = lambda s, e: merkle.root(leaves[s:e])  # noqa: E731
        with store.tree(new) as t:
            root = t.root()
            assert root == merkle.root(leaves[:new])
            inc = merkle.inclusion_proof(index, new, t.subtree)
            con = merkle.consistency_proof(old, new, t.subtree)
        assert inc == merkle.inclusion_proof(index, new, memory)
        assert con == merkle.consistency_proof(old, new, memory)
        merkle.verify_inclusion(index, new, merkle.leaf_hash(leaves[index]), inc, root)
        if old:
            merkle.verify_consistency(old, new, merkle.root(leaves[:old]), root, con)
        import math
        assert len(inc) * 32 <= 32 * max(1, math.ceil(math.log2(new)))


def test_a_signer_name_and_algorithms() -> None:
    """The constants the vkey files above are written with are the specs' (0x01 note, 0x04 cosignature)."""
    assert (ALG_ED25519, ALG_COSIGNATURE_V1) == (0x01, 0x04)
    assert NoteSigner.generate("x.example").verifier.vkey.startswith("x.example+")
    with pytest.raises(ProofError):
        checkpoints.read_checkpoint("not a note")


def test_the_signed_checkpoints_recorded_locate_a_rewrite(run: Callable[..., Any], store: EventStore,
                                                          tmp_path: Path) -> None:
    """Two events of different streams swapped after the checkpoints (each stream still in order: plain verify
    passes, the stored tree has no node yet to disagree): the recorded checkpoints whose signatures verify
    bracket the first leaf that differs, here to one leaf; with only the one checkpoint, a range."""
    prefix = _keys(run, tmp_path)
    for i in range(8):
        store.append("AB"[i % 2], [NewEvent("demo.note", {"i": i})])
        if i in (2, 3, 7):
            r = run("checkpoint", "--key-file", f"{prefix}.key", "--out", str(tmp_path / f"cp{i + 1}"))
            assert r.exit_code == 0, r.output
    drop_append_only_triggers(store)
    for a, b in ((4, -1), (5, 4), (-1, 5)):  # positions 4 (B@2) and 5 (A@3) swapped
        exec_sql(store, "UPDATE events SET position = :b WHERE position = :a", a=a, b=b)
    assert run("verify").exit_code == 0
    r = run("verify", "--checkpoint", str(tmp_path / "cp8"), "--vkey", f"{prefix}.vkey")
    assert r.exit_code == 1, r.output
    assert ('stream "A" version 3: checkpoint — leaf 3 (position 4): the first leaf that differs (the signed '
            "checkpoints of sizes 3 and 4 bracket it)") in r.stderr, r.stderr
    # the checkpoints recorded in the store are what locate it: without them, a range
    from eventstore.verify import check_tree_checkpoint

    with store.tree(3) as t:
        assert checkpoints.read_checkpoint((tmp_path / "cp3").read_text()).root == t.root()
    [alone] = check_tree_checkpoint(store, 8, checkpoints.read_checkpoint((tmp_path / "cp8").read_text()).root)
    assert "the first leaf that differs is one of leaves 0..7 (positions 1..8)" in alone.detail
