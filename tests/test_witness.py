"""`evstore witness serve`: a C2SP tlog-witness over HTTP, as a real process, and its client.

Each answer of tlog-witness §add-checkpoint (200 with a tlog-cosignature, 400, 403, 404, 409 with
``text/x.tlog.size``, 422), the check-and-store race the spec warns of, and a witness SIGKILLed
over and over while a log (and a forking impostor with the log's key) submit: it never cosigns
two roots for one size.
"""

from __future__ import annotations

import hashlib
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from conftest import EVSTORE, evstore_child
from serve_fixtures import http_client

from eventstore.errors import WitnessError
from eventstore.tlog import merkle
from eventstore.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from eventstore.tlog.note import ALG_COSIGNATURE_V1, NoteSigner, NoteVerifier, sign_note
from eventstore.tlog.witness import add_cosignatures, format_request, submit_to_witness
from tests.test_serve_drain import free_port, wait_until

ORIGIN = "evstore.example/witnessed-log"
WITNESS = "witness.example/w1"


class Log:
    """A log (leaves, its key) that can also fork: ``fork_at(i)`` rewrites leaf i."""

    def __init__(self, signer: NoteSigner, seed: bytes = b"") -> None:
        self.signer, self.leaves = signer, [hashlib.sha256(seed + b"%d" % i).digest() for i in range(200)]

    def fork_at(self, index: int) -> Log:
        other = Log(self.signer)
        other.leaves = [*self.leaves[:index], hashlib.sha256(b"forged").digest(), *self.leaves[index + 1:]]
        return other

    def checkpoint(self, size: int) -> str:
        return sign_checkpoint(Checkpoint(self.signer.name, size, merkle.root(self.leaves[:size])), self.signer)

    def proof(self, old: int, new: int) -> list[bytes]:
        return merkle.consistency_proof(old, new, lambda s, e: merkle.root(self.leaves[s:e]))

    def request(self, old: int, new: int) -> bytes:
        return format_request(old, self.proof(old, new), self.checkpoint(new))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, NoteVerifier, NoteSigner]:
    """The witness's key pair from `evstore keygen` (its name given with --name), and a log key."""
    d = tmp_path_factory.mktemp("keys")
    r = subprocess.run([EVSTORE, "keygen", "--out", str(d / "w")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    witness = NoteSigner.from_key_file(d / "w.key", WITNESS, ALG_COSIGNATURE_V1).verifier
    log = NoteSigner.generate(ORIGIN)
    (d / "log.vkey").write_text(log.verifier.vkey + "\n")
    return d / "w.key", d / "log.vkey", witness, log


def _wait_up(proc: subprocess.Popen[str], base: str) -> None:
    def up() -> bool:
        try:
            with http_client(base, timeout=2) as http:
                return http.get("/").status_code == 200
        except httpx2.HTTPError:
            return proc.poll() is not None
    wait_until(up, 60, "evstore witness serve answering")
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""


@contextmanager
def witness_server(keys: tuple[Path, Path, NoteVerifier, NoteSigner], db: Path, port: int | None = None
                   ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    key, log_vkey, _, _ = keys
    port = port or free_port()
    with evstore_child("witness", "serve", "--key-file", str(key), "--name", WITNESS, "--trust", str(log_vkey),
                       "--db", str(db), "--port", str(port)) as child:
        base = f"http://127.0.0.1:{port}"

        _wait_up(child.proc, base)
        yield base, child.proc


def post(base: str, body: bytes) -> httpx2.Response:
    with http_client(base, timeout=30) as http:
        return http.post("/add-checkpoint", content=body)


def test_add_checkpoint_answers(keys: tuple[Path, Path, NoteVerifier, NoteSigner], tmp_path: Path) -> None:
    _, _, witness, signer = keys
    log = Log(signer)
    with witness_server(keys, tmp_path / "w.db") as (base, _):
        r = post(base, log.request(0, 10))
        assert r.status_code == 200, r.text
        assert r.text.startswith(f"\u2014 {WITNESS} ") and r.text.endswith("\n") and r.text.count("\n") == 1
        got = open_checkpoint(log.checkpoint(10) + r.text, signer.verifier, witnesses=[witness])
        assert [c.witness for c in got.cosignatures] == [witness]
        assert abs(got.cosignatures[0].timestamp - time.time()) < 120

        # 409: the old size is not the one last cosigned; the body is that size
        r = post(base, log.request(5, 20))
        assert (r.status_code, r.headers["content-type"], r.text) == (409, "text/x.tlog.size", "10\n")
        # 422: a consistency proof that does not verify (from a forked history)
        fork = log.fork_at(3)
        r = post(base, fork.request(10, 20))
        assert r.status_code == 422, r.text
        # 409: the same size with another root
        r = post(base, format_request(10, [], fork.checkpoint(10)))
        assert (r.status_code, r.text) == (409, "10\n")
        # 403: signed by a key of the log's name the witness does not trust
        impostor = Log(NoteSigner.generate(ORIGIN))
        assert post(base, impostor.request(10, 20)).status_code == 403
        # 403: the trusted key's signature does not verify (the note was edited)
        edited = log.checkpoint(20).replace("\n20\n", "\n21\n")
        assert post(base, format_request(10, log.proof(10, 20), edited)).status_code == 403
        # 404: a log it does not know
        stranger = Log(NoteSigner.generate("other.example/log"))
        assert post(base, stranger.request(0, 3)).status_code == 404
        # 400: malformed requests
        for body in [b"old 10\n" + log.checkpoint(20).encode(), b"old 010\n\n" + log.checkpoint(20).encode(),
                     b"new 10\n\n" + log.checkpoint(20).encode(), format_request(30, [], log.checkpoint(20)),
                     format_request(10, [b"\x00" * 32] * 64, log.checkpoint(20)), b"old 10\nnot base64!\n\n" +
                     log.checkpoint(20).encode(), b"\xff\xfe", b"old 10\n\n" + b"no signature\n",
                     b"old 99999999999999999999\n\n" + log.checkpoint(20).encode(),
                     format_request(10, [], sign_note(f"{ORIGIN}\n99999999999999999999\n{'A' * 43}=\n", [signer]))]:
            r = post(base, body)
            assert r.status_code == 400, (body[:40], r.status_code, r.text)
        # none of that moved it: 10 is still the size to extend
        r = post(base, log.request(10, 20))
        assert r.status_code == 200, r.text
        # the same checkpoint again (old = size, same root) is cosigned again
        assert post(base, format_request(20, [], log.checkpoint(20))).status_code == 200
    # the signed checkpoints it refused as a fork are kept: with what it cosigned, evidence of the fork
    with sqlite3.connect(tmp_path / "w.db") as conn:
        refused = conn.execute("SELECT size, checkpoint, reason FROM refused ORDER BY rowid").fetchall()
        cosigned = dict(conn.execute("SELECT size, checkpoint FROM cosigned").fetchall())
    assert [(size, reason.split(":")[0]) for size, _, reason in refused] == [
        (20, "The consistency proof does not lead to the old root (size 10)"),
        (10, "another root for the size last cosigned")]
    fork_note = open_checkpoint(refused[1][1], signer.verifier).checkpoint
    cosigned_note = open_checkpoint(cosigned[10], signer.verifier).checkpoint
    assert fork_note.size == cosigned_note.size == 10 and fork_note.root != cosigned_note.root


def test_client(keys: tuple[Path, Path, NoteVerifier, NoteSigner], tmp_path: Path) -> None:
    _, _, witness, signer = keys
    log = Log(signer)
    with witness_server(keys, tmp_path / "w.db") as (base, _):
        lines = submit_to_witness(base, log.checkpoint(7), 0, [], witness)
        assert len(lines) == 1
        cosigned = add_cosignatures(log.checkpoint(7), lines)
        assert add_cosignatures(cosigned, lines) == cosigned
        assert open_checkpoint(cosigned, signer.verifier, require_witnesses=[witness]).cosignatures
        with pytest.raises(WitnessError, match=f"witness {WITNESS} at {base}/add-checkpoint refused the "
                                               f"checkpoint: 409") as info:
            submit_to_witness(base, log.checkpoint(9), 0, [], witness)
        assert (info.value.status, info.value.latest_size) == (409, 7)
        lines = submit_to_witness(base, log.checkpoint(9), 7, log.proof(7, 9), witness)  # retried from 7
        with pytest.raises(WitnessError, match="422"):
            submit_to_witness(base, log.fork_at(0).checkpoint(12), 9, log.fork_at(0).proof(9, 12), witness)
        other = NoteSigner.generate(WITNESS, ALG_COSIGNATURE_V1).verifier  # not the key it signs with
        with pytest.raises(WitnessError, match="without a valid cosignature"):
            submit_to_witness(base, log.checkpoint(12), 9, log.proof(9, 12), other)
    with pytest.raises(WitnessError, match="Cannot reach the witness"):
        submit_to_witness(base, log.checkpoint(12), 9, log.proof(9, 12), witness, timeout=2)


def test_concurrent_submissions_from_one_size_cosign_one(keys: tuple[Path, Path, NoteVerifier, NoteSigner],
                                                         tmp_path: Path) -> None:
    """The race of tlog-witness §add-checkpoint: requests from the same old size at once; exactly one
    is cosigned, the others get 409 with its size, and the stored size never goes back."""
    _, _, _, signer = keys
    log = Log(signer)
    with witness_server(keys, tmp_path / "w.db") as (base, _):
        assert post(base, log.request(0, 10)).status_code == 200
        sizes = [20, 30, 40, 50, 60, 70]
        with ThreadPoolExecutor(len(sizes)) as pool:
            answers = list(pool.map(lambda n: post(base, log.request(10, n)), sizes))
        won = [n for n, r in zip(sizes, answers, strict=True) if r.status_code == 200]
        assert len(won) == 1, [(r.status_code, r.text) for r in answers]
        assert sorted(r.text for r in answers if r.status_code == 409) == [f"{won[0]}\n"] * (len(sizes) - 1)


def test_sigkill_never_leads_to_cosigning_a_fork(keys: tuple[Path, Path, NoteVerifier, NoteSigner],
                                                 tmp_path: Path) -> None:
    """A witness SIGKILLed at random moments while a log submits growing checkpoints and an impostor
    holding the log's key submits a fork of each size: over all the 200s received, no size was
    ever cosigned with two roots, and what was cosigned survived each kill."""
    _, _, witness, signer = keys
    log, rng = Log(signer), random.Random(34)
    forks = {n: log.fork_at(n - 1) for n in range(1, 200)}  # the fork of size n differs in its last leaf
    db, port = tmp_path / "w.db", free_port()
    cosigned: dict[int, set[bytes]] = {}
    size = 0
    for round_ in range(8):
        with witness_server(keys, db, port) as (base, proc):
            def submit(which: Log, old: int, new: int) -> None:
                try:
                    r = post(base, which.request(old, new))
                except httpx2.HTTPError:
                    return
                if r.status_code == 200:
                    open_checkpoint(which.checkpoint(new) + r.text, signer.verifier, require_witnesses=[witness])
                    cosigned.setdefault(new, set()).add(merkle.root(which.leaves[:new]))
            submit(log, size, size + 1)  # one answered before the burst: every round makes progress
            assert size + 1 in cosigned, "the witness refused the log's next checkpoint"
            size += 1
            with ThreadPoolExecutor(4) as pool:
                futures = []
                for _ in range(6):
                    new = size + rng.randint(1, 3)
                    futures.append(pool.submit(submit, log, size, new))
                    futures.append(pool.submit(submit, forks[new], size, new))
                    size = new
                time.sleep(rng.uniform(0.0, 0.15))
                proc.send_signal(signal.SIGKILL)
                for f in futures:
                    f.result()
            proc.wait(timeout=10)
        # after the kill: what is on disk is the latest it may have cosigned
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT size FROM latest WHERE origin = ?", (ORIGIN,)).fetchone()
        on_disk = 0 if row is None else row[0]
        assert on_disk >= max(cosigned, default=0), round_
        size = on_disk  # the log goes on from there (either branch may have won that size)
        for n in list(forks):
            if n > on_disk:
                forks[n] = log.fork_at(n - 1)
        if row is not None:  # the branch it stored is the one to extend
            with sqlite3.connect(db) as conn:
                root = conn.execute("SELECT root FROM latest WHERE origin = ?", (ORIGIN,)).fetchone()[0]
            if merkle.root(log.leaves[:on_disk]) != root:
                log, forks = forks[on_disk], {n: forks[on_disk].fork_at(n - 1) for n in range(1, 200)}
        if size > 170:
            break
    assert cosigned, "no checkpoint was ever cosigned: the test proved nothing"
    assert all(len(roots) == 1 for roots in cosigned.values()), {n: len(r) for n, r in cosigned.items()}
    # and a restarted witness refuses a fork of the size it holds
    with witness_server(keys, db, port) as (base, _):
        forked = Log(signer)
        forked.leaves = [hashlib.sha256(b"another history %d" % i).digest() for i in range(200)]
        r = post(base, format_request(size, [], forked.checkpoint(size)))
        assert (r.status_code, r.text) == (409, f"{size}\n")


def test_witness_key_name_and_errors(keys: tuple[Path, Path, NoteVerifier, NoteSigner], tmp_path: Path) -> None:
    """The witness's name: --name, else PREFIX.witness.vkey beside PREFIX.key (which must be that
    key's); without either, and for a database it cannot open, `Error: ...` and exit 1."""
    from click.testing import CliRunner

    from eventstore.cli import register

    key, log_vkey, witness, _ = keys
    own = tmp_path / "w.key"
    own.write_bytes(key.read_bytes())
    args = ["witness", "serve", "--key-file", str(own), "--trust", str(log_vkey), "--db", str(tmp_path / "w.db")]
    r = CliRunner().invoke(register(), args)
    assert r.exit_code == 1
    assert r.stderr == (f"Error: The witness has no name: give --name NAME, or keep w.witness.vkey (of `evstore "
                        f"keygen`) beside {own}.\n")
    (tmp_path / "w.witness.vkey").write_text(NoteSigner.generate(WITNESS, ALG_COSIGNATURE_V1).verifier.vkey + "\n")
    r = CliRunner().invoke(register(), args)
    assert r.exit_code == 1 and "is not the witness key of" in r.stderr, r.stderr
    r = CliRunner().invoke(register(), [*args[:-1], str(tmp_path / "no" / "such" / "w.db"), "--name", "x.example/w"])
    assert r.exit_code == 1 and "Cannot open the witness database" in r.stderr, r.stderr
    r = CliRunner().invoke(register(), [*args, "--name", "x.example/w", "--trust", str(tmp_path / "w.witness.vkey")])
    assert r.exit_code == 1 and "is not a log's note key (algorithm 0x01)" in r.stderr, r.stderr
    # the name from the vkey beside the key
    (tmp_path / "w.witness.vkey").write_text(witness.vkey + "\n")
    port = free_port()
    with evstore_child(*args, "--port", str(port)) as child:
        base = f"http://127.0.0.1:{port}"

        _wait_up(child.proc, base)
        with http_client(base) as http:
            assert http.get("/").text.startswith(f"C2SP tlog-witness {witness.vkey}\nlogs:\n  {ORIGIN}\n")
