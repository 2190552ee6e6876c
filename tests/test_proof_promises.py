"""The promises of checkpoints and proof files, each stated as a test (issue 33's mutation runs).

- A checkpoint is accepted only in the C2SP tlog-checkpoint format, signed by the trusted log key,
  for the expected origin, and cosigned by every required witness; each refusal says what and where.
- An inclusion or consistency proof verifies only for its exact leaf, sizes and roots.
"""

from __future__ import annotations

import base64

import pytest

from eventstore.errors import ProofError
from eventstore.tlog import merkle
from eventstore.tlog import note as n
from eventstore.tlog.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint

ROOT = bytes(range(32))
ROOT64 = base64.b64encode(ROOT).decode()
LOG = n.NoteSigner.generate("evstore.example/log")
W1 = n.NoteSigner.generate("w1.example", n.ALG_COSIGNATURE_V1)
W2 = n.NoteSigner.generate("w2.example", n.ALG_COSIGNATURE_V1)


# -- Checkpoint: the values a checkpoint may hold ------------------------------------------------------

def test_a_checkpoint_holds_sizes_from_0_to_2_to_the_63_minus_1() -> None:
    assert Checkpoint("o", 0, ROOT).size == 0
    assert Checkpoint("o", (1 << 63) - 1, ROOT).size == (1 << 63) - 1
    for size in (-1, 1 << 63):
        with pytest.raises(ProofError, match=rf"^A checkpoint's tree size must be from 0 to 2\^63 - 1, not {size}\.$"):
            Checkpoint("o", size, ROOT)


def test_a_checkpoint_origin_is_one_non_empty_line() -> None:
    for origin in ("", "a\nb", "\n"):
        with pytest.raises(ProofError, match=r"^A checkpoint's origin must be one non-empty line\.$"):
            Checkpoint(origin, 1, ROOT)
    assert Checkpoint("a b", 1, ROOT).origin == "a b"


def test_a_checkpoint_root_is_exactly_32_bytes() -> None:
    for n_bytes in (0, 31, 33):
        with pytest.raises(ProofError, match=rf"^A checkpoint's root hash is 32 bytes, not {n_bytes}\.$"):
            Checkpoint("o", 1, bytes(n_bytes))


def test_a_checkpoint_extension_is_a_non_empty_single_line() -> None:
    for ext in (("",), ("a", ""), ("a\nb",), ("ok", "x\n")):
        with pytest.raises(ProofError, match=r"^A checkpoint's extension lines must be non-empty single lines\.$"):
            Checkpoint("o", 1, ROOT, ext)
    cp = Checkpoint("o", 1, ROOT, ("e1", "e 2"))
    assert cp.body == f"o\n1\n{ROOT64}\ne1\ne 2\n"
    assert Checkpoint.parse(cp.body) == cp


# -- Checkpoint.parse: the C2SP text only, each refusal naming the line -------------------------------

def test_parse_refuses_saying_which_line_breaks_which_rule() -> None:
    cases = {
        f"o\n1\n{ROOT64}": r"^The checkpoint does not end with a newline\.$",
        "o\n1\n": r"^A checkpoint has at least three lines \(origin, tree size, root hash\); this one has 2\.$",
        "\n": r"this one has 1\.$",
        f"\n1\n{ROOT64}\n": r"^The checkpoint's origin line \(line 1\) is empty\.$",
        f"o\n01\n{ROOT64}\n": r"^The checkpoint's tree size \(line 2\) '01' is not a decimal number without leading zeroes\.$",
        f"o\n00\n{ROOT64}\n": r"tree size \(line 2\) '00' is not",
        f"o\n+1\n{ROOT64}\n": r"tree size \(line 2\) '\+1' is not",
        f"o\n\n{ROOT64}\n": r"tree size \(line 2\) '' is not",
        "o\n" + "9" * 50 + "x\n" + ROOT64 + "\n": "tree size \\(line 2\\) '" + "9" * 40 + "' is not",
        "o\n1\nnot base64!\n": r"^The checkpoint's root hash \(line 3\) is not base64 \(",
        "o\n1\nAAAA\n": r"^The checkpoint's root hash \(line 3\) is not the base64 of a 32-byte hash\.$",
        "o\n1\n\u00e9\n": r"^The checkpoint's root hash \(line 3\) is not base64 \(",
        # a character outside the alphabet is refused as such, not skipped (the rest is a valid root)
        f"o\n1\n{ROOT64[:4]}!{ROOT64[4:]}\n": r"^The checkpoint's root hash \(line 3\) is not base64 \(",
        f"o\n1\n{ROOT64}\n\n": r"^The checkpoint's extension line 4 is empty\.$",
        f"o\n1\n{ROOT64}\na\n\n": r"^The checkpoint's extension line 5 is empty\.$",
    }
    for text, message in cases.items():
        with pytest.raises(ProofError, match=message):
            Checkpoint.parse(text)


