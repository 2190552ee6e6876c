"""RFC 9162 §2.1 Merkle trees against the published test vectors, not against our own code.

The vectors are Certificate Transparency's RFC 6962 tree of eight leaves (google/certificate-transparency
merkle_tree_test.cc, carried on in transparency-dev/merkle proof/verify_test.go): the leaf data,
the root of every prefix, and inclusion and consistency proofs.  The corruption probes are the
ones that test suite applies (wrong index, wrong size, wrong root, garbage before or after,
a bit flipped, a hash removed or inserted): each must fail.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.errors import ProofError
from eventstore.tlog import merkle

LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")]
ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]
EMPTY = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
SOME = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(x) for x in hexes]


# (0-based leaf index, tree size, proof)
INCLUSION = [
    (0, 1, []),
    (0, 8, _h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (5, 8, _h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
              "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (2, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (1, 5, _h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
]
# (old size, new size, proof)
CONSISTENCY = [
    (1, 1, []),
    (1, 8, _h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (6, 8, _h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
              "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (2, 5, _h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
    (6, 7, _h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
              "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
]


def _subtree(leaves: list[bytes]) -> merkle.SubtreeHash:
    return lambda start, end: merkle.root(leaves[start:end])


def test_hashes_are_the_rfcs() -> None:
    assert merkle.root([]) == EMPTY
    assert merkle.leaf_hash(b"") == bytes.fromhex("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
    assert merkle.node_hash(b"N123", b"N456") == hashlib.sha256(b"\x01N123N456").digest()
    for n in range(1, 9):
        assert merkle.root(LEAVES[:n]) == ROOTS[n - 1], n


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_vectors(index: int, size: int, proof: list[bytes]) -> None:
    assert merkle.inclusion_proof(index, size, _subtree(LEAVES)) == proof
    leaf = merkle.leaf_hash(LEAVES[index])
    assert merkle.root_from_inclusion(index, size, leaf, proof) == ROOTS[size - 1]
    merkle.verify_inclusion(index, size, leaf, proof, ROOTS[size - 1])
    root = ROOTS[size - 1]
    probes = [
        (index - 1, size, leaf, proof, root), (index + 1, size, leaf, proof, root),
        (index ^ 2, size, leaf, proof, root), (index, size * 2, leaf, proof, root),
        (index, size // 2, leaf, proof, root), (index, size, b"WrongLeaf", proof, root),
        (index, size, leaf, proof, EMPTY), (index, size, leaf, proof, SOME),
        (index, size, leaf, [*proof, b""], root), (index, size, leaf, [*proof, root], root),
        (index, size, leaf, [b"", *proof], root), (index, size, leaf, [root, *proof], root),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
        probes.append((index, size, leaf, flipped, root))
    if proof:
        probes.append((index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append((index, size, leaf, [proof[0], SOME, *proof[1:]], root))
    for probe in probes:
        if probe[:2] == (index, size) and probe[2:] == (leaf, proof, root):
            continue  # index ^ 2 or size // 2 may equal the original
        with pytest.raises(ProofError):
            merkle.verify_inclusion(*probe)


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_vectors(old: int, new: int, proof: list[bytes]) -> None:
    assert merkle.consistency_proof(old, new, _subtree(LEAVES)) == proof
    r1, r2 = ROOTS[old - 1], ROOTS[new - 1]
    merkle.verify_consistency(old, new, r1, r2, proof)
    if not proof:
        return
    probes = [
        (old - 1, new, r1, r2, proof), (old + 1, new, r1, r2, proof), (old ^ 2, new, r1, r2, proof),
        (old, new * 2, r1, r2, proof), (old, new // 2, r1, r2, proof),
        (old, new, SOME, r2, proof), (old, new, r1, SOME, proof), (old, new, r2, r1, proof),
        (old, new, r1, r2, []), (old, new, r1, r2, [*proof, b""]), (old, new, r1, r2, [*proof, r1]),
        (old, new, r1, r2, [*proof, r2]), (old, new, r1, r2, [b"", *proof]),
        (old, new, r1, r2, [r1, *proof]), (old, new, r1, r2, [r2, *proof]),
        (old, new, r1, r2, [proof[0], *proof]), (old, new, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 16]) + flipped[i][1:]
        probes.append((old, new, r1, r2, flipped))
    for probe in probes:
        with pytest.raises(ProofError):
            merkle.verify_consistency(*probe)


def test_trivial_consistency_cases() -> None:
    merkle.verify_consistency(0, 0, EMPTY, EMPTY, [])
    merkle.verify_consistency(0, 5, EMPTY, ROOTS[4], [])
    merkle.verify_consistency(3, 3, ROOTS[2], ROOTS[2], [])
    with pytest.raises(ProofError, match="forked"):
        merkle.verify_consistency(3, 3, ROOTS[2], ROOTS[3], [])
    with pytest.raises(ProofError, match="must be empty"):
        merkle.verify_consistency(0, 1, EMPTY, ROOTS[0], [EMPTY])
    with pytest.raises(ProofError, match="only grows"):
        merkle.verify_consistency(2, 1, ROOTS[1], ROOTS[0], [])
    with pytest.raises(ProofError, match="empty"):
        merkle.verify_consistency(1, 2, ROOTS[0], ROOTS[1], [])
    with pytest.raises(ProofError, match="outside"):
        merkle.verify_inclusion(0, 0, SOME, [], EMPTY)
    with pytest.raises(ProofError, match="32"):
        merkle.verify_inclusion(0, 1, b"", [], b"")
    with pytest.raises(ProofError, match="smaller"):
        merkle.consistency_proof(3, 2, _subtree(LEAVES))


def _counting(leaves: list[bytes], calls: list[tuple[int, int]]) -> merkle.SubtreeHash:
    def subtree(start: int, end: int) -> bytes:
        calls.append((start, end))
        return merkle.root(leaves[start:end])
    return subtree


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n))),
       st.binary(max_size=4))
def test_random_logs_prove_and_verify(sizes: tuple[int, int, int], salt: bytes) -> None:
    """Any leaf of any log is proven included, any prefix consistent, with O(log n) subtree calls;
    and a proof made for one prefix does not verify against another."""
    new, index, old = sizes
    leaves = [salt + i.to_bytes(4, "big") for i in range(new)]
    r_new, r_old = merkle.root(leaves), merkle.root(leaves[:old])
    bound = max(1, (new - 1).bit_length())
    calls: list[tuple[int, int]] = []
    proof = merkle.inclusion_proof(index, new, _counting(leaves, calls))
    assert len(proof) == len(calls) <= bound
    merkle.verify_inclusion(index, new, merkle.leaf_hash(leaves[index]), proof, r_new)
    calls.clear()
    cproof = merkle.consistency_proof(old, new, _counting(leaves, calls))
    assert len(cproof) == len(calls) <= bound + 1
    merkle.verify_consistency(old, new, r_old, r_new, cproof)
    if old < new:
        tampered = leaves[:old - 1] + [b"x" + leaves[old - 1]] + leaves[old:]
        with pytest.raises(ProofError):  # the old tree's last leaf was rewritten afterwards
            merkle.verify_consistency(old, new, r_old, merkle.root(tampered), cproof)
        if old > 1:
            with pytest.raises(ProofError):
                merkle.verify_consistency(old - 1, new, merkle.root(leaves[:old - 1]), r_new, cproof)


def _mth(data: list[bytes]) -> bytes:
    """MTH exactly as RFC 9162 §2.1.1 defines it, recursively (slow; the oracle of root())."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1 << ((len(data) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(data[:k]) + _mth(data[k:])).digest()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1 << 14, (1 << 14) + 1, 3 * (1 << 14) - 1, 5 * (1 << 14) + 77])
