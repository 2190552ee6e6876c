"""Proof files, and checking one with nothing but the file and the log's verifier key.

``evstore prove`` writes a proof file (JSON); ``evstore verify-proof FILE --vkey LOG.vkey`` checks
it offline: no store, no network.  Two kinds, told apart by their fields:

inclusion (one event is leaf ``leaf_index`` of the log whose signed checkpoint is included)::

    {"leaf_index": 41, "tree_size": 1000, "event_hash": "<hex of the event's 32-byte chain hash>",
     "inclusion": ["<base64 hash>", ...],          # RFC 9162 order: from the leaf up to the root
     "checkpoint": "<signed note text>",
     "stream": "PROJ-42", "version": 3, "event_id": "…"}   # what the event hash commits to

consistency (the newer checkpoint's log extends the older's)::

    {"old_size": 800, "new_size": 1000, "consistency": ["<base64 hash>", ...],
     "old_checkpoint": "<signed note text>", "new_checkpoint": "<signed note text>"}

The leaf data of the log's Merkle tree is the event's chain hash (it commits to stream id,
version, event id, type, times and the digests of data and meta), so a verified inclusion proof
says: an event with this chain hash is at this place in the log the key signed.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventstore.errors import ProofError
from eventstore.tlog import merkle
from eventstore.tlog import note as notes
from eventstore.tlog.checkpoint import Cosignature, VerifiedCheckpoint, open_checkpoint

__all__ = [
    "ConsistencyProof", "InclusionProof", "ProofReport", "decode_proof", "encode_hashes", "verify_consistency_proof",
    "verify_inclusion_proof", "verify_proof",
]


class InclusionProof(msgspec.Struct, kw_only=True):
    leaf_index: int
    tree_size: int
    event_hash: str
    inclusion: list[str]
    checkpoint: str
    stream: str | None = None
    version: int | None = None
    event_id: str | None = None
    #: "erased at T (...)" / "purged at T (...)": what the store said of the event's content when it made
    #: the proof (its payload was emptied; the event hash, which the proof covers, is unchanged).  A note,
    #: not signed.
    content: str | None = None


class ConsistencyProof(msgspec.Struct, kw_only=True):
    old_size: int
    new_size: int
    consistency: list[str]
    old_checkpoint: str
    new_checkpoint: str


def encode_hashes(hashes: Sequence[bytes]) -> list[str]:
    """Proof hashes as the proof file writes them (standard base64)."""
    return [base64.b64encode(h).decode() for h in hashes]


def _decode_hashes(values: Sequence[str], where: str) -> list[bytes]:
    out = []
    for i, value in enumerate(values):
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise ProofError(f"{where}[{i}] is not base64 ({exc}).") from exc
        if len(raw) != merkle.HASH_SIZE:
            raise ProofError(f"{where}[{i}] is {len(raw)} bytes, not a {merkle.HASH_SIZE}-byte hash.")
        out.append(raw)
    return out


def decode_proof(data: bytes) -> InclusionProof | ConsistencyProof:
    """Read a proof file's JSON; raises :class:`ProofError` naming the field (a JSON path) at fault."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ProofError(f"The proof file is not JSON ({exc}).") from exc
    if not isinstance(raw, dict):
        raise ProofError("The proof file is not a JSON object.")
    kind: type[InclusionProof] | type[ConsistencyProof]
    if "inclusion" in raw:
        kind = InclusionProof
    elif "consistency" in raw:
        kind = ConsistencyProof
    else:
        raise ProofError("The proof file has neither an 'inclusion' nor a 'consistency' field: it is not a "
                         "proof written by `evstore prove`.")
    try:
        return msgspec.convert(raw, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise ProofError(f"The {kind.__name__[:-5].lower()} proof file is not valid: {exc}.") from exc


@dataclass(frozen=True)
class ProofReport:
    """What a verified proof established (for people: :attr:`summary`; for machines: :meth:`to_dict`)."""

    kind: str
    origin: str
    checkpoints: list[VerifiedCheckpoint]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def cosignatures(self) -> list[Cosignature]:
        return self.checkpoints[-1].cosignatures

    @property
    def summary(self) -> str:
        d = self.details
        if self.kind == "inclusion":
            what = f"event {d['event_hash'][:16]}…"
            if d.get("stream") is not None:
                what += f" (stream {d['stream']!r} version {d.get('version')})"
            text = (f"OK: {what} is leaf {d['leaf_index']} of log {self.origin!r} at size {d['tree_size']}, "
                    f"root {d['root'][:16]}…")
            if d.get("content") is not None:
                text += (f"; its content was {d['content']}, as the proof file says (a note the signature "
                         "does not cover; the event hash it proves is the one recorded before)")
        else:
            text = (f"OK: log {self.origin!r} at size {d['new_size']} (root {d['new_root'][:16]}…) extends "
                    f"its checkpoint at size {d['old_size']} (root {d['old_root'][:16]}…)")
        for c in self.cosignatures:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.timestamp)) if c.timestamp < 1 << 38 else "?"
            text += f"; cosigned by {c.witness.name} at {when} ({c.timestamp})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"ok": True, "kind": self.kind, "origin": self.origin, **self.details,
                "cosignatures": [{"witness": c.witness.name, "key_id": f"{c.witness.key_id:08x}",
                                  "timestamp": c.timestamp} for c in self.cosignatures]}