def test_parse_refuses_a_root_written_other_than_its_canonical_base64() -> None:
    # The same 32 bytes, with the unused low bits of the last character set: decodes, but is not canonical.
    last = ROOT64[-2]
    other = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    index = other.index(last)
    noncanonical = ROOT64[:-2] + other[index + 1] + "="
    assert base64.b64decode(noncanonical) == ROOT
    with pytest.raises(ProofError, match="not the base64 of a 32-byte hash"):
        Checkpoint.parse(f"o\n1\n{noncanonical}\n")


def test_parse_reads_every_field() -> None:
    cp = Checkpoint.parse(f"log one\n123\n{ROOT64}\nx\ny z\n")
    assert cp == Checkpoint("log one", 123, ROOT, ("x", "y z"))
    assert Checkpoint.parse(f"o\n0\n{ROOT64}\n") == Checkpoint("o", 0, ROOT)
    assert Checkpoint.parse(f"o\n10\n{ROOT64}\n").size == 10


# -- open_checkpoint: the trusted log key, the origin, the witnesses ------------------------------------

def _signed(cp: Checkpoint, *witnesses: n.NoteSigner, ts: int = 1_700_000_000) -> str:
    return sign_checkpoint(cp, LOG) + "".join(w.signature_line(cp.body, timestamp=ts + i)
                                              for i, w in enumerate(witnesses))


def test_a_checkpoint_opens_only_when_the_trusted_log_key_signed_it() -> None:
    cp = Checkpoint(LOG.name, 5, ROOT)
    got = open_checkpoint(_signed(cp), LOG.verifier)
    assert (got.checkpoint, got.log, got.cosignatures, got.other_signatures) == (cp, LOG.verifier, [], [])
    other = n.NoteSigner.generate(LOG.name)
    with pytest.raises(ProofError):
        open_checkpoint(sign_checkpoint(cp, other), LOG.verifier)
    # signed by a witness the caller trusts, but not by the log key: refused, naming the log key and its id
    text = sign_checkpoint(cp, other) + W1.signature_line(cp.body, timestamp=1)
    with pytest.raises(ProofError, match=rf"^The checkpoint is not signed by the log key {LOG.name}\+"
                                         rf"{LOG.verifier.key_id:08x}\.$"):
        open_checkpoint(text, LOG.verifier, witnesses=[W1.verifier])


def test_a_checkpoint_body_must_be_c2sp_even_when_signed() -> None:
    text = n.sign_note(f"{LOG.name}\n01\n{ROOT64}\n", [LOG])
    with pytest.raises(ProofError, match="leading zeroes"):
        open_checkpoint(text, LOG.verifier)


def test_the_origin_is_the_log_key_name_unless_given() -> None:
    cp = Checkpoint("another/origin", 5, ROOT)
    with pytest.raises(ProofError, match=rf"^The checkpoint is for the log 'another/origin', not '{LOG.name}'\.$"):
        open_checkpoint(_signed(cp), LOG.verifier)
    assert open_checkpoint(_signed(cp), LOG.verifier, origin="another/origin").checkpoint == cp
    own = Checkpoint(LOG.name, 5, ROOT)
    with pytest.raises(ProofError, match=r"not 'another/origin'\.$"):
        open_checkpoint(_signed(own), LOG.verifier, origin="another/origin")