def test_root_matches_the_rfc_definition_across_chunks(n: int) -> None:
    data = [i.to_bytes(4, "big") for i in range(n)]
    assert merkle.root(data) == _mth(data)


def test_roots_from_consistency_relates_only_a_non_empty_tree_to_a_larger_one() -> None:
    """The RFC's algorithm (§2.1.4.2) is defined for 0 < old < new; asked otherwise it refuses, naming the
    sizes, and a proof hash of the wrong length is refused naming its place."""
    for old, new in ((0, 5), (0, 1), (3, 3), (5, 3)):
        with pytest.raises(ProofError) as err:
            merkle.roots_from_consistency(old, new, ROOTS[0], [ROOTS[1]])
        assert str(err.value) == (f"Sizes {old} -> {new}: a consistency proof relates a non-empty "
                                  "tree to a larger one."), (old, new)
    with pytest.raises(ProofError) as err:
        merkle.roots_from_consistency(3, 5, ROOTS[2], [ROOTS[0], ROOTS[1][:31]])
    assert str(err.value) == "Consistency proof hash 1 is 31 bytes, not 32 (a SHA-256 hash)."


def test_every_proof_between_small_trees_verifies_and_only_with_its_own_sizes() -> None:
    """Exhaustively, for every tree of up to 40 leaves: each leaf's inclusion proof and each older size's
    consistency proof verify, and a consistency proof checked against a neighbouring old size does not."""
    leaves = [b"leaf %d" % i for i in range(40)]
    roots = [merkle.root(leaves[:n]) for n in range(41)]
    subtree = _subtree(leaves)
    for new in range(1, 41):
        for i in range(new):
            merkle.verify_inclusion(i, new, merkle.leaf_hash(leaves[i]), merkle.inclusion_proof(i, new, subtree),
                                    roots[new])
        for old in range(0, new + 1):
            proof = merkle.consistency_proof(old, new, subtree)
            merkle.verify_consistency(old, new, roots[old], roots[new], proof)
            if 0 < old < new:
                assert merkle.roots_from_consistency(old, new, roots[old], proof) == (roots[old], roots[new])
                for other in {old - 1, old + 1} - {0, new}:
                    with pytest.raises(ProofError):
                        merkle.verify_consistency(other, new, roots[other], roots[new], proof)


