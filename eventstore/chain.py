"""Per-stream hash chains, Merkle roots over stream heads, HMAC-signed checkpoints.

``hash = SHA-256(DOMAIN || prev_hash || sha256(data) || sha256(meta) || header)`` where
``header`` is the canonical JSON array ``[stream_id, version, event_id, type, schema_version,
occurred_at, recorded_at]`` (the three digests are fixed-width, so the framing is unambiguous).  The chain commits to the digests of data and meta (stored per
row), so an audited redaction can replace a value without breaking the rest of the chain.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import msgspec

DOMAIN = b"evstore.event.v1\x00"
GENESIS = bytes(32)
_enc = msgspec.json.Encoder()
#: The chain's hash function (the append loop calls it inline; :func:`digest` wraps it).
sha256 = _sha = hashlib.sha256


def digest(data: bytes) -> bytes:
    return _sha(data).digest()


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


def sign(payload: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, _enc.encode(payload), hashlib.sha256).hexdigest()


def signature_ok(payload: dict[str, Any], signature: str, key: bytes) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(payload, key).encode(),
                                                              signature.encode("utf-8", "replace"))
