"""C2SP signed-note, tlog-cosignature and tlog-checkpoint against the vectors others published.

- signed-note: Go's golang.org/x/mod/sumdb/note test vectors (the PeterNeumann and EnochRoot keys,
  the signer key and the exact signed note it must produce), which that package's own tests hold.
- tlog-cosignature: transparency-dev/formats' native cosignature v1 verifier key (remora.n621.de)
  and its timestamp vector; the C2SP checkpoint example of tlog-checkpoint.md.
Interoperability with a running Go implementation is in tests/test_tlog_interop.py.
"""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.errors import ProofError
from eventstore.tlog import note as n
from eventstore.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from eventstore.tlog.merkle import EMPTY_ROOT

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE"
             "6RyyBwJnAM=\n")
ENOCH_SIG = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1R"
             "vMc+QQ=\n")


def test_verifier_key_vector_and_manglings() -> None:
    v = n.NoteVerifier.parse(PETER_VKEY)
    assert (v.name, v.alg, v.key_id) == ("PeterNeumann", n.ALG_ED25519, 0xc74f20a3)
    assert v.vkey == PETER_VKEY
    bad = [PETER_VKEY[:-1], PETER_VKEY[1:], PETER_VKEY.replace("c74f20a3", "c74f20a4"),
           "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",  # wrong length
           "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm
           "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"]
    bad += [PETER_VKEY[:i] + chr(ord(PETER_VKEY[i]) + 1) + PETER_VKEY[i + 1:] for i in range(len(PETER_VKEY))]
    for text in bad:
        with pytest.raises(ProofError):
            n.NoteVerifier.parse(text)


def test_cosignature_key_vector() -> None:
    """A native tlog-cosignature v1 (0x04) verifier key published by transparency-dev/formats."""
    v = n.NoteVerifier.parse("remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2")
    assert v.alg == n.ALG_COSIGNATURE_V1
    sig = base64.b64decode("ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBY"
                           "JXORmnFBOBA==")
    assert n.NoteSignature("w", int.from_bytes(sig[:4], "big"), sig[4:]).timestamp == 1727964367


def test_sign_reproduces_go_vector() -> None:
    signer = n.NoteSigner.from_skey(PETER_SKEY)
    assert signer.verifier.vkey == PETER_VKEY
    assert n.sign_note(TEXT, [signer]) == TEXT + "\n" + PETER_SIG  # Ed25519 is deterministic
    # an existing signature by the same key is replaced, others kept
    stale = n.NoteSignature("PeterNeumann", 0xc74f20a3, b"BADSIGN")
    enoch = n.NoteSignature.parse_line(ENOCH_SIG[:-1])
    assert n.sign_note(TEXT, [signer], keep=[stale, enoch]) == TEXT + "\n" + ENOCH_SIG + PETER_SIG


def test_open_vectors() -> None:
    peter, enoch = n.NoteVerifier.parse(PETER_VKEY), n.NoteVerifier.parse(ENOCH_VKEY)
    both = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    opened = n.open_note(both, [peter])
    assert opened.text == TEXT
    assert [v for v, _ in opened.verified] == [peter]
    assert [s.name for s in opened.unverified] == ["EnochRoot"]  # unknown keys are ignored
    assert len(n.open_note(both, [peter, enoch]).verified) == 2
    with pytest.raises(ProofError, match="No signature on the note is by a known key"):
        n.open_note(both, [])
    with pytest.raises(ProofError, match="PeterNeumann .*does not verify"):
        n.open_note(TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:], [peter])
    with pytest.raises(ProofError, match="does not verify"):
        n.open_note(TEXT.replace("cryptography", "cryptographY") + "\n" + PETER_SIG, [peter])
    # a key sharing the name (but not the id) of a known key is unknown, not a failure
    same_name = n.NoteSigner.generate("PeterNeumann")
    opened = n.open_note(TEXT + "\n" + same_name.signature_line(TEXT) + PETER_SIG, [peter])
    assert len(opened.unverified) == 1 and len(opened.verified) == 1
    # duplicates: one verified entry per key
    assert len(n.open_note(TEXT + "\n" + PETER_SIG + PETER_SIG, [peter]).verified) == 1
    with pytest.raises(ProofError, match="more than"):
        n.open_note(TEXT + "\n" + PETER_SIG * 101, [peter])
    malformed = [
        TEXT, TEXT + "\n", TEXT + "\n" + PETER_SIG[:-1], "\x01" + TEXT + "\n" + PETER_SIG,
        b"\xff" + (TEXT + "\n" + PETER_SIG).encode(),
        TEXT + "\n" + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE"
                      "6RyyBwJnAM=",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ]
    for msg in malformed:
        with pytest.raises(ProofError):
            n.open_note(msg, [peter])