def test_a_consistency_proof_from_the_empty_tree_or_to_the_same_size_is_empty() -> None:
    subtree = _subtree(LEAVES)
    for new in range(0, len(LEAVES) + 1):
        assert merkle.consistency_proof(0, new, subtree) == []
        assert merkle.consistency_proof(new, new, subtree) == []


def test_a_consistency_proof_of_the_wrong_length_is_refused_saying_so() -> None:
    proof = merkle.consistency_proof(3, 7, _subtree(LEAVES))
    with pytest.raises(ProofError) as err:
        merkle.roots_from_consistency(3, 7, ROOTS[2], proof + [ROOTS[0]])
    assert str(err.value) == f"The consistency proof from size 3 to 7 is too long ({len(proof) + 1} hashes)."
    with pytest.raises(ProofError) as err:
        merkle.roots_from_consistency(3, 7, ROOTS[2], proof[:-1])
    assert str(err.value) == f"The consistency proof from size 3 to 7 is too short ({len(proof) - 1} hashes)."


def test_each_proof_failure_says_which_hash_or_root_did_not_hold() -> None:
    """What a verifier is told when a proof fails names the hash, the root and the sizes concerned."""
    subtree = _subtree(LEAVES)
    cproof = merkle.consistency_proof(3, 7, subtree)
    iproof = merkle.inclusion_proof(2, 7, subtree)
    leaf = merkle.leaf_hash(LEAVES[2])
    cases = [
        (lambda: merkle.verify_consistency(3, 7, ROOTS[2][:31], ROOTS[6], cproof),
         "The old root hash is 31 bytes, not 32 (a SHA-256 hash)."),
        (lambda: merkle.verify_consistency(3, 7, ROOTS[2], ROOTS[6] + b"\x00", cproof),
         "The new root hash is 33 bytes, not 32 (a SHA-256 hash)."),
        (lambda: merkle.verify_consistency(3, 7, ROOTS[3], ROOTS[6], cproof),
         "The consistency proof does not lead to the old root (size 3): the log of size 7 does not extend it, "
         "or the proof is wrong."),
        (lambda: merkle.verify_consistency(3, 7, ROOTS[2], ROOTS[5], cproof),
         "The consistency proof does not lead to the new root (size 7): the log of size 7 does not extend the "
         "one of size 3, or the proof is wrong."),
        (lambda: merkle.verify_consistency(3, 2, ROOTS[2], ROOTS[1], []),
         "The old tree (size 3) is larger than the new one (size 2): a log only grows; give the older "
         "checkpoint first."),
        (lambda: merkle.verify_consistency(-1, 2, ROOTS[2], ROOTS[1], []),
         "The old tree (size -1) is larger than the new one (size 2): a log only grows; give the older "
         "checkpoint first."),
        (lambda: merkle.verify_consistency(0, 2, EMPTY, ROOTS[1], [ROOTS[0]]),
         "A consistency proof from size 0 to 2 must be empty; this one has 1 hashes."),
        (lambda: merkle.verify_consistency(2, 2, ROOTS[1], ROOTS[0], []),
         "Two different roots for the same tree size 2: the log forked."),
        (lambda: merkle.roots_from_consistency(3, 7, ROOTS[2], []),
         "The consistency proof from size 3 to 7 is empty."),
        (lambda: merkle.verify_inclusion(2, 7, leaf, iproof, ROOTS[6][:-1]),
         "The root hash is 31 bytes, not 32 (a SHA-256 hash)."),
        (lambda: merkle.verify_inclusion(2, 7, leaf, iproof, ROOTS[5]),
         "The inclusion proof of leaf 2 does not lead to the root of the tree of size 7: the leaf is not there, "
         "or the proof or root is wrong."),
        (lambda: merkle.verify_inclusion(2, 7, leaf[:5], iproof, ROOTS[6]),
         "The leaf hash is 5 bytes, not 32 (a SHA-256 hash)."),
        (lambda: merkle.verify_inclusion(2, 7, leaf, [iproof[0], iproof[1][:3], iproof[2]], ROOTS[6]),
         "Inclusion proof hash 1 is 3 bytes, not 32 (a SHA-256 hash)."),
        (lambda: merkle.verify_inclusion(2, 7, leaf, [*iproof, ROOTS[0]], ROOTS[6]),
         "The inclusion proof is too long: 4 hashes where a leaf 2 of a tree of size 7 needs 3."),
        (lambda: merkle.verify_inclusion(2, 7, leaf, iproof[:-1], ROOTS[6]),
         "The inclusion proof is too short: 2 hashes for leaf 2 of a tree of size 7."),
        (lambda: merkle.verify_inclusion(7, 7, leaf, iproof, ROOTS[6]), "Leaf index 7 is outside a tree of size 7."),
        (lambda: merkle.inclusion_proof(7, 7, subtree),
         "Leaf index 7 is outside a tree of size 7; ask for a leaf below 7."),
        (lambda: merkle.consistency_proof(3, 2, subtree),
         "Cannot prove that a tree of size 3 is consistent with a smaller one of size 2; give the older "
         "(smaller) size first."),
    ]
    for call, message in cases:
        with pytest.raises(ProofError) as err:
            call()
        assert str(err.value) == message
