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
