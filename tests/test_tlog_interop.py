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

from eventstore.cli import COMMANDS
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
    # Go's own build cache (~/.cache/go-build) is kept: the first build compiles net/http (~20 s on
    # a loaded machine), later ones take under a second
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "", "CGO_ENABLED": "0"}
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


def test_go_client_gets_cosignatures_from_evstore_witness(tlogcheck: Path, tmp_path: Path) -> None:
    """Go is the log and the witness client: its key, checkpoints (sumdb/note), consistency proofs
    (sumdb/tlog) and request bodies; it checks the cosignatures `evstore witness serve` returns."""
    from conftest import EVSTORE

    from tests.test_witness import WITNESS, witness_server

    made = go(tlogcheck, {"op": "keygen", "origin": "go.example/log"})
    subprocess.run([EVSTORE, "keygen", "--out", str(tmp_path / "w")], check=True, capture_output=True, timeout=60)
    (tmp_path / "log.vkey").write_text(made["vkey"] + "\n")
    witness = NoteSigner.from_key_file(tmp_path / "w.key", WITNESS, ALG_COSIGNATURE_V1).verifier
    leaves = [hashlib.sha256(b"go leaf %d" % i).hexdigest() for i in range(20)]
    forked = [*leaves[:2], hashlib.sha256(b"forged").hexdigest(), *leaves[3:]]
    keys = (tmp_path / "w.key", tmp_path / "log.vkey", witness, None)
    with witness_server(keys, tmp_path / "w.db") as (base, _):  # type: ignore[arg-type]
        def submit(which: list[str], steps: list[list[int]]) -> list[tuple[int, bool, str]]:
            got = go(tlogcheck, {"op": "submit", "url": base, "skey": made["skey"], "leaves": which, "steps": steps,
                                 "witness_vkeys": [witness.vkey]})
            return [(a["status"], a["cosigned"], a["body"] if a["status"] == 409 else "") for a in got["answers"]]
        assert submit(leaves, [[0, 5], [5, 9], [5, 12], [9, 9], [9, 14]]) == [
            (200, True, ""), (200, True, ""), (409, False, "9\n"), (200, True, ""), (200, True, "")]
        assert submit(forked, [[14, 20], [14, 14]]) == [(422, False, ""), (409, False, "14\n")]


@pytest.mark.skipif("prove" not in COMMANDS,
                    reason="needs the store side of issue 34 (evstore checkpoint and prove, branch i34b)")
def test_go_verifies_what_the_store_proves(tlogcheck: Path, store: Any, run: Any, tmp_path: Path) -> None:
    """End to end, on both backends: a store's checkpoints (cosigned by a real `evstore witness
    serve`) and the inclusion and consistency proofs `evstore prove` prints are accepted by Go's
    sumdb/note and sumdb/tlog, as by `evstore verify-proof`."""
    from eventstore.store import NewEvent
    from tests.test_witness import WITNESS, witness_server

    for prefix, name in (("log", "evstore.example/e2e"), ("w", WITNESS)):
        r = run("keygen", "--out", str(tmp_path / prefix), "--name", name)
        assert r.exit_code == 0, r.output
    log = NoteVerifier.parse((tmp_path / "log.vkey").read_text())
    witness = NoteVerifier.parse((tmp_path / "w.witness.vkey").read_text())
    keys = (tmp_path / "w.key", tmp_path / "log.vkey", witness, None)
    with witness_server(keys, tmp_path / "w.db") as (base, _):  # type: ignore[arg-type]
        def checkpoint(out: str) -> None:
            r = run("checkpoint", "--key-file", str(tmp_path / "log.key"), "--out", str(tmp_path / out),
                    "--witness", base, "--witness-vkey", str(tmp_path / "w.witness.vkey"))
            assert r.exit_code == 0, r.output
        for s in range(3):
            store.append(f"run-{s}", [NewEvent("demo.note", {"s": s, "i": i}) for i in range(5 + s)])
        checkpoint("cp1.txt")
        store.append("run-1", [NewEvent("demo.note", {"later": i}) for i in range(9)])
        checkpoint("cp2.txt")
    proofs = []
    for args in (["prove", "run-1", "--version", "2", "--checkpoint", str(tmp_path / "cp2.txt")],
                 ["prove", "--consistency", str(tmp_path / "cp1.txt"), str(tmp_path / "cp2.txt")]):
        r = run(*args)
        assert r.exit_code == 0, r.output
        proofs.append(json.loads(r.stdout))
    for proof in proofs:
        got = go(tlogcheck, {"op": "verify", "log_vkey": log.vkey, "witness_vkeys": [witness.vkey], "proof": proof})
        assert got["ok"] is True and got["cosigned_by"] == [WITNESS], got
        verify_proof(json.dumps(proof).encode(), log, witnesses=[witness])