def test_keys_of_the_wrong_kind_are_refused_saying_which_file_to_give() -> None:
    cp = Checkpoint(LOG.name, 5, ROOT)
    with pytest.raises(ProofError, match=rf"^Witness key {LOG.name} is not a cosignature key \(algorithm 0x04\); "
                                         r"give the witness's PREFIX\.witness\.vkey\.$"):
        open_checkpoint(_signed(cp), LOG.verifier, require_witnesses=[LOG.verifier])
    with pytest.raises(ProofError, match=r"^Log key w1\.example is not a note signing key \(algorithm 0x01\); "
                                         r"give the log's PREFIX\.vkey\.$"):
        open_checkpoint(_signed(cp), W1.verifier)


def test_cosignatures_of_given_witnesses_are_verified_and_returned() -> None:
    cp = Checkpoint(LOG.name, 5, ROOT)
    text = _signed(cp, W1, W2)
    got = open_checkpoint(text, LOG.verifier, witnesses=[W1.verifier], require_witnesses=[W2.verifier])
    assert sorted((c.witness.name, c.timestamp) for c in got.cosignatures) == [
        ("w1.example", 1_700_000_000), ("w2.example", 1_700_000_001)]
    assert {c.witness for c in got.cosignatures} == {W1.verifier, W2.verifier}
    for c in got.cosignatures:
        assert c.line in text.splitlines(keepends=True) or c.line + "\n" in text.splitlines(keepends=True)
    # a witness the caller does not name is kept, unverified, to pass on
    only_w1 = open_checkpoint(text, LOG.verifier, witnesses=[W1.verifier])
    assert [c.witness for c in only_w1.cosignatures] == [W1.verifier]
    assert [s.name for s in only_w1.other_signatures] == ["w2.example"]
    # required only (not also in witnesses): still verified; a bad cosignature fails the note
    assert [c.witness for c in open_checkpoint(text, LOG.verifier, require_witnesses=[W2.verifier]).cosignatures] \
        == [W2.verifier]
    bad = _signed(cp) + W2.signature_line(cp.body.replace("5", "6"), timestamp=1)
    with pytest.raises(ProofError):
        open_checkpoint(bad, LOG.verifier, require_witnesses=[W2.verifier])


def test_every_required_witness_must_have_cosigned_and_all_missing_are_named() -> None:
    cp = Checkpoint(LOG.name, 5, ROOT)
    w3 = n.NoteSigner.generate("w3.example", n.ALG_COSIGNATURE_V1)
    with pytest.raises(ProofError, match=rf"^The checkpoint is not cosigned by the witness w2\.example\+"
                                         rf"{W2.verifier.key_id:08x}, w3\.example\+{w3.verifier.key_id:08x}\.$"):
        open_checkpoint(_signed(cp, W1), LOG.verifier, require_witnesses=[W1.verifier, W2.verifier, w3.verifier])
    assert len(open_checkpoint(_signed(cp, W1, W2), LOG.verifier,
                               require_witnesses=[W1.verifier, W2.verifier]).cosignatures) == 2
    # a witness named twice (trusted and required) is checked once and counts
    got = open_checkpoint(_signed(cp, W1), LOG.verifier, witnesses=[W1.verifier], require_witnesses=[W1.verifier])
    assert [c.witness for c in got.cosignatures] == [W1.verifier]


def test_a_checkpoint_opens_from_bytes_too() -> None:
    cp = Checkpoint(LOG.name, 5, ROOT)
    assert open_checkpoint(_signed(cp).encode(), LOG.verifier).checkpoint == cp


def test_the_empty_tree_checkpoint() -> None:
    cp = Checkpoint(LOG.name, 0, merkle.EMPTY_ROOT)
    assert open_checkpoint(_signed(cp), LOG.verifier).checkpoint.size == 0


# -- proof files: decode_proof, verify_inclusion_proof, verify_consistency_proof --------------------------

