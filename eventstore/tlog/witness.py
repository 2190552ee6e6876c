"""A C2SP tlog-witness (c2sp.org/tlog-witness): ``POST /add-checkpoint``, and its client.

The witness cosigns checkpoints of the logs it trusts (a log is known by its origin, the name of
its verifier key) after checking that each extends the last one it cosigned for that log:

- request body: ``old <size>``, zero to 63 base64 consistency-proof lines, a blank line, then the
  signed checkpoint;
- 200 and the cosignature line (tlog-cosignature v1, timestamped Ed25519) when all holds;
- 400 malformed request, 403 no trusted signature verifies, 404 unknown origin,
  409 (``text/x.tlog.size``: the size it last cosigned) when ``old`` is not that size or the same
  size comes with another root, 422 consistency proof that does not verify.

State is one SQLite file: per origin the latest cosigned size and root, every checkpoint it
cosigned, and every validly signed checkpoint it refused as not extending them (a 422, or a 409 for
another root at the same size): two such signed checkpoints are evidence of a forked log.  Checking ``old`` against the stored size and storing the new one happen in one
``BEGIN IMMEDIATE`` transaction (the race the spec describes cannot roll a log back), committed
with ``synchronous=FULL`` before the cosignature is made: a witness killed at any point either
never cosigned the checkpoint or has it on disk, so it never cosigns two roots for one size.
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventstore.errors import EvstoreError, ProofError, WitnessError
from eventstore.tlog import merkle
from eventstore.tlog import note as notes
from eventstore.tlog.checkpoint import Checkpoint

__all__ = ["MAX_PROOF_LINES", "Answer", "Witness", "add_cosignatures", "format_request", "submit_to_witness",
           "witness_app"]

MAX_PROOF_LINES = 63
SIZE_CONTENT_TYPE = "text/x.tlog.size"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS latest (
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    root BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS cosigned (
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    checkpoint TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL,
    PRIMARY KEY (origin, size)
);
CREATE TABLE IF NOT EXISTS refused (
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    checkpoint TEXT NOT NULL,
    reason TEXT NOT NULL,
    refused_at INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer of the witness."""

    status: int
    body: str
    content_type: str = "text/plain; charset=utf-8"


def _parse_request(body: bytes) -> tuple[int, list[bytes], str]:
    """(old size, proof hashes, checkpoint note text); raises ProofError for a malformed body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProofError("The request is not UTF-8.") from exc
    head, sep, note_text = text.partition("\n\n")
    if not sep:
        raise ProofError("The request has no blank line before the checkpoint.")
    lines = head.split("\n")
    old_line, proof_lines = lines[0], lines[1:]
    number = old_line[4:]
    if not old_line.startswith("old ") or not number.isascii() or not number.isdigit() or \
            (number != "0" and number.startswith("0")):
        raise ProofError(f"The first line {old_line[:40]!r} is not 'old <size>'.")
    if len(number) > 19 or int(number) >= 1 << 63:
        raise ProofError(f"The old size {number[:40]} is too large.")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise ProofError(f"The request has {len(proof_lines)} consistency proof lines, more than {MAX_PROOF_LINES}.")
    proof = []
    for i, line in enumerate(proof_lines):
        try:
            raw = base64.b64decode(line.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise ProofError(f"Consistency proof line {i + 1} is not base64.") from exc
        if len(raw) != merkle.HASH_SIZE:
            raise ProofError(f"Consistency proof line {i + 1} is not a 32-byte hash.")
        proof.append(raw)
    return int(number), proof, note_text


def format_request(old_size: int, proof: Sequence[bytes], checkpoint_note: str) -> bytes:
    """The body of an ``add-checkpoint`` request."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + checkpoint_note).encode("utf-8")


