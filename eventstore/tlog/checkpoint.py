"""C2SP tlog-checkpoint (c2sp.org/tlog-checkpoint): the signed head of a transparency log.

The body is three or more non-empty lines::

    <origin>            non-empty; evstore uses the log key's name
    <tree size>         ASCII decimal, no leading zeroes ("0" for the empty tree)
    <root hash>         base64 of the RFC 9162 Merkle tree hash at that size
    [extension lines]   optional, opaque, non-empty

signed as a C2SP signed note by the log's key; witnesses add tlog-cosignature lines.  Example::

    >>> cp = Checkpoint("example.com/log", 0, bytes.fromhex(
    ...     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"))
    >>> Checkpoint.parse(cp.body) == cp
    True
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from eventstore.errors import ProofError
from eventstore.tlog import note as notes
from eventstore.tlog.merkle import HASH_SIZE

__all__ = ["Checkpoint", "Cosignature", "VerifiedCheckpoint", "open_checkpoint", "sign_checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin:
            raise ProofError("A checkpoint's origin must be one non-empty line.")
        if not 0 <= self.size < 1 << 63:
            raise ProofError(f"A checkpoint's tree size must be from 0 to 2^63 - 1, not {self.size}.")
        if len(self.root) != HASH_SIZE:
            raise ProofError(f"A checkpoint's root hash is {HASH_SIZE} bytes, not {len(self.root)}.")
        if any(not e or "\n" in e for e in self.extensions):
            raise ProofError("A checkpoint's extension lines must be non-empty single lines.")

    @property
    def body(self) -> str:
        """The note text: origin, size, base64 root, extension lines, each ending in a newline."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Parse a checkpoint body (the note text, without signatures) by the spec's rules;
        :class:`ProofError` says which line breaks which rule."""
        if not text.endswith("\n"):
            raise ProofError("The checkpoint does not end with a newline.")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise ProofError(f"A checkpoint has at least three lines (origin, tree size, root hash); "
                             f"this one has {len(lines)}.")
        origin, size_text, root_text, *extensions = lines
        if not origin:
            raise ProofError("The checkpoint's origin line (line 1) is empty.")
        if not size_text.isascii() or not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
            raise ProofError(f"The checkpoint's tree size (line 2) {size_text[:40]!r} is not a decimal "
                             f"number without leading zeroes.")
        try:
            raw = base64.b64decode(root_text.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError) as exc:
            raise ProofError(f"The checkpoint's root hash (line 3) is not base64 ({exc}).") from exc
        if len(raw) != HASH_SIZE or base64.b64encode(raw).decode() != root_text:
            raise ProofError(f"The checkpoint's root hash (line 3) is not the base64 of a {HASH_SIZE}-byte hash.")
        for i, ext in enumerate(extensions, start=4):
            if not ext:
                raise ProofError(f"The checkpoint's extension line {i} is empty.")
        return cls(origin, int(size_text), raw, tuple(extensions))


@dataclass(frozen=True)
class Cosignature:
    """A witness's verified cosignature of a checkpoint: who, and when (POSIX seconds)."""

    witness: notes.NoteVerifier
    timestamp: int
    line: str


@dataclass(frozen=True)
class VerifiedCheckpoint:
    checkpoint: Checkpoint
    log: notes.NoteVerifier
    cosignatures: list[Cosignature] = field(default_factory=list)
    #: Signature lines by keys not given (kept to pass on unchanged).
    other_signatures: list[notes.NoteSignature] = field(default_factory=list)


def sign_checkpoint(checkpoint: Checkpoint, signer: notes.NoteSigner) -> str:
    """The checkpoint as a signed note by the log key ``signer``."""
    return notes.sign_note(checkpoint.body, [signer])


def open_checkpoint(data: str | bytes, log: notes.NoteVerifier, *,
                    witnesses: Iterable[notes.NoteVerifier] = (), origin: str | None = None,
                    require_witnesses: Sequence[notes.NoteVerifier] = ()) -> VerifiedCheckpoint:
    """Check a signed checkpoint: the log key ``log`` must have signed it, its body must be a valid
    checkpoint, and its origin must be ``origin`` (default: the log key's name, as evstore writes
    them).  Cosignatures by ``witnesses`` are verified (a bad one fails the whole note, as the spec
    advises) and returned; each of ``require_witnesses`` must have cosigned."""
    witness_list = list(witnesses) + [w for w in require_witnesses if w not in witnesses]
    for w in witness_list:
        if w.alg != notes.ALG_COSIGNATURE_V1:
            raise ProofError(f"Witness key {w.name} is not a cosignature key (algorithm 0x04); give the "
                             f"witness's PREFIX.witness.vkey.")
    if log.alg != notes.ALG_ED25519:
        raise ProofError(f"Log key {log.name} is not a note signing key (algorithm 0x01); give the log's "
                         f"PREFIX.vkey.")
    opened = notes.open_note(data, [log, *witness_list])
    if opened.signed_by(log) is None:
        raise ProofError(f"The checkpoint is not signed by the log key {log.name}+{log.key_id:08x}.")
    checkpoint = Checkpoint.parse(opened.text)
    want = log.name if origin is None else origin
    if checkpoint.origin != want:
        raise ProofError(f"The checkpoint is for the log {checkpoint.origin!r}, not {want!r}.")
    cosigs = []
    for v, sig in opened.verified:
        if v.alg == notes.ALG_COSIGNATURE_V1:
            assert sig.timestamp is not None  # a verified cosignature is 72 bytes
            cosigs.append(Cosignature(v, sig.timestamp, sig.line))
    missing = [w for w in require_witnesses if not any(c.witness == w for c in cosigs)]
    if missing:
        raise ProofError("The checkpoint is not cosigned by the witness " +
                         ", ".join(f"{w.name}+{w.key_id:08x}" for w in missing) + ".")
    return VerifiedCheckpoint(checkpoint, log, cosigs, opened.unverified)
