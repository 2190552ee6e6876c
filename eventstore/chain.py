"""Per-stream hash chains, Merkle roots over stream heads, the global order digest, seal
signatures (HMAC-SHA256 or Ed25519 through ``cryptography``).

``hash = SHA-256(DOMAIN || prev_hash || data_sha || meta_sha || header)`` where
``header`` is the canonical JSON array ``[stream_id, version, event_id, type, schema_version,
occurred_at, recorded_at]`` (the three digests are fixed-width, so the framing is unambiguous).  The chain commits to the digests of data and meta (stored per
row), so an audited redaction can replace a value without breaking the rest of the chain.

The payload digests are *salted* (:func:`payload_digest`): ``data_sha = SHA-256(salt || data)`` and
``meta_sha = SHA-256(salt || meta)`` with a random 16-byte ``salt`` per event (``events.salt``,
migration 0010), which an erasure destroys together with the payload.  A plain SHA-256 of an erased
value would let anyone holding the database (or an export of the chain hashes) confirm a guess of it
(a short password, an email address); with the salt gone, the digest and the chain hash only show that
*something* was committed to.  Events stored before revision 0010 have no salt (``NULL``): their
digests are the plain SHA-256 of data and meta, and stay so (the chain commits to them).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from eventstore.errors import EvstoreError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

DOMAIN = b"evstore.event.v1\x00"
GENESIS = bytes(32)
_enc = msgspec.json.Encoder()
#: The chain's hash function (the append loop calls it inline; :func:`digest` wraps it).
sha256 = _sha = hashlib.sha256


def digest(data: bytes) -> bytes:
    return _sha(data).digest()


#: Bytes of an event's salt (``events.salt``): 128 random bits, never guessed.
SALT_BYTES = 16


def salts(n: int) -> bytes:
    """Salt for ``n`` events, ``SALT_BYTES`` each, in one ``os.urandom`` call (the append slices it)."""
    return os.urandom(SALT_BYTES * n)


def payload_digest(payload: bytes, salt: bytes | None) -> bytes:
    """The digest the chain commits to for an event's data or meta: ``SHA-256(salt || payload)``, or
    the plain ``SHA-256(payload)`` of an event stored before salts (``salt`` None)."""
    return _sha(payload if salt is None else bytes(salt) + payload).digest()


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def parse_digest(name: object) -> bytes | None:
    """The raw SHA-256 a blob name stands for, if it is one as ``hexdigest()`` writes it (64 lowercase
    hex digits); ``None`` for anything else.  The one rule for blob names: ``meta.blobs``, the
    ``blobs`` of an append, ``read_blob`` and ``verify``."""
    return bytes.fromhex(name) if isinstance(name, str) and _HEX_DIGEST.fullmatch(name) else None


def event_hash(
    prev_hash: bytes,
    stream_id: str,
    version: int,
    event_id: str,
    type_: str,
    schema_version: int,
    occurred_at: str | None,
    recorded_at: str,
    data_sha: bytes,
    meta_sha: bytes,
) -> bytes:
    header = _enc.encode((stream_id, version, event_id, type_, schema_version, occurred_at, recorded_at))
    return _sha(DOMAIN + prev_hash + data_sha + meta_sha + header).digest()


def merkle_root(leaves: list[bytes]) -> bytes:
    """Binary Merkle tree (RFC 6962 style leaf/node prefixes) over ``leaves``."""
    if not leaves:
        return _sha(b"").digest()
    level = [_sha(b"\x00" + leaf).digest() for leaf in leaves]
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            if i + 1 < len(level):
                nxt.append(_sha(b"\x01" + level[i] + level[i + 1]).digest())
            else:
                nxt.append(level[i])
        level = nxt
    return level[0]


def head_leaf(stream_id: str, version: int, head_hash: bytes) -> bytes:
    return _enc.encode((stream_id, version, head_hash.hex()))


#: The event columns :func:`event_hash` commits to, by parameter (``tests/test_tamper.py`` tampers
#: with each one; a field hashed without a tamper case fails that test).
HASHED_FIELDS = {
    "prev_hash": "events.prev_hash",
    "stream_id": "streams.stream_id",
    "version": "events.version",
    "event_id": "events.event_id",
    "type_": "events.type",
    "schema_version": "events.schema_version",
    "occurred_at": "events.occurred_at",
    "recorded_at": "events.recorded_at",
    "data_sha": "events.data_sha256",
    "meta_sha": "events.meta_sha256",
}

# ------------------------------------------------------------------ the global order

ORDER_DOMAIN = b"evstore.order.v1\x00"


def order_entry(position: int, stream_id: str, version: int, event_hash: bytes) -> bytes:
    """One event's contribution to a seal's running order digest (a JSON array: self-delimiting)."""
    return _enc.encode((position, stream_id, version, event_hash.hex()))


# ------------------------------------------------------------------ signing seals


def canonical(payload: dict[str, Any]) -> bytes:
    """The bytes a v2 seal signs: sorted keys, no whitespace (key order in the file is free)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def legacy_encoding(payload: dict[str, Any]) -> bytes:
    """The bytes a v1 seal signed (keys in file order)."""
    return _enc.encode(payload)