def test_cosignature_signs_the_spec_message() -> None:
    """tlog-cosignature: the signature is u64 timestamp || Ed25519 over
    'cosignature/v1\\ntime T\\n' || body, checked here with the bare Ed25519 key, not our verifier."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    w = n.NoteSigner.generate("witness.example.com/w1", n.ALG_COSIGNATURE_V1)
    sig = w.sign(body, timestamp=1679315147)
    assert struct.unpack(">Q", sig[:8]) == (1679315147,)
    Ed25519PublicKey.from_public_bytes(w.verifier.public).verify(
        sig[8:], b"cosignature/v1\ntime 1679315147\n" + body.encode())
    assert w.verifier.verify(body, sig)
    assert not w.verifier.verify(body + "ext\n", sig)
    # the same key as an ordinary note key has another key id: the lines never mix
    assert n.NoteVerifier(w.name, n.ALG_ED25519, w.verifier.public).key_id != w.key_id


def test_checkpoint_spec_example_and_rules() -> None:
    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    cp = Checkpoint.parse(body)
    assert (cp.origin, cp.size, cp.extensions) == ("example.com/behind-the-sofa", 20852163, ())
    assert cp.body == body
    assert Checkpoint.parse(body + "ext one\n").extensions == ("ext one",)
    for bad in ["", "o\n1\n", "o\n01\n" + body.split("\n")[2] + "\n", "o\n-1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
                "\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n", "o\n1\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I\n",
                "o\n1\nAAAA\n", body + "\n", body.rstrip("\n"), "o\n１\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"]:
        with pytest.raises(ProofError):
            Checkpoint.parse(bad)
    assert Checkpoint.parse(f"o\n0\n{base64.b64encode(EMPTY_ROOT).decode()}\n").size == 0


def test_open_checkpoint_with_cosignatures() -> None:
    log = n.NoteSigner.generate("evstore.example/log")
    w1 = n.NoteSigner.generate("w1.example", n.ALG_COSIGNATURE_V1)
    w2 = n.NoteSigner.generate("w2.example", n.ALG_COSIGNATURE_V1)
    cp = Checkpoint("evstore.example/log", 3, EMPTY_ROOT)
    signed = sign_checkpoint(cp, log) + w1.signature_line(cp.body, timestamp=1700000000)
    got = open_checkpoint(signed, log.verifier, witnesses=[w1.verifier, w2.verifier])
    assert got.checkpoint == cp
    assert [(c.witness.name, c.timestamp) for c in got.cosignatures] == [("w1.example", 1700000000)]
    with pytest.raises(ProofError, match="not cosigned by the witness w2.example"):
        open_checkpoint(signed, log.verifier, require_witnesses=[w2.verifier])
    with pytest.raises(ProofError, match="not signed by the log key"):
        open_checkpoint(sign_checkpoint(cp, w1), log.verifier, witnesses=[w1.verifier])
    with pytest.raises(ProofError, match="not 'other'"):
        open_checkpoint(signed, log.verifier, origin="other")
    forged = signed.replace("\n3\n", "\n4\n")
    with pytest.raises(ProofError, match="does not verify"):
        open_checkpoint(forged, log.verifier)
    with pytest.raises(ProofError, match="algorithm 0x04"):
        open_checkpoint(signed, log.verifier, witnesses=[log.verifier])


def test_the_documented_checkpoint_opens() -> None:
    """docs/proofs.md shows a signed, cosigned checkpoint and its keys: they are real."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "proofs.md").read_text()
    blocks = re.findall(r"^```\n(.*?)^```", page, flags=re.M | re.S)
    vkey = next(b for b in blocks if b.startswith("evstore.example/log+")).strip()
    note = next(b for b in blocks if b.startswith("evstore.example/log\n1000\n"))
    witness = re.search(r"`(witness\.example/w1\+[0-9a-f]{8}\+\S+)`", page)
    assert witness is not None
    got = open_checkpoint(note, n.NoteVerifier.parse(vkey), require_witnesses=[n.NoteVerifier.parse(witness[1])])
    assert (got.checkpoint.size, got.cosignatures[0].timestamp) == (1000, 1764763200)


