"""Interoperability with Go's golang.org/x/mod/sumdb/note and sumdb/tlog: an implementation evstore
shares no code with checks evstore's signed notes, checkpoints, cosignatures and RFC 9162 proofs,
and evstore checks the ones it makes.

The Go side is tests/interop/tlogcheck (std lib + golang.org/x/mod, built offline in GOPATH
mode from Debian's golang-golang-x-mod-dev; .ci/run installs it).  Without ``go`` or that
package the tests skip, saying which is missing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import ProofError
from eventstore.tlog import merkle
from eventstore.tlog.checkpoint import open_checkpoint
from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner, NoteVerifier, open_note
from eventstore.tlog.proofs import verify_proof
from tests.test_verify_proof import ORIGIN, consistency_file, inclusion_file

GOPATH = Path(os.environ.get("EVSTORE_TEST_GOPATH", "/usr/share/gocode"))
SOURCE = Path(__file__).parent / "interop" / "tlogcheck"


@pytest.fixture(scope="module")
def tlogcheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (apt-get install golang-go golang-golang-x-mod-dev): no interop check")
    if not (GOPATH / "src/golang.org/x/mod/sumdb/note").is_dir():
        pytest.skip(f"golang.org/x/mod is not in {GOPATH} (apt-get install golang-golang-x-mod-dev): no interop check")
    out = tmp_path_factory.mktemp("go") / "tlogcheck"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "",
           "GOCACHE": str(out.parent / "cache"), "CGO_ENABLED": "0"}
    r = subprocess.run([go, "build", "-o", str(out), "."], cwd=SOURCE, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def go(binary: Path, request: dict[str, Any]) -> dict[str, Any]:
    r = subprocess.run([str(binary)], input=json.dumps(request), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    answer: dict[str, Any] = json.loads(r.stdout)
    return answer


def go_verifies(binary: Path, log: NoteSigner, proof: dict[str, Any], *witnesses: NoteSigner) -> dict[str, Any]:
    return go(binary, {"op": "verify", "log_vkey": log.verifier.vkey, "proof": proof,
                       "witness_vkeys": [w.verifier.vkey for w in witnesses]})


def test_go_verifies_evstore_proofs_notes_and_cosignatures(tlogcheck: Path) -> None:
    log = NoteSigner.generate(ORIGIN)
    witness = NoteSigner.generate("witness.example/w1", ALG_COSIGNATURE_V1)
    for index, size in [(0, 1), (5, 13), (12, 13), (7, 8)]:
        got = go_verifies(tlogcheck, log, inclusion_file(log, index, size, witness), witness)
        assert got == {"ok": True, "kind": "inclusion", "cosigned_by": ["witness.example/w1"]}, (index, size)
    for old, new in [(1, 13), (8, 13), (5, 7), (12, 13), (13, 13)]:
        got = go_verifies(tlogcheck, log, consistency_file(log, old, new))
        assert got["ok"] is True, (old, new, got)


def test_go_rejects_what_evstore_rejects(tlogcheck: Path) -> None:
    """The same tamperings fail on both sides (so the Go side is really checking)."""
    log = NoteSigner.generate(ORIGIN)
    witness = NoteSigner.generate("witness.example/w1", ALG_COSIGNATURE_V1)
    good = inclusion_file(log, 5, 13, witness)
    cases = [
        {**good, "event_hash": hashlib.sha256(b"other").hexdigest()},
        {**good, "leaf_index": 4},
        {**good, "checkpoint": good["checkpoint"].replace("\n13\n", "\n14\n"), "tree_size": 14},
        {**good, "inclusion": good["inclusion"][:-1]},
    ]
    for case in cases:
        assert go_verifies(tlogcheck, log, case, witness)["ok"] is False
        with pytest.raises(ProofError):
            verify_proof(json.dumps(case).encode(), log.verifier, witnesses=[witness.verifier])
    # a cosignature whose time was changed no longer verifies (the time is signed)
    lines = good["checkpoint"].split("\n")
    sig = lines[-2].split(" ")
    raw = bytearray(base64.b64decode(sig[-1]))
    raw[4 + 7] ^= 1
    sig[-1] = base64.b64encode(bytes(raw)).decode()
    bad = {**good, "checkpoint": "\n".join([*lines[:-2], " ".join(sig), ""])}
    assert go_verifies(tlogcheck, log, bad, witness)["ok"] is False
    with pytest.raises(ProofError, match="does not verify"):
        verify_proof(json.dumps(bad).encode(), log.verifier, witnesses=[witness.verifier])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(2, 70).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n))))
def test_evstore_verifies_what_go_makes(tlogcheck: Path, sizes: tuple[int, int, int]) -> None:
    """Go builds the tree (sumdb/tlog), signs the checkpoints (sumdb/note) and cosigns one (its own
    0x04 signer); evstore's verifier accepts the proofs and its prover makes the same ones."""
    n, index, old = sizes
    leaves = [hashlib.sha256(b"leaf %d" % i).digest() for i in range(n)]
    made = go(tlogcheck, {"op": "make", "origin": "go.example/log", "witness_name": "go.example/witness",
                          "leaves": [x.hex() for x in leaves], "index": index, "old": old, "timestamp": 1764000000})
    log, witness = NoteVerifier.parse(made["log_vkey"]), NoteVerifier.parse(made["witness_vkey"])
    report = verify_proof(json.dumps(made["inclusion"]).encode(), log, witnesses=[witness])
    assert [(c.witness.name, c.timestamp) for c in report.cosignatures] == [("go.example/witness", 1764000000)]
    if old < n:
        verify_proof(json.dumps(made["consistency"]).encode(), log, witnesses=[witness])
    subtree = lambda s, e: merkle.root(leaves[s:e])  # noqa: E731
    assert made["inclusion"].get("inclusion", []) == [base64.b64encode(h).decode()
                                             for h in merkle.inclusion_proof(index, n, subtree)]
    assert made["consistency"].get("consistency", []) == [base64.b64encode(h).decode()
                                                 for h in merkle.consistency_proof(old, n, subtree)]
    assert open_note(made["note"], [log]).text == "Ognuno sta solo sul cuor della terra\n"
    cp = open_checkpoint(made["inclusion"]["checkpoint"], log, witnesses=[witness]).checkpoint
    assert cp.root == merkle.root(leaves)