class Signer(Protocol):
    algorithm: str
    key_id: str

    def sign(self, message: bytes) -> str: ...


class Verifier(Protocol):
    algorithm: str

    def verify(self, message: bytes, signature: str) -> bool: ...


class HmacKey:
    """A shared secret: signs and verifies (HMAC-SHA256); whoever checks can also forge."""

    algorithm = "hmac-sha256"
    key_id = ""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def sign(self, message: bytes) -> str:
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, message: bytes, signature: str) -> bool:
        return hmac.compare_digest(self.sign(message).encode(), signature.encode("utf-8", "replace"))


def _key_id(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return _sha(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


class Ed25519Signer:
    """An Ed25519 private key: only its holder signs; an auditor needs only the public key."""

    algorithm = "ed25519"

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.key_id = _key_id(key.public_key())

    def sign(self, message: bytes) -> str:
        return self._key.sign(message).hex()


class Ed25519Verifier:
    algorithm = "ed25519"

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self.key_id = _key_id(key)

    def verify(self, message: bytes, signature: str) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._key.verify(bytes.fromhex(signature), message)
        except (InvalidSignature, ValueError):
            return False
        return True


def _read_key(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EvstoreError(f"Cannot read the {what} {path}: {exc.strerror}.") from exc


def load_private_key(path: Path) -> Ed25519Signer:
    """An Ed25519 private key from a PEM file (``evstore keygen`` writes one)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(_read_key(path, "private key"), password=None)
    except (ValueError, TypeError) as exc:
        raise EvstoreError(f"{path} is not an unencrypted PEM private key ({exc}).") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise EvstoreError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key.")
    return Ed25519Signer(key)


def load_public_key(path: Path) -> Ed25519Verifier:
    """An Ed25519 public key from a PEM file (``PREFIX.pub`` of ``evstore keygen``)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(_read_key(path, "public key"))
    except (ValueError, TypeError) as exc:
        raise EvstoreError(f"{path} is not a PEM public key ({exc}).") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise EvstoreError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key.")
    return Ed25519Verifier(key)


def generate_keypair(prefix: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair: ``PREFIX.key`` (private, PKCS#8 PEM, mode 0600, created with
    that mode: never readable by others, even briefly) and ``PREFIX.pub``; refuses to overwrite."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    public = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    key_path, pub_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for p in (key_path, pub_path):
        if p.exists():
            raise EvstoreError(f"{p} exists; keygen never overwrites a key (choose another --out).")
    written: list[Path] = []
    try:
        for p, data, mode in ((key_path, private, 0o600), (pub_path, public, 0o644)):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(p)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(p, mode)  # the umask may have narrowed it; never widened beyond ``mode``
    except OSError as exc:
        for p in written:  # nothing half-written
            p.unlink(missing_ok=True)
        raise EvstoreError(f"Cannot write {exc.filename or prefix}: {exc.strerror}.") from exc
    return key_path, pub_path