_SIGNER = n.NoteSigner.from_skey(PETER_SKEY)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_signed_notes_round_trip_and_reject_edits(text: str) -> None:
    """Any text that is a valid note text signs and opens back to itself; flipping one character
    of it fails verification (or makes the note malformed), never anything but ProofError."""
    text = "".join(c for c in text if c == "\n" or ord(c) >= 0x20) + "\n"
    signed = n.sign_note(text, [_SIGNER])
    assert n.open_note(signed, [_SIGNER.verifier]).text == text
    i = len(text) // 2
    edited = text[:i] + ("x" if text[i] != "x" else "y") + text[i + 1:]
    with pytest.raises(ProofError):
        n.open_note(edited + signed[len(text):], [_SIGNER.verifier])


@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_garbage_is_a_proof_error(data: bytes) -> None:
    """Notes, checkpoints and witness requests from anyone: malformed input is a ProofError (a 400
    from the witness), never another exception."""
    from eventstore.tlog.witness import _parse_request

    for parse in (lambda: n.open_note(data, [_SIGNER.verifier]), lambda: Checkpoint.parse(data.decode("utf-8")),
                  lambda: _parse_request(data), lambda: n.NoteVerifier.parse(data.decode("utf-8"))):
        try:
            parse()
        except ProofError:
            pass
        except UnicodeDecodeError:
            pass  # our own .decode above, not the parser's


# Promises of note.py that one-line changes once broke with no other test noticing (issue 33): what is
# accepted is exactly what the specs accept, and what is refused is refused saying what and why.

BODY = "example.com/log\n7\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"


def _raw_cosignature(key, timestamp_bytes: bytes, signed_time: int, body: str = BODY) -> bytes:
    return timestamp_bytes + key.sign(n.cosignature_message(signed_time, body))


def test_a_cosignature_verifies_only_as_eight_timestamp_bytes_and_a_64_byte_signature() -> None:
    w = n.NoteSigner.generate("witness.example/w", n.ALG_COSIGNATURE_V1)
    good = w.sign(BODY, timestamp=1_700_000_000)
    assert len(good) == 72 and w.verifier.verify(BODY, good)
    for sig in (good[:-1], good + b"\x00", good[8:], good[:8], b"\x00", good + good):
        assert not w.verifier.verify(BODY, sig), len(sig)
        line = n.NoteSignature(w.name, w.key_id, sig).line
        with pytest.raises(ProofError, match="does not verify"):
            n.open_note(BODY + "\n" + line, [w.verifier])
    peter = n.NoteSigner.from_skey(PETER_SKEY)  # a note key: exactly 64 bytes
    sig = peter.sign(TEXT)
    assert peter.verifier.verify(TEXT, sig) and not peter.verifier.verify(TEXT, sig + b"\x00")


def test_a_cosignature_timestamp_is_below_2_to_the_63() -> None:
    """tlog-cosignature: the timestamp is a u64 under 2^63; one at or above it is refused, also when the
    Ed25519 signature is over that time, or over the negative number the same 8 bytes read as signed."""
    w = n.NoteSigner.generate("witness.example/w", n.ALG_COSIGNATURE_V1)
    key = w._key
    last = (1 << 63) - 1
    assert w.verifier.verify(BODY, _raw_cosignature(key, struct.pack(">Q", last), last))
    assert w.verifier.verify(BODY, w.sign(BODY, timestamp=0))
    for t in (1 << 63, (1 << 63) + 5, (1 << 64) - 1):
        assert not w.verifier.verify(BODY, _raw_cosignature(key, struct.pack(">Q", t), t)), t
        signed = struct.unpack(">q", struct.pack(">Q", t))[0]  # the same bytes read as a signed number
        assert not w.verifier.verify(BODY, _raw_cosignature(key, struct.pack(">Q", t), signed)), t


def test_sign_note_stamps_the_timestamp_it_is_given() -> None:
    w = n.NoteSigner.generate("witness.example/w", n.ALG_COSIGNATURE_V1)
    opened = n.open_note(n.sign_note(BODY, [w], timestamp=1_234_567), [w.verifier])
    assert opened.verified[0][1].timestamp == 1_234_567


