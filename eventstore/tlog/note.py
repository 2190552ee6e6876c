"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys, and tlog-cosignature v1 (c2sp.org/
tlog-cosignature): timestamped Ed25519 witness cosignatures.

A note is UTF-8 text ending in a newline, a blank line, then one or more signature lines
``— NAME base64(4-byte key id || signature)``.  Keys are written as *verifier keys*
(``vkey``), the text format of Go's ``golang.org/x/mod/sumdb/note``::

    NAME+<8 hex digits: key id>+<base64(algorithm byte || 32-byte Ed25519 public key)>

with ``key id = SHA-256(NAME || 0x0A || algorithm || public key)[:4]`` (big-endian).  Algorithm
0x01 signs the note text itself; algorithm 0x04 (a cosignature) signs
``"cosignature/v1\\ntime <T>\\n" || text`` and its signature is ``u64 T || 64-byte Ed25519 signature``.

Opening a note follows the spec: signatures by keys the caller does not know are ignored (even
if they share a name or an id with a known one), a known key's signature must verify, and at
least one must.  Example::

    >>> signer = NoteSigner.generate("example.com/log")
    >>> text = sign_note("hello\\n", [signer])
    >>> open_note(text, [signer.verifier]).text
    'hello\\n'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eventstore.errors import EvstoreError, ProofError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "ALG_COSIGNATURE_V1", "ALG_ED25519", "MAX_SIGNATURES", "NoteSignature", "NoteSigner", "NoteVerifier",
    "OpenedNote", "check_key_name", "cosignature_message", "key_id", "open_note", "parse_note",
    "read_verifier_key", "sign_note",
]

ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
_ALG_NAMES = {ALG_ED25519: "Ed25519", ALG_COSIGNATURE_V1: "Ed25519 cosignature (tlog-cosignature v1)"}
#: The spec asks verifiers to accept at least 16; Go's reference accepts 100 and rejects more.
MAX_SIGNATURES = 100
_DASH = "\u2014 "


def _b64decode(text: str, what: str) -> bytes:
    """Strict standard base64 (RFC 4648 §4): padding required, no other characters."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise ProofError(f"{what} is not standard base64 ({exc}).") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise ProofError(f"{what} is not canonical base64.")
    return raw


def check_key_name(name: str) -> None:
    """Key names are non-empty, with no Unicode space and no ``+`` (signed-note §Format)."""
    if not name or "+" in name or any(c.isspace() for c in name) or any(ord(c) < 0x20 for c in name):
        raise ProofError(f"Key name {name!r} is not valid: a key name is non-empty, without spaces "
                         f"or '+' (e.g. example.com/log).")


def key_id(name: str, alg: int, public: bytes) -> int:
    """``SHA-256(name || 0x0A || alg || public)[:4]`` as a big-endian uint32."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([alg]) + public).digest()
    return int.from_bytes(digest[:4], "big")


def cosignature_message(timestamp: int, body: str) -> bytes:
    """The message a tlog-cosignature v1 signs: ``cosignature/v1\\ntime <T>\\n`` then the checkpoint body."""
    return f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode("utf-8")