import hashlib  # noqa: E402
import json  # noqa: E402
from typing import Any  # noqa: E402

from eventstore.tlog import proofs as p  # noqa: E402

LEAVES = [hashlib.sha256(b"leaf %d" % i).digest() for i in range(9)]


def _sub(start: int, end: int) -> bytes:
    return merkle.root(LEAVES[start:end])


def _cp(size: int, *cosigners: n.NoteSigner, origin: str = LOG.name, ts: int = 1_764_000_000) -> str:
    cp = Checkpoint(origin, size, merkle.root(LEAVES[:size]))
    return sign_checkpoint(cp, LOG) + "".join(w.signature_line(cp.body, timestamp=ts) for w in cosigners)


def _inclusion(index: int, size: int, *cosigners: n.NoteSigner, **extra: Any) -> dict[str, Any]:
    return {"leaf_index": index, "tree_size": size, "event_hash": LEAVES[index].hex(),
            "inclusion": p.encode_hashes(merkle.inclusion_proof(index, size, _sub)),
            "checkpoint": _cp(size, *cosigners), **extra}


def _consistency(old: int, new: int, *cosigners: n.NoteSigner) -> dict[str, Any]:
    return {"old_size": old, "new_size": new, "consistency": p.encode_hashes(merkle.consistency_proof(old, new, _sub)),
            "old_checkpoint": _cp(old), "new_checkpoint": _cp(new, *cosigners)}


def _verify(doc: dict[str, Any] | bytes, **kw: Any) -> p.ProofReport:
    return p.verify_proof(doc if isinstance(doc, bytes) else json.dumps(doc).encode(), LOG.verifier, **kw)


def test_encode_hashes_is_standard_base64() -> None:
    assert p.encode_hashes([b"\xfb" * 32]) == [base64.b64encode(b"\xfb" * 32).decode()]
    assert p.encode_hashes([]) == []


def test_decode_proof_tells_the_kinds_apart_and_names_what_is_wrong() -> None:
    assert isinstance(p.decode_proof(json.dumps(_inclusion(1, 5)).encode()), p.InclusionProof)
    assert isinstance(p.decode_proof(json.dumps(_consistency(2, 5)).encode()), p.ConsistencyProof)
    cases = {
        b"{": r"^The proof file is not JSON \(",
        b"[1]": r"^The proof file is not a JSON object\.$",
        b"{}": r"^The proof file has neither an 'inclusion' nor a 'consistency' field: it is not a proof written "
               r"by `evstore prove`\.$",
        json.dumps({**_inclusion(1, 5), "leaf_index": "1"}).encode():
            r"^The inclusion proof file is not valid: Expected `int`, got `str` - at `\$\.leaf_index`\.$",
        json.dumps({**_consistency(2, 5), "new_size": 5.0}).encode(): r"^The consistency proof file is not valid: .*new_size",
    }
    for data, message in cases.items():
        with pytest.raises(ProofError, match=message):
            p.decode_proof(data)


def test_an_inclusion_proof_verifies_for_its_exact_leaf_size_and_root() -> None:
    for size in range(1, len(LEAVES) + 1):
        for index in range(size):
            report = _verify(_inclusion(index, size))
            assert report.details["leaf_index"] == index and report.details["tree_size"] == size
    good = _inclusion(3, 7, stream="S-1", version=4, event_id="e-4")
    report = _verify(good)
    assert (report.kind, report.origin) == ("inclusion", LOG.name)
    assert report.details == {"leaf_index": 3, "tree_size": 7, "event_hash": LEAVES[3].hex(),
                              "root": merkle.root(LEAVES[:7]).hex(), "stream": "S-1", "version": 4, "event_id": "e-4"}
    assert report.to_dict() == {"ok": True, "kind": "inclusion", "origin": LOG.name, **report.details,
                                "cosignatures": []}
    # another leaf, another index, another size: refused
    with pytest.raises(ProofError, match=rf"^The event {LEAVES[4].hex()[:16]}… is not proven in log '{LOG.name}': "):
        _verify({**good, "event_hash": LEAVES[4].hex()})
    with pytest.raises(ProofError, match="is not proven in log"):
        _verify({**good, "leaf_index": 2})
    with pytest.raises(ProofError, match=r"^The proof is for a tree of size 8 but its checkpoint is at size 7; "
                                         r"ask `evstore prove` for a proof against that checkpoint\.$"):
        _verify({**good, "tree_size": 8})
    with pytest.raises(ProofError, match="is not proven in log"):
        _verify({**good, "inclusion": good["inclusion"][:-1]})
    other_root = sign_checkpoint(Checkpoint(LOG.name, 7, merkle.root(LEAVES[1:8])), LOG)
    with pytest.raises(ProofError, match="is not proven in log"):
        _verify({**good, "checkpoint": other_root})