@pytest.mark.parametrize("name", ["", "a b", "a\tb", "a\u3000b", "a\u2028b", "a+b", "+", "a\x01b", "\x00", "a\x1fb"])
def test_a_key_name_with_a_space_a_plus_or_a_control_is_refused(name: str) -> None:
    with pytest.raises(ProofError) as err:
        n.check_key_name(name)
    assert str(err.value) == (f"Key name {name!r} is not valid: a key name is non-empty, without spaces "
                              "or '+' (e.g. example.com/log).")


def test_key_names_the_spec_allows_are_accepted() -> None:
    for name in ("a", "example.com/log", "PeterNeumann", "x!#$%&'()*,-./:;<=>?@[]^_`{|}~", "ünïcode", "a\x7fb"):
        n.check_key_name(name)


def test_a_verifier_key_is_refused_naming_what_is_wrong() -> None:
    public = n.NoteVerifier.parse(PETER_VKEY).public
    with pytest.raises(ProofError) as err:
        n.NoteVerifier("k", 0x02, public)
    assert str(err.value) == "Key k: signature algorithm 0x02 is not supported (0x01 Ed25519, 0x04 Ed25519 cosignature)."
    with pytest.raises(ProofError) as err:
        n.NoteVerifier("k", 0x01, public[:31])
    assert str(err.value) == "Key k: an Ed25519 public key is 32 bytes, not 31."


def test_base64_is_strict_and_its_errors_say_where() -> None:
    """A signature is standard, padded, canonical base64: a character outside the alphabet, missing padding
    or non-zero trailing bits are refused, naming whose signature it was."""
    sig = PETER_SIG[len("\u2014 PeterNeumann "):-1]
    for data in (sig[:10] + "!" + sig[11:], sig[:10] + "\u00e9" + sig[11:], sig[:10] + "\t" + sig[11:], sig.rstrip("=")):
        with pytest.raises(ProofError) as err:
            n.NoteSignature.parse_line("\u2014 PeterNeumann " + data)
        assert str(err.value).startswith("The signature of PeterNeumann is not standard base64 ("), str(err.value)
    with pytest.raises(ProofError) as err:
        n.NoteSignature.parse_line("\u2014 PeterNeumann " + sig[:-2] + "N=")  # non-zero trailing bits
    assert str(err.value) == "The signature of PeterNeumann is not canonical base64."


def test_a_signature_line_is_refused_saying_why() -> None:
    long = "\u2014" + "x" * 100
    with pytest.raises(ProofError) as err:
        n.NoteSignature.parse_line(long)
    assert str(err.value) == f"Signature line {long[:60]!r} does not start with an em dash and a space."
    for line in ("\u2014 PeterNeumann AAAA AAAA", "\u2014 a b " + "c" * 80, "\u2014 PeterNeumann"):
        with pytest.raises(ProofError) as err:
            n.NoteSignature.parse_line(line)
        assert str(err.value) == f"Signature line {line[:60]!r} is not '\u2014 NAME SIGNATURE'.", line


def test_a_signature_holds_a_key_id_and_at_least_one_byte() -> None:
    """Five bytes (key id and one byte) is a signature line (of a key the reader may not know: passed on);
    four is malformed."""
    five = "\u2014 other.example/k " + base64.b64encode(b"\x01\x02\x03\x04\x05").decode()
    parsed = n.NoteSignature.parse_line(five)
    assert (parsed.key_id, parsed.signature) == (0x01020304, b"\x05")
    opened = n.open_note(TEXT + "\n" + PETER_SIG + five + "\n", [n.NoteVerifier.parse(PETER_VKEY)])
    assert [s.name for s in opened.unverified] == ["other.example/k"]
    with pytest.raises(ProofError) as err:
        n.NoteSignature.parse_line("\u2014 k " + base64.b64encode(b"\x01\x02\x03\x04").decode())
    assert str(err.value) == "The signature of k is 4 bytes: too short for a key id and a signature."