def verify_inclusion_proof(proof: InclusionProof, log: notes.NoteVerifier, *,
                           witnesses: Sequence[notes.NoteVerifier] = (), origin: str | None = None) -> ProofReport:
    """Check an inclusion proof: the checkpoint is signed by ``log`` (and cosigned by every one of
    ``witnesses``), its size is the proof's tree size, and the proof leads from the event's leaf
    hash to its root."""
    cp = open_checkpoint(proof.checkpoint, log, require_witnesses=witnesses, origin=origin)
    if cp.checkpoint.size != proof.tree_size:
        raise ProofError(f"The proof is for a tree of size {proof.tree_size} but its checkpoint is at size "
                         f"{cp.checkpoint.size}; ask `evstore prove` for a proof against that checkpoint.")
    try:
        leaf_data = bytes.fromhex(proof.event_hash)
    except ValueError as exc:
        raise ProofError(f"$.event_hash is not hex ({exc}).") from exc
    if len(leaf_data) != merkle.HASH_SIZE:
        raise ProofError(f"$.event_hash is {len(leaf_data)} bytes, not an event's 32-byte chain hash.")
    path = _decode_hashes(proof.inclusion, "$.inclusion")
    try:
        merkle.verify_inclusion(proof.leaf_index, proof.tree_size, merkle.leaf_hash(leaf_data), path,
                                cp.checkpoint.root)
    except ProofError as exc:
        raise ProofError(f"The event {proof.event_hash[:16]}… is not proven in log {cp.checkpoint.origin!r}: "
                         f"{exc}") from exc
    details = {"leaf_index": proof.leaf_index, "tree_size": proof.tree_size, "event_hash": proof.event_hash,
               "root": cp.checkpoint.root.hex(), "stream": proof.stream, "version": proof.version,
               "event_id": proof.event_id}
    if proof.content is not None:
        details["content"] = proof.content
    return ProofReport("inclusion", cp.checkpoint.origin, [cp], details)


def verify_consistency_proof(proof: ConsistencyProof, log: notes.NoteVerifier, *,
                             witnesses: Sequence[notes.NoteVerifier] = (), origin: str | None = None) -> ProofReport:
    """Check a consistency proof between two checkpoints signed by ``log`` (the newer one cosigned
    by every one of ``witnesses``): the newer log extends the older."""
    old = open_checkpoint(proof.old_checkpoint, log, origin=origin)
    new = open_checkpoint(proof.new_checkpoint, log, require_witnesses=witnesses, origin=origin)
    for label, cp, size in (("old", old, proof.old_size), ("new", new, proof.new_size)):
        if cp.checkpoint.size != size:
            raise ProofError(f"$.{label}_size is {size} but the {label} checkpoint is at size {cp.checkpoint.size}.")
    path = _decode_hashes(proof.consistency, "$.consistency")
    try:
        merkle.verify_consistency(proof.old_size, proof.new_size, old.checkpoint.root, new.checkpoint.root, path)
    except ProofError as exc:
        raise ProofError(f"Log {new.checkpoint.origin!r} at size {proof.new_size} is not proven to extend its "
                         f"checkpoint at size {proof.old_size}: {exc}") from exc
    details = {"old_size": proof.old_size, "new_size": proof.new_size,
               "old_root": old.checkpoint.root.hex(), "new_root": new.checkpoint.root.hex()}
    return ProofReport("consistency", new.checkpoint.origin, [old, new], details)


def verify_proof(data: bytes, log: notes.NoteVerifier, *, witnesses: Sequence[notes.NoteVerifier] = (),
                 origin: str | None = None) -> ProofReport:
    """Check a proof file's bytes (either kind) against the log's verifier key (and witnesses); the
    checkpoints' origin must be ``origin`` (default: the key's name)."""
    proof = decode_proof(data)
    if isinstance(proof, InclusionProof):
        return verify_inclusion_proof(proof, log, witnesses=witnesses, origin=origin)
    return verify_consistency_proof(proof, log, witnesses=witnesses, origin=origin)