class Witness:
    """The witness's logic over its SQLite file (the HTTP layer is :func:`witness_app`).

    ``signer`` is the witness's cosignature key (algorithm 0x04); ``trusted`` the logs' verifier
    keys (algorithm 0x01): a log's origin is its key's name, and a log may have several keys.
    """

    def __init__(self, db: Path, signer: notes.NoteSigner, trusted: Sequence[notes.NoteVerifier]) -> None:
        if signer.alg != notes.ALG_COSIGNATURE_V1:
            raise EvstoreError("A witness signs with a cosignature key (algorithm 0x04).")
        self.db, self.signer = db, signer
        self.trusted: dict[str, list[notes.NoteVerifier]] = {}
        for key in trusted:
            if key.alg != notes.ALG_ED25519:
                raise EvstoreError(f"Trusted key {key.name} is not a log's note key (algorithm 0x01); give the "
                                   f"log's PREFIX.vkey.")
            self.trusted.setdefault(key.name, []).append(key)
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise EvstoreError(f"Cannot open the witness database {self.db}: {exc}.") from exc
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a cosigned checkpoint is on disk before it is answered
        return conn

    def latest(self, origin: str) -> tuple[int, bytes] | None:
        """The size and root last cosigned for ``origin``."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT size, root FROM latest WHERE origin = ?", (origin,)).fetchone()
        finally:
            conn.close()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def add_checkpoint(self, body: bytes, *, now: int | None = None) -> Answer:
        """Handle one ``add-checkpoint`` request body (tlog-witness §add-checkpoint)."""
        try:
            old, proof, note_text = _parse_request(body)
            text, _ = notes.parse_note(note_text)
        except ProofError as exc:
            return Answer(400, f"{exc}\n")
        origin = text.split("\n", 1)[0]
        keys = self.trusted.get(origin)
        if keys is None:
            return Answer(404, f"Unknown log origin {origin[:200]!r}.\n")
        try:
            notes.open_note(note_text, keys)
        except ProofError as exc:
            return Answer(403, f"{exc}\n")
        try:
            cp = Checkpoint.parse(text)
        except ProofError as exc:
            return Answer(400, f"{exc}\n")
        if old > cp.size:
            return Answer(400, f"The old size {old} is larger than the checkpoint's size {cp.size}.\n")
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")  # check-and-store is atomic across requests and processes
            row = conn.execute("SELECT size, root FROM latest WHERE origin = ?", (origin,)).fetchone()
            latest_size, latest_root = (0, None) if row is None else (int(row[0]), bytes(row[1]))
            if old != latest_size:
                conn.execute("ROLLBACK")
                return Answer(409, f"{latest_size}\n", SIZE_CONTENT_TYPE)
            stamp = int(time.time()) if now is None else now
            if latest_root is not None and cp.size == latest_size and cp.root != latest_root:
                # a second root for a size it cosigned, signed by the log's key: evidence of a fork, kept
                self._keep_refused(conn, cp, note_text, "another root for the size last cosigned", stamp)
                return Answer(409, f"{latest_size}\n", SIZE_CONTENT_TYPE)
            try:
                if old == 0:
                    if proof:
                        raise ProofError("The consistency proof from size 0 must be empty.")
                elif latest_root is not None:
                    merkle.verify_consistency(old, cp.size, latest_root, cp.root, proof)
            except ProofError as exc:
                # signed by the log's key yet not extending what it cosigned: kept (tlog-witness allows
                # logging it) as possible evidence of the log's misbehaviour
                self._keep_refused(conn, cp, note_text, str(exc), stamp)
                return Answer(422, f"{exc}\n")
            conn.execute("INSERT INTO latest (origin, size, root) VALUES (?, ?, ?) ON CONFLICT (origin) "
                         "DO UPDATE SET size = excluded.size, root = excluded.root", (origin, cp.size, cp.root))
            conn.execute("INSERT OR IGNORE INTO cosigned (origin, size, root, checkpoint, cosigned_at) "
                         "VALUES (?, ?, ?, ?, ?)", (origin, cp.size, cp.root, note_text, stamp))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
        return Answer(200, self.signer.signature_line(text, timestamp=stamp))


    @staticmethod
    def _keep_refused(conn: sqlite3.Connection, cp: Checkpoint, note_text: str, reason: str, stamp: int) -> None:
        """Record a validly signed checkpoint it refused, ending the transaction (nothing else changes)."""
        conn.execute("INSERT INTO refused (origin, size, root, checkpoint, reason, refused_at) VALUES (?, ?, ?, ?, ?, ?)",
                     (cp.origin, cp.size, cp.root, note_text, reason, stamp))
        conn.execute("COMMIT")

    def refused(self, origin: str) -> list[tuple[int, bytes, str, str]]:
        """The validly signed checkpoints of ``origin`` it refused (size, root, signed note, reason), oldest first."""
        conn = self._connect()
        try:
            rows = conn.execute("SELECT size, root, checkpoint, reason FROM refused WHERE origin = ? ORDER BY rowid",
                                (origin,)).fetchall()
        finally:
            conn.close()
        return [(int(r[0]), bytes(r[1]), str(r[2]), str(r[3])) for r in rows]


def witness_app(witness: Witness) -> Any:
    """The Starlette app serving ``POST /add-checkpoint`` (and ``GET /`` naming the witness)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    max_body = 64 * 1024

    async def add_checkpoint(request: Request) -> Response:
        body = await request.body()
        if len(body) > max_body:
            return PlainTextResponse("Request too large.\n", status_code=400)
        from starlette.concurrency import run_in_threadpool

        answer = await run_in_threadpool(witness.add_checkpoint, body)
        # the content type exactly as given: Starlette would add "; charset=utf-8" to a text/* media type,
        # and tlog-witness names the 409's type as text/x.tlog.size
        return Response(answer.body, status_code=answer.status, headers={"Content-Type": answer.content_type})

    async def index(request: Request) -> Response:
        logs = "".join(f"  {origin}\n" for origin in sorted(witness.trusted))
        return PlainTextResponse(f"C2SP tlog-witness {witness.signer.verifier.vkey}\nlogs:\n{logs}")

    return Starlette(routes=[Route("/add-checkpoint", add_checkpoint, methods=["POST"]), Route("/", index)])


