"""`evstore verify-proof FILE --vkey VKEY`: a proof file checked with nothing but the file and the key.

The proof files here are built from RFC 9162 proofs over a small log and signed checkpoints, as
`evstore prove` writes them; each tampering an auditor could meet fails with exit 1 and a message
that names what does not hold.  (That Go's implementation accepts the same files' proofs and
notes is tests/test_tlog_interop.py.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore.cli import register
from eventstore.tlog import merkle
from eventstore.tlog.checkpoint import Checkpoint, sign_checkpoint
from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner
from eventstore.tlog.proofs import encode_hashes

ORIGIN = "evstore.example/test-log"
LEAVES = [hashlib.sha256(b"event %d" % i).digest() for i in range(13)]


def _subtree(start: int, end: int) -> bytes:
    return merkle.root(LEAVES[start:end])


def _checkpoint(log: NoteSigner, size: int, *cosigners: NoteSigner, leaves: list[bytes] = LEAVES,
                origin: str = ORIGIN) -> str:
    cp = Checkpoint(origin, size, merkle.root(leaves[:size]))
    return sign_checkpoint(cp, log) + "".join(w.signature_line(cp.body, timestamp=1764000000) for w in cosigners)


def inclusion_file(log: NoteSigner, index: int, size: int, *cosigners: NoteSigner) -> dict[str, Any]:
    return {"leaf_index": index, "tree_size": size, "event_hash": LEAVES[index].hex(),
            "inclusion": encode_hashes(merkle.inclusion_proof(index, size, _subtree)),
            "checkpoint": _checkpoint(log, size, *cosigners), "stream": "PROJ-1", "version": index + 1,
            "event_id": f"00000000-0000-0000-0000-{index:012d}"}


def consistency_file(log: NoteSigner, old: int, new: int) -> dict[str, Any]:
    return {"old_size": old, "new_size": new, "consistency": encode_hashes(merkle.consistency_proof(old, new, _subtree)),
            "old_checkpoint": _checkpoint(log, old), "new_checkpoint": _checkpoint(log, new)}


@pytest.fixture
def keys(tmp_path: Path) -> tuple[NoteSigner, NoteSigner, Path, Path]:
    log = NoteSigner.generate(ORIGIN)
    witness = NoteSigner.generate("witness.example/w1", ALG_COSIGNATURE_V1)
    (tmp_path / "log.vkey").write_text(log.verifier.vkey + "\n")
    (tmp_path / "w1.witness.vkey").write_text(witness.verifier.vkey + "\n")
    return log, witness, tmp_path / "log.vkey", tmp_path / "w1.witness.vkey"


def run(tmp_path: Path, proof: dict[str, Any] | str, *args: str) -> Any:
    f = tmp_path / "proof.json"
    f.write_text(proof if isinstance(proof, str) else json.dumps(proof))
    return CliRunner().invoke(register(), ["verify-proof", str(f), *args])


def test_inclusion_and_consistency_proofs_verify(tmp_path: Path, keys: Any) -> None:
    log, witness, vkey, wkey = keys
    r = run(tmp_path, inclusion_file(log, 5, 13), "--vkey", str(vkey))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"OK: event {LEAVES[5].hex()[:16]}… (stream 'PROJ-1' version 6) is leaf 5 of log "
                               f"'{ORIGIN}' at size 13")
    r = run(tmp_path, inclusion_file(log, 12, 13, witness), "--vkey", str(vkey), "--witness-vkey", str(wkey))
    assert r.exit_code == 0 and r.stdout.endswith("; cosigned by witness.example/w1 at 2025-11-24T16:00:00Z "
                                                  "(1764000000)\n"), r.output
    r = run(tmp_path, inclusion_file(log, 12, 13, witness), "--vkey", str(vkey), "--witness-vkey", str(wkey), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["kind"], got["leaf_index"], got["tree_size"]) == ("inclusion", 12, 13)
    assert got["cosignatures"] == [{"witness": "witness.example/w1", "key_id": f"{witness.key_id:08x}",
                                    "timestamp": 1764000000}]
    for old, new in [(1, 13), (8, 13), (5, 7), (13, 13)]:
        r = run(tmp_path, consistency_file(log, old, new), "--vkey", str(vkey))
        assert r.exit_code == 0, (old, new, r.output)
        assert f"at size {new}" in r.stdout and f"at size {old}" in r.stdout


def _fails(r: Any, *fragments: str) -> None:
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("Error: "), r.stderr
    for fragment in fragments:
        assert fragment in r.stderr, r.stderr


def test_tampered_proofs_fail_naming_why(tmp_path: Path, keys: Any) -> None:
    log, witness, vkey, wkey = keys
    good = inclusion_file(log, 5, 13)
    _fails(run(tmp_path, {**good, "event_hash": LEAVES[6].hex()}, "--vkey", str(vkey)), "is not proven in log")
    _fails(run(tmp_path, {**good, "leaf_index": 4}, "--vkey", str(vkey)), "is not proven")
    flipped = list(good["inclusion"])
    flipped[1] = ("B" if flipped[1][0] == "A" else "A") + flipped[1][1:]
    _fails(run(tmp_path, {**good, "inclusion": flipped}, "--vkey", str(vkey)), "is not proven")
    _fails(run(tmp_path, {**good, "inclusion": good["inclusion"][:-1]}, "--vkey", str(vkey)), "too short")
    _fails(run(tmp_path, {**good, "tree_size": 12}, "--vkey", str(vkey)), "checkpoint is at size 13")
    # a checkpoint whose size or root was edited no longer carries the log's signature
    edited = good["checkpoint"].replace("\n13\n", "\n14\n")
    _fails(run(tmp_path, {**good, "checkpoint": edited, "tree_size": 14}, "--vkey", str(vkey)), "does not verify")
    # signed by another key with the same name: unknown, so not signed by the log
    impostor = NoteSigner.generate(ORIGIN)
    _fails(run(tmp_path, inclusion_file(impostor, 5, 13), "--vkey", str(vkey)), "No signature on the note is by a known key")
    # a witness required but absent
    _fails(run(tmp_path, good, "--vkey", str(vkey), "--witness-vkey", str(wkey)), "not cosigned by the witness")
    # a log key given where a witness key is expected
    _fails(run(tmp_path, good, "--vkey", str(vkey), "--witness-vkey", str(vkey)), "algorithm 0x04")
    # a consistency proof between checkpoints of a forked log
    fork = consistency_file(log, 5, 13)
    forked_new = _checkpoint(log, 13, leaves=[*LEAVES[:3], hashlib.sha256(b"rewritten").digest(), *LEAVES[4:]])
    _fails(run(tmp_path, {**fork, "new_checkpoint": forked_new}, "--vkey", str(vkey)),
           "is not proven to extend its checkpoint at size 5")


def test_origin_other_than_the_key_name(tmp_path: Path, keys: Any) -> None:
    """A log may sign checkpoints of another origin line (`checkpoint --origin`): verify-proof then
    needs --origin, and a checkpoint of another log signed with the same key never passes for this one."""
    log, _, vkey, _ = keys
    proof = {**inclusion_file(log, 2, 5), "checkpoint": _checkpoint(log, 5, origin="example.org/other")}
    _fails(run(tmp_path, proof, "--vkey", str(vkey)), "for the log 'example.org/other', not 'evstore.example/test-log'")
    r = run(tmp_path, proof, "--vkey", str(vkey), "--origin", "example.org/other")
    assert r.exit_code == 0 and "of log 'example.org/other'" in r.stdout, r.output
    _fails(run(tmp_path, proof, "--vkey", str(vkey), "--origin", "example.org/third"), "not 'example.org/third'")


def test_malformed_files(tmp_path: Path, keys: Any) -> None:
    log, _, vkey, _ = keys
    good = inclusion_file(log, 5, 13)
    _fails(run(tmp_path, "{not json", "--vkey", str(vkey)), "not JSON")
    _fails(run(tmp_path, {"hello": 1}, "--vkey", str(vkey)), "neither an 'inclusion' nor a 'consistency'")
    _fails(run(tmp_path, {**good, "leaf_index": "5"}, "--vkey", str(vkey)), "$.leaf_index")
    _fails(run(tmp_path, {**good, "inclusion": ["!!"]}, "--vkey", str(vkey)), "$.inclusion[0]")
    (tmp_path / "bad.vkey").write_text("nonsense\n")
    _fails(run(tmp_path, good, "--vkey", str(tmp_path / "bad.vkey")), "bad.vkey", "not a verifier key")


def test_runs_with_nothing_but_the_file_and_the_key(tmp_path: Path, keys: Any) -> None:
    """A fresh process in an empty folder, no EVSTORE_URL: it opens no store (imports no SQLAlchemy,
    creates no .evstore) and needs nothing else."""
    import os
    import subprocess
    import sys

    log, _, vkey, _ = keys
    work = tmp_path / "auditor"
    work.mkdir()
    (work / "p.json").write_text(json.dumps(inclusion_file(log, 0, 1)))
    probe = ("import sys; sys.argv = ['evstore', 'verify-proof', 'p.json', '--vkey', sys.argv[1]]\n"
             "from eventstore.entry import main\n"
             "try:\n    main()\nfinally:\n    print('SQLA' if 'sqlalchemy' in sys.modules else 'NOSQLA', file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != "EVSTORE_URL"}
    r = subprocess.run([sys.executable, "-c", probe, str(vkey)], cwd=work, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK: event ") and "leaf 0 of log" in r.stdout
    assert r.stderr.strip().endswith("NOSQLA")
    assert sorted(p.name for p in work.iterdir()) == ["p.json"]