def test_an_inclusion_proof_event_hash_is_32_bytes_of_hex_and_its_hashes_base64() -> None:
    good = _inclusion(3, 7)
    with pytest.raises(ProofError, match=r"^\$\.event_hash is not hex \("):
        _verify({**good, "event_hash": "zz"})
    with pytest.raises(ProofError, match=r"^\$\.event_hash is 31 bytes, not an event's 32-byte chain hash\.$"):
        _verify({**good, "event_hash": LEAVES[3].hex()[:-2]})
    with pytest.raises(ProofError, match=r"^\$\.inclusion\[1\] is not base64 \("):
        _verify({**good, "inclusion": [good["inclusion"][0], "!!", *good["inclusion"][2:]]})
    with pytest.raises(ProofError, match=r"^\$\.inclusion\[0\] is not base64 \("):
        _verify({**good, "inclusion": ["\u00e9", *good["inclusion"][1:]]})
    with pytest.raises(ProofError, match=r"^\$\.inclusion\[2\] is 31 bytes, not a 32-byte hash\.$"):
        _verify({**good, "inclusion": [*good["inclusion"][:2], base64.b64encode(bytes(31)).decode()]})


def test_a_consistency_proof_verifies_only_for_its_exact_sizes_and_roots() -> None:
    for new in range(1, len(LEAVES) + 1):
        for old in range(1, new + 1):
            report = _verify(_consistency(old, new))
            assert (report.details["old_size"], report.details["new_size"]) == (old, new)
    good = _consistency(3, 7)
    report = _verify(good)
    assert (report.kind, report.origin, [c.checkpoint.size for c in report.checkpoints]) == ("consistency", LOG.name,
                                                                                             [3, 7])
    assert report.details == {"old_size": 3, "new_size": 7, "old_root": merkle.root(LEAVES[:3]).hex(),
                              "new_root": merkle.root(LEAVES[:7]).hex()}
    with pytest.raises(ProofError, match=r"^\$\.old_size is 4 but the old checkpoint is at size 3\.$"):
        _verify({**good, "old_size": 4})
    with pytest.raises(ProofError, match=r"^\$\.new_size is 8 but the new checkpoint is at size 7\.$"):
        _verify({**good, "new_size": 8})
    with pytest.raises(ProofError, match=rf"^Log '{LOG.name}' at size 7 is not proven to extend its checkpoint at "
                                         r"size 4: "):
        _verify({**good, "old_checkpoint": _cp(4), "old_size": 4})
    with pytest.raises(ProofError, match=r"^\$\.consistency\[0\] is not base64"):
        _verify({**good, "consistency": ["!", *good["consistency"][1:]]})


def test_a_forked_log_is_not_proven_consistent() -> None:
    fork = [*LEAVES[:3], hashlib.sha256(b"other").digest(), *LEAVES[4:]]
    new = Checkpoint(LOG.name, 7, merkle.root(fork[:7]))
    doc = {**_consistency(3, 7), "new_checkpoint": sign_checkpoint(new, LOG)}
    with pytest.raises(ProofError, match="is not proven to extend"):
        _verify(doc)
    old = Checkpoint(LOG.name, 5, merkle.root(fork[:5]))
    doc = {**_consistency(5, 7), "old_checkpoint": sign_checkpoint(old, LOG)}
    with pytest.raises(ProofError, match="is not proven to extend"):
        _verify(doc)