def add_cosignatures(checkpoint_note: str, lines: Sequence[str]) -> str:
    """The checkpoint note with the signature ``lines`` appended (a line it already has is not repeated)."""
    have = set(checkpoint_note.split("\n"))
    return checkpoint_note + "".join(line if line.endswith("\n") else line + "\n"
                                     for line in lines if line.rstrip("\n") not in have)


def submit_to_witness(url: str, checkpoint_note: str, old_size: int, proof: Sequence[bytes],
                      witness_vkey: notes.NoteVerifier, *, timeout: float = 30.0) -> list[str]:
    """Send a checkpoint to the witness at ``url`` (its submission prefix) with the consistency proof
    from ``old_size``; the witness's verified cosignature lines.  A refusal raises
    :class:`~eventstore.errors.WitnessError` naming the witness and its answer (``latest_size`` set
    on 409, so the caller can prove from that size and try again)."""
    if witness_vkey.alg != notes.ALG_COSIGNATURE_V1:
        raise EvstoreError(f"{witness_vkey.name} is not a witness key (algorithm 0x04); give its PREFIX.witness.vkey.")
    endpoint = url.rstrip("/") + "/add-checkpoint"
    request = urllib.request.Request(endpoint, data=format_request(old_size, proof, checkpoint_note), method="POST",
                                     headers={"Content-Type": "text/plain; charset=utf-8"})
    who = f"witness {witness_vkey.name} at {endpoint}"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) URL given by the user)
            status, content = response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        content = exc.read().decode("utf-8", "replace")
        latest = None
        if exc.code == 409 and exc.headers.get("Content-Type", "").startswith(SIZE_CONTENT_TYPE):
            number = content.strip()
            latest = int(number) if number.isdigit() else None
        raise WitnessError(f"The {who} refused the checkpoint: {exc.code} {exc.reason}: {content.strip()[:300]}",
                           url=endpoint, status=exc.code, body=content, latest_size=latest) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WitnessError(f"Cannot reach the {who}: {reason}.", url=endpoint) from exc
    if status != 200:
        raise WitnessError(f"The {who} answered {status}, not 200.", url=endpoint, status=status, body=content)
    try:
        opened = notes.open_note(checkpoint_note + content if content.endswith("\n") else checkpoint_note + content + "\n",
                                 [witness_vkey])
    except ProofError as exc:
        raise WitnessError(f"The {who} answered without a valid cosignature: {exc}", url=endpoint, status=status,
                           body=content) from exc
    return [sig.line for v, sig in opened.verified if v == witness_vkey]
