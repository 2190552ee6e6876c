"""The hash chain's primitives against formulas written out here (hashlib, hmac, json), and the
key files' error messages: what mutation testing showed no other test pinned down."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from eventstore import chain
from eventstore.errors import EvstoreError


def sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def test_event_hash_is_the_documented_formula() -> None:
    prev, data_sha, meta_sha = bytes(range(32)), sha(b'{"a":1}'), sha(b"{}")
    header = json.dumps(["S-1", 7, "e-1", "t.x", 2, "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"],
                        separators=(",", ":")).encode()
    want = sha(b"evstore.event.v1\x00" + prev + data_sha + meta_sha + header)
    got = chain.event_hash(prev, "S-1", 7, "e-1", "t.x", 2, "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z",
                           data_sha, meta_sha)
    assert got == want
    # occurred_at may be absent: JSON null in the header
    header = json.dumps(["S-1", 7, "e-1", "t.x", 2, None, "r"], separators=(",", ":")).encode()
    assert chain.event_hash(prev, "S-1", 7, "e-1", "t.x", 2, None, "r", data_sha, meta_sha) == \
        sha(b"evstore.event.v1\x00" + prev + data_sha + meta_sha + header)
    assert chain.digest(b"abc") == sha(b"abc") and chain.GENESIS == b"\x00" * 32


def _merkle(leaves: list[bytes]) -> bytes:
    """RFC 6962 leaf/node prefixes; an odd node is carried up unchanged."""
    level = [sha(b"\x00" + x) for x in leaves]
    while len(level) > 1:
        level = [sha(b"\x01" + level[i] + level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_merkle_root(n: int) -> None:
    leaves = [bytes([i]) * (i + 1) for i in range(n)]
    assert chain.merkle_root(leaves) == _merkle(leaves)


def test_merkle_root_of_nothing_and_small_trees_spelled_out() -> None:
    assert chain.merkle_root([]) == sha(b"")
    a, b, c = b"a", b"b", b"c"
    assert chain.merkle_root([a]) == sha(b"\x00a")
    assert chain.merkle_root([a, b]) == sha(b"\x01" + sha(b"\x00a") + sha(b"\x00b"))
    assert chain.merkle_root([a, b, c]) == sha(b"\x01" + sha(b"\x01" + sha(b"\x00a") + sha(b"\x00b")) + sha(b"\x00c"))


def test_leaf_and_order_encodings() -> None:
    h = bytes([0xAB]) * 32
    assert chain.head_leaf("S", 3, h) == b'["S",3,"' + b"ab" * 32 + b'"]'
    assert chain.order_entry(12, "S", 3, h) == b'[12,"S",3,"' + b"ab" * 32 + b'"]'
    payload = {"b": 1, "a": "é"}
    assert chain.canonical(payload) == '{"a":"é","b":1}'.encode()  # sorted, compact, UTF-8
    assert chain.legacy_encoding(payload) == '{"b":1,"a":"é"}'.encode()  # file order


def test_hmac_key_signs_and_verifies() -> None:
    key = chain.HmacKey(b"secret")
    assert (key.algorithm, key.key_id) == ("hmac-sha256", "")
    sig = key.sign(b"message")
    assert sig == hmac.new(b"secret", b"message", hashlib.sha256).hexdigest()
    assert key.verify(b"message", sig)
    assert not key.verify(b"message!", sig) and not key.verify(b"message", "é" * 64)
    assert not key.verify(b"message", "\ud800" * 64)  # a lone surrogate is a wrong signature, not a crash
    assert not chain.HmacKey(b"other").verify(b"message", sig)


def test_ed25519_keys_sign_verify_and_name_themselves(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key_path, pub_path = chain.generate_keypair(tmp_path / "k")
    assert (key_path.name, pub_path.name) == ("k.key", "k.pub")
    assert (os.stat(key_path).st_mode & 0o777, os.stat(pub_path).st_mode & 0o777) == (0o600, 0o644)
    signer, verifier = chain.load_private_key(key_path), chain.load_public_key(pub_path)
    raw = verifier._key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert signer.key_id == verifier.key_id == hashlib.sha256(raw).hexdigest()[:16]
    assert signer.algorithm == verifier.algorithm == "ed25519"
    sig = signer.sign(b"message")
    assert len(bytes.fromhex(sig)) == 64 and verifier.verify(b"message", sig)
    assert not verifier.verify(b"other", sig)
    assert not verifier.verify(b"message", "zz")  # not hex: refused, not an exception
    with pytest.raises(EvstoreError, match=r"k\.key exists; keygen never overwrites a key"):
        chain.generate_keypair(tmp_path / "k")


def test_key_files_errors_name_the_file_and_the_problem(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    missing = tmp_path / "none.key"
    with pytest.raises(EvstoreError) as info:
        chain.load_private_key(missing)
    assert str(info.value) == f"Cannot read the private key {missing}: No such file or directory."
    with pytest.raises(EvstoreError) as info:
        chain.load_public_key(missing)
    assert str(info.value) == f"Cannot read the public key {missing}: No such file or directory."
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(EvstoreError, match=rf"^{junk} is not an unencrypted PEM private key \("):
        chain.load_private_key(junk)
    with pytest.raises(EvstoreError, match=rf"^{junk} is not a PEM public key \("):
        chain.load_public_key(junk)
    other = ec.generate_private_key(ec.SECP256R1())
    ec_key, ec_pub = tmp_path / "ec.key", tmp_path / "ec.pub"
    ec_key.write_bytes(other.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    ec_pub.write_bytes(other.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(EvstoreError) as info:
        chain.load_private_key(ec_key)
    assert str(info.value) == f"{ec_key} holds a {type(other).__name__}, not an Ed25519 private key."
    with pytest.raises(EvstoreError) as info:
        chain.load_public_key(ec_pub)
    assert str(info.value) == f"{ec_pub} holds a {type(other.public_key()).__name__}, not an Ed25519 public key."


def test_keygen_into_a_missing_folder_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(EvstoreError) as info:
        chain.generate_keypair(tmp_path / "absent" / "k")
    assert str(info.value) == f"Cannot write {tmp_path / 'absent' / 'k.key'}: No such file or directory."
    assert not (tmp_path / "absent").exists()


def test_keygen_creates_the_private_key_with_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Created 0600, not chmod-ed after writing: with a permissive umask and chmod disabled, the
    private key is still never readable by others."""
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)
    old = os.umask(0)
    try:
        key_path, pub_path = chain.generate_keypair(tmp_path / "k")
    finally:
        os.umask(old)
    assert (os.stat(key_path).st_mode & 0o777, os.stat(pub_path).st_mode & 0o777) == (0o600, 0o644)


def test_keygen_failing_half_way_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open, calls = os.open, []

    def second_open_fails(path: object, *args: object) -> int:
        calls.append(path)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", second_open_fails)
    with pytest.raises(EvstoreError) as info:
        chain.generate_keypair(tmp_path / "k")
    assert str(info.value) == f"Cannot write {tmp_path / 'k.pub'}: Permission denied."
    assert list(tmp_path.iterdir()) == []  # the private key written first was removed