def test_a_signer_key_is_refused_saying_why() -> None:
    peter = n.NoteSigner.from_skey(PETER_SKEY)
    data = PETER_SKEY.split("+", 4)[4]
    seed = base64.b64decode(data)
    cases = {
        "PRIVATE+KEY+PeterNeumann+c74f20a3": "Not a signer key PRIVATE+KEY+NAME+KEYID+KEY.",
        PETER_SKEY.replace("PRIVATE+KEY", "PUBLIC+KEY"): "Not a signer key PRIVATE+KEY+NAME+KEYID+KEY.",
        PETER_SKEY[:-4] + "!!!!": "The signer key is not standard base64",
        PETER_SKEY.replace(data, base64.b64encode(b"\x04" + seed[1:]).decode()):
            "The signer key is not an Ed25519 seed (algorithm 0x01, 32 bytes).",
        PETER_SKEY.replace(data, base64.b64encode(seed[:-1]).decode()):
            "The signer key is not an Ed25519 seed (algorithm 0x01, 32 bytes).",
        PETER_SKEY.replace("c74f20a3", "c74f20a4"): "The signer key's id c74f20a4 does not match its key.",
    }
    for skey, message in cases.items():
        with pytest.raises(ProofError) as err:
            n.NoteSigner.from_skey(skey)
        assert str(err.value).startswith(message), (skey, str(err.value))
    assert peter.verifier.vkey == PETER_VKEY


def test_sign_note_refuses_what_is_no_note_saying_why() -> None:
    signer = n.NoteSigner.from_skey(PETER_SKEY)
    for text, message in (("no newline", "A note's text must end with a newline."),
                          ("tab\there\n", "A note's text may not hold control characters other than newlines.")):
        with pytest.raises(ProofError) as err:
            n.sign_note(text, [signer])
        assert str(err.value) == message
    with pytest.raises(ProofError) as err:
        n.sign_note(TEXT, [])
    assert str(err.value) == "A signed note needs at least one signature."


def test_key_files_are_read_or_refused_naming_the_file(tmp_path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    from eventstore.errors import EvstoreError

    pem = tmp_path / "log.pem"
    key = Ed25519PrivateKey.generate()
    pem.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    signer = n.NoteSigner.from_key_file(pem, "example.com/log")
    assert (signer.name, signer.alg) == ("example.com/log", n.ALG_ED25519)
    assert n.open_note(n.sign_note(TEXT, [signer]), [signer.verifier]).text == TEXT
    cosigner = n.NoteSigner.from_key_file(pem, "w.example", n.ALG_COSIGNATURE_V1)
    assert cosigner.alg == n.ALG_COSIGNATURE_V1 and cosigner.verifier.public == signer.verifier.public
    assert n.open_note(n.sign_note(BODY, [cosigner]), [cosigner.verifier]).verified[0][1].timestamp is not None
    vkey = tmp_path / "log.vkey"
    vkey.write_text(signer.verifier.vkey + "\n", encoding="utf-8")
    assert n.read_verifier_key(vkey) == signer.verifier
    uni = n.NoteSigner.from_key_file(pem, "ünï.example/log")
    vkey.write_bytes(uni.verifier.vkey.encode("utf-8"))
    assert n.read_verifier_key(vkey) == uni.verifier

    missing = tmp_path / "none.pem"
    with pytest.raises(EvstoreError) as err:
        n.NoteSigner.from_key_file(missing, "k")
    assert str(err.value) == f"Cannot read the private key {missing}: No such file or directory."
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(EvstoreError) as err:
        n.NoteSigner.from_key_file(garbage, "k")
    assert str(err.value).startswith(f"{garbage} is not an unencrypted PEM private key (")
    ec = tmp_path / "ec.pem"
    ec_key = generate_private_key(SECP256R1())
    ec.write_bytes(ec_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    with pytest.raises(EvstoreError) as err:
        n.NoteSigner.from_key_file(ec, "k")
    assert str(err.value) == f"{ec} holds a {type(ec_key).__name__}, not an Ed25519 private key."
    with pytest.raises(EvstoreError) as err:
        n.read_verifier_key(missing)
    assert str(err.value) == f"Cannot read the verifier key {missing}: No such file or directory."
    garbage.write_bytes(b"\xff\xfe")
    with pytest.raises(EvstoreError) as err:
        n.read_verifier_key(garbage)
    assert str(err.value) == f"{garbage} is not a verifier key (not UTF-8 text)."


def test_a_verifier_key_file_is_read_as_utf8_whatever_the_locale(tmp_path) -> None:
    import locale

    signer = n.NoteSigner.generate("ünï.example/log")
    vkey = tmp_path / "log.vkey"
    vkey.write_bytes(signer.verifier.vkey.encode("utf-8") + b"\n")
    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert n.read_verifier_key(vkey) == signer.verifier
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)


def test_a_verifier_key_text_is_refused_saying_what_is_wrong() -> None:
    name, hex_id, data = PETER_VKEY.split("+", 2)
    long = "x" * 100
    cases = {
        long: f"{long[:80]!r} is not a verifier key NAME+KEYID+KEY (three parts joined by '+').",
        f"{name}+{hex_id}": f"{(name + '+' + hex_id)!r} is not a verifier key NAME+KEYID+KEY (three parts joined by '+').",
        f"{name}+c74f20aX+{data}": f"Verifier key {name}: the key id 'c74f20aX' is not 8 lowercase hex digits.",
        f"{name}+C74F20A3+{data}": f"Verifier key {name}: the key id 'C74F20A3' is not 8 lowercase hex digits.",
        f"{name}+c74f20a+{data}": f"Verifier key {name}: the key id 'c74f20a' is not 8 lowercase hex digits.",
        f"{name}+{hex_id}+{data[:-1]}": f"Verifier key {name}'s key is not standard base64 (",
        f"{name}+{hex_id}+": f"Verifier key {name} has no key data.",
        f"{name}+c74f20a4+{data}": f"Verifier key {name}: key id c74f20a4 does not match its key (expected c74f20a3); "
                                   "the key text was altered.",
    }
    for vkey, message in cases.items():
        with pytest.raises(ProofError) as err:
            n.NoteVerifier.parse(vkey)
        assert str(err.value).startswith(message), (vkey, str(err.value))


def test_a_note_that_is_not_well_formed_is_refused_saying_how() -> None:
    peter = n.NoteVerifier.parse(PETER_VKEY)
    signer = n.NoteSigner.from_skey(PETER_SKEY)
    tabbed = "a\tb\n"  # signed as it is (sign() does not check): refused for its tab, not for a bad signature
    tabbed_note = tabbed + "\n" + n.NoteSignature(signer.name, signer.key_id, signer.sign(tabbed)).line
    cases = [
        (b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), "The note is not valid UTF-8 (byte 0)."),
        (tabbed_note, "The note holds a control character (U+0009) at offset 1; a note is text with newlines only."),
        (TEXT + "\n" + PETER_SIG[:-1], "The note does not end with a newline (it is cut short)."),
        (TEXT, "The note has no blank line before its signatures (is it signed?)."),
        (TEXT + "\n", "The note has no signature lines after its blank line."),
        (TEXT + "\n" + PETER_SIG * 101, "The note has 101 signatures, more than the 100 accepted."),
    ]
    for data, message in cases:
        with pytest.raises(ProofError) as err:
            n.open_note(data, [peter])
        assert str(err.value) == message