def test_witnesses_are_required_on_the_checkpoint_proven_against() -> None:
    assert [c.witness for c in _verify(_inclusion(2, 5, W1), witnesses=[W1.verifier]).cosignatures] == [W1.verifier]
    with pytest.raises(ProofError, match="not cosigned by the witness w1.example"):
        _verify(_inclusion(2, 5), witnesses=[W1.verifier])
    # consistency: the newer checkpoint must be cosigned (the older need not be)
    report = _verify(_consistency(2, 5, W1), witnesses=[W1.verifier])
    assert [c.witness for c in report.cosignatures] == [W1.verifier]
    with pytest.raises(ProofError, match="not cosigned by the witness w1.example"):
        _verify(_consistency(2, 5), witnesses=[W1.verifier])
    doc = {**_consistency(2, 5), "old_checkpoint": _cp(2, W1)}
    with pytest.raises(ProofError, match="not cosigned by the witness w1.example"):
        _verify(doc, witnesses=[W1.verifier])


def test_the_origin_of_both_checkpoints_is_checked() -> None:
    doc = _consistency(2, 5)
    with pytest.raises(ProofError, match=r"not 'x/y'\.$"):
        _verify(doc, origin="x/y")
    other = {**doc, "old_checkpoint": _cp(2, origin="x/y")}
    with pytest.raises(ProofError, match=rf"^The checkpoint is for the log 'x/y', not '{LOG.name}'\.$"):
        _verify(other)
    with pytest.raises(ProofError, match=r"not 'x/y'\.$"):
        _verify({**_inclusion(1, 5)}, origin="x/y")
    assert _verify({**doc, "old_checkpoint": _cp(2, origin="x/y"), "new_checkpoint": _cp(5, origin="x/y")},
                   origin="x/y").origin == "x/y"
    assert _verify({**_inclusion(1, 5), "checkpoint": _cp(5, origin="x/y")}, origin="x/y").origin == "x/y"


def test_the_summary_says_what_was_proven_and_by_whom_in_utc() -> None:
    doc = _inclusion(3, 7, W1, stream="S-1", version=4)
    s = _verify(doc, witnesses=[W1.verifier]).summary
    root = merkle.root(LEAVES[:7]).hex()
    assert s == (f"OK: event {LEAVES[3].hex()[:16]}… (stream 'S-1' version 4) is leaf 3 of log '{LOG.name}' at "
                 f"size 7, root {root[:16]}…; cosigned by w1.example at 2025-11-24T16:00:00Z (1764000000)")
    assert _verify(_inclusion(3, 7)).summary == (f"OK: event {LEAVES[3].hex()[:16]}… is leaf 3 of log '{LOG.name}' "
                                                 f"at size 7, root {root[:16]}…")
    c = _verify(_consistency(3, 7))
    assert c.summary == (f"OK: log '{LOG.name}' at size 7 (root {root[:16]}…) extends its checkpoint at size 3 "
                         f"(root {merkle.root(LEAVES[:3]).hex()[:16]}…)")
    assert c.to_dict() == {"ok": True, "kind": "consistency", "origin": LOG.name, **c.details, "cosignatures": []}


def test_a_cosignature_time_from_2_to_the_38_is_shown_as_unknown_with_its_number() -> None:
    for ts, shown in ((1 << 38, "?"), ((1 << 38) - 1, "10680-07-14T06:09:03Z"), (0, "1970-01-01T00:00:00Z")):
        cp = Checkpoint(LOG.name, 5, merkle.root(LEAVES[:5]))
        doc = {**_inclusion(1, 5), "checkpoint": sign_checkpoint(cp, LOG) + W1.signature_line(cp.body, timestamp=ts)}
        report = _verify(doc, witnesses=[W1.verifier])
        assert report.summary.endswith(f"; cosigned by w1.example at {shown} ({ts})")
        assert report.to_dict()["cosignatures"] == [{"witness": "w1.example", "key_id": f"{W1.verifier.key_id:08x}",
                                                     "timestamp": ts}]