@dataclass(frozen=True)
class NoteVerifier:
    """A verifier key: name, algorithm (0x01 note signature, 0x04 cosignature) and Ed25519 public key."""

    name: str
    alg: int
    public: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if self.alg not in _ALG_NAMES:
            raise ProofError(f"Key {self.name}: signature algorithm 0x{self.alg:02x} is not supported "
                             f"(0x01 Ed25519, 0x04 Ed25519 cosignature).")
        if len(self.public) != 32:
            raise ProofError(f"Key {self.name}: an Ed25519 public key is 32 bytes, not {len(self.public)}.")

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.alg, self.public)

    @property
    def vkey(self) -> str:
        """The key as text: ``NAME+<key id hex>+<base64(alg || public key)>``."""
        return f"{self.name}+{self.key_id:08x}+{base64.b64encode(bytes([self.alg]) + self.public).decode()}"

    @classmethod
    def parse(cls, vkey: str) -> NoteVerifier:
        """Read a verifier key; raises :class:`ProofError` saying what is wrong with it."""
        vkey = vkey.strip()
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise ProofError(f"{vkey[:80]!r} is not a verifier key NAME+KEYID+KEY (three parts joined by '+').")
        name, hex_id, data = parts
        if len(hex_id) != 8 or any(c not in "0123456789abcdef" for c in hex_id):
            raise ProofError(f"Verifier key {name}: the key id {hex_id!r} is not 8 lowercase hex digits.")
        raw = _b64decode(data, f"Verifier key {name}'s key")
        if not raw:
            raise ProofError(f"Verifier key {name} has no key data.")
        verifier = cls(name, raw[0], raw[1:])
        if verifier.key_id != int(hex_id, 16):
            raise ProofError(f"Verifier key {name}: key id {hex_id} does not match its key "
                             f"(expected {verifier.key_id:08x}); the key text was altered.")
        return verifier

    def _verify_ed25519(self, message: bytes, sig: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(sig, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def verify(self, text: str, sig: bytes) -> bool:
        """Whether ``sig`` (the signature bytes after the key id) signs the note ``text``."""
        if self.alg == ALG_ED25519:
            return len(sig) == 64 and self._verify_ed25519(text.encode("utf-8"), sig)
        if len(sig) != 72:
            return False
        (timestamp,) = struct.unpack(">Q", sig[:8])
        return timestamp < 1 << 63 and self._verify_ed25519(cosignature_message(timestamp, text), sig[8:])


class NoteSigner:
    """An Ed25519 private key with a key name: signs notes (alg 0x01) or cosigns checkpoints (0x04)."""

    def __init__(self, name: str, key: Ed25519PrivateKey, alg: int = ALG_ED25519) -> None:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self._key = key
        self.verifier = NoteVerifier(name, alg, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        self.name, self.alg, self.key_id = name, alg, self.verifier.key_id

    @classmethod
    def generate(cls, name: str, alg: int = ALG_ED25519) -> NoteSigner:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(name, Ed25519PrivateKey.generate(), alg)

    @classmethod
    def from_key_file(cls, path: Path, name: str, alg: int = ALG_ED25519) -> NoteSigner:
        """The Ed25519 private key of ``evstore keygen`` (PEM) under the key name ``name``."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            key = load_pem_private_key(path.read_bytes(), password=None)
        except OSError as exc:
            raise EvstoreError(f"Cannot read the private key {path}: {exc.strerror}.") from exc
        except (ValueError, TypeError) as exc:
            raise EvstoreError(f"{path} is not an unencrypted PEM private key ({exc}).") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise EvstoreError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key.")
        return cls(name, key, alg)

    @classmethod
    def from_skey(cls, skey: str) -> NoteSigner:
        """Go's signer-key text ``PRIVATE+KEY+NAME+<key id>+<base64(alg || 32-byte seed)>``."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        parts = skey.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise ProofError("Not a signer key PRIVATE+KEY+NAME+KEYID+KEY.")
        raw = _b64decode(parts[4], "The signer key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise ProofError("The signer key is not an Ed25519 seed (algorithm 0x01, 32 bytes).")
        signer = cls(parts[2], Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if f"{signer.key_id:08x}" != parts[3]:
            raise ProofError(f"The signer key's id {parts[3]} does not match its key.")
        return signer

    def sign(self, text: str, *, timestamp: int | None = None) -> bytes:
        """The signature bytes (after the key id) over note ``text``; a cosigner stamps ``timestamp``
        (POSIX seconds, default now)."""
        if self.alg == ALG_ED25519:
            return self._key.sign(text.encode("utf-8"))
        t = int(time.time()) if timestamp is None else timestamp
        return struct.pack(">Q", t) + self._key.sign(cosignature_message(t, text))

    def signature_line(self, text: str, *, timestamp: int | None = None) -> str:
        """``— NAME base64(key id || signature)\\n``."""
        sig = NoteSignature(self.name, self.key_id, self.sign(text, timestamp=timestamp))
        return sig.line


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, key id, and the signature bytes after the key id."""

    name: str
    key_id: int
    signature: bytes

    @property
    def line(self) -> str:
        data = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode()
        return f"{_DASH}{self.name} {data}\n"

    @property
    def timestamp(self) -> int | None:
        """A cosignature's timestamp (first 8 bytes), or None when the signature is too short."""
        return struct.unpack(">Q", self.signature[:8])[0] if len(self.signature) >= 8 else None

    @classmethod
    def parse_line(cls, line: str) -> NoteSignature:
        """Parse ``— NAME base64`` (without the newline)."""
        if not line.startswith(_DASH):
            raise ProofError(f"Signature line {line[:60]!r} does not start with an em dash and a space.")
        name, sep, data = line[len(_DASH):].partition(" ")
        if not sep or " " in data:
            raise ProofError(f"Signature line {line[:60]!r} is not '— NAME SIGNATURE'.")
        check_key_name(name)
        raw = _b64decode(data, f"The signature of {name}")
        if len(raw) < 5:
            raise ProofError(f"The signature of {name} is {len(raw)} bytes: too short for a key id and a signature.")
        return cls(name, int.from_bytes(raw[:4], "big"), raw[4:])


@dataclass(frozen=True)
class OpenedNote:
    """A note whose signatures were checked: ``verified`` pairs each known key with its signature
    (one per key), ``unverified`` are the lines of unknown keys (ignored, kept to pass on)."""

    text: str
    verified: list[tuple[NoteVerifier, NoteSignature]] = field(default_factory=list)
    unverified: list[NoteSignature] = field(default_factory=list)

    def signed_by(self, verifier: NoteVerifier) -> NoteSignature | None:
        return next((s for v, s in self.verified if v == verifier), None)


def parse_note(data: str | bytes) -> tuple[str, list[NoteSignature]]:
    """Split a signed note into its text (with its final newline) and its signature lines, checking
    the syntax of signed-note §Format; raises :class:`ProofError` for a malformed note."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProofError(f"The note is not valid UTF-8 (byte {exc.start}).") from exc
    bad = next((i for i, c in enumerate(data) if ord(c) < 0x20 and c != "\n"), None)
    if bad is not None:
        raise ProofError(f"The note holds a control character (U+{ord(data[bad]):04X}) at offset {bad}; "
                         f"a note is text with newlines only.")
    if not data.endswith("\n"):
        raise ProofError("The note does not end with a newline (it is cut short).")
    split = data.rfind("\n\n")
    if split < 0:
        raise ProofError("The note has no blank line before its signatures (is it signed?).")
    text, lines = data[:split + 1], data[split + 2:].split("\n")[:-1]
    if not lines:
        raise ProofError("The note has no signature lines after its blank line.")
    if len(lines) > MAX_SIGNATURES:
        raise ProofError(f"The note has {len(lines)} signatures, more than the {MAX_SIGNATURES} accepted.")
    return text, [NoteSignature.parse_line(line) for line in lines]


def open_note(data: str | bytes, verifiers: Iterable[NoteVerifier]) -> OpenedNote:
    """Parse ``data`` and check its signatures against ``verifiers`` (signed-note §Signatures):
    a signature whose (name, key id) no verifier has is ignored; one that a verifier has must
    verify (else :class:`ProofError` naming the key); at least one must verify."""
    text, sigs = parse_note(data)
    known: dict[tuple[str, int], NoteVerifier] = {}
    for v in verifiers:
        known.setdefault((v.name, v.key_id), v)
    opened = OpenedNote(text)
    seen: set[tuple[str, int]] = set()
    for sig in sigs:
        ident = (sig.name, sig.key_id)
        verifier = known.get(ident)
        if verifier is None:
            opened.unverified.append(sig)
            continue
        if not verifier.verify(text, sig.signature):
            raise ProofError(f"The signature of {sig.name} (key id {sig.key_id:08x}) does not verify: the "
                             f"note was altered after signing, or the signature is forged.")
        if ident not in seen:
            seen.add(ident)
            opened.verified.append((verifier, sig))
    if not opened.verified:
        names = ", ".join(f"{s.name}+{s.key_id:08x}" for s in sigs)
        wanted = ", ".join(f"{n}+{i:08x}" for n, i in known) or "none"
        raise ProofError(f"No signature on the note is by a known key (signed by {names}; known: {wanted}); "
                         f"check that you gave the log's verifier key.")
    return opened


def sign_note(text: str, signers: Sequence[NoteSigner], *, keep: Sequence[NoteSignature] = (),
              timestamp: int | None = None) -> str:
    """The signed note: ``text``, a blank line, the signature lines of ``keep`` (existing
    signatures by other keys) and then one per signer."""
    if not text.endswith("\n"):
        raise ProofError("A note's text must end with a newline.")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise ProofError("A note's text may not hold control characters other than newlines.")
    ours = {(s.name, s.key_id) for s in signers}
    lines = [s.line for s in keep if (s.name, s.key_id) not in ours]
    lines += [s.signature_line(text, timestamp=timestamp) for s in signers]
    if not lines:
        raise ProofError("A signed note needs at least one signature.")
    return text + "\n" + "".join(lines)


def read_verifier_key(path: Path) -> NoteVerifier:
    """A verifier key from a file (``PREFIX.vkey`` or ``PREFIX.witness.vkey`` of ``evstore keygen``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvstoreError(f"Cannot read the verifier key {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError as exc:
        raise EvstoreError(f"{path} is not a verifier key (not UTF-8 text).") from exc
    try:
        return NoteVerifier.parse(text)
    except ProofError as exc:
        raise ProofError(f"{path}: {exc}") from exc