def test_a_note_text_may_hold_blank_lines_and_up_to_100_signatures() -> None:
    """The signatures start after the note's last blank line (Go's note.Open: strings.LastIndex); 100
    signature lines are accepted, as Go's reference does."""
    signer = n.NoteSigner.from_skey(PETER_SKEY)
    text = "first\n\nsecond after a blank line\n\n\nthird\n"
    opened = n.open_note(n.sign_note(text, [signer]), [signer.verifier])
    assert opened.text == text
    hundred = TEXT + "\n" + PETER_SIG * 100
    assert len(n.parse_note(hundred)[1]) == 100 and n.open_note(hundred, [signer.verifier]).text == TEXT


def test_a_note_without_a_known_signature_names_who_signed_and_who_was_known() -> None:
    peter, enoch = n.NoteVerifier.parse(PETER_VKEY), n.NoteVerifier.parse(ENOCH_VKEY)
    other = n.NoteSigner.generate("other.example/k").verifier
    third = n.NoteSigner.generate("third.example/k").verifier
    both = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    for known, wanted in (([], "none"), ([other], f"other.example/k+{other.key_id:08x}"),
                          ([other, other], f"other.example/k+{other.key_id:08x}"),
                          ([other, third], f"other.example/k+{other.key_id:08x}, third.example/k+{third.key_id:08x}")):
        with pytest.raises(ProofError) as err:
            n.open_note(both, known)
        assert str(err.value) == ("No signature on the note is by a known key (signed by PeterNeumann+c74f20a3, "
                                  f"EnochRoot+af0cfe78; known: {wanted}); check that you gave the log's verifier key.")
    assert n.open_note(both, [other, peter, enoch]).verified[0][0] == peter
