"""RFC 9162 §2.1 Merkle trees: tree hash, inclusion and consistency proofs and their verification.

Hashes are SHA-256 with the RFC's domain separation: a leaf is ``SHA-256(0x00 || data)``, an
interior node ``SHA-256(0x01 || left || right)``, the empty tree ``SHA-256()``.  Indexes are
0-based; ``D[start:end]`` is the half-open range of leaves, as in the RFC.

Proof generation takes ``subtree(start, end) -> bytes``, a function returning MTH(D[start:end]),
so a store answers from nodes it keeps: a proof asks for at most ⌈log2 n⌉ (inclusion) or
⌈log2 n⌉ + 1 (consistency) subtrees, each of which is a power-of-two-aligned complete subtree
except possibly the rightmost one.  Example::

    >>> leaves = [b"a", b"b", b"c"]
    >>> r = root(leaves)
    >>> proof = inclusion_proof(2, 3, lambda s, e: root(leaves[s:e]))
    >>> verify_inclusion(2, 3, leaf_hash(b"c"), proof, r)

Verification follows the RFC's algorithms (§2.1.3.2 and §2.1.4.2) step by step and raises
:class:`~eventstore.errors.ProofError` naming what did not hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from eventstore.errors import ProofError

__all__ = [
    "EMPTY_ROOT", "HASH_SIZE", "SubtreeHash", "consistency_proof", "inclusion_proof", "leaf_hash",
    "node_hash", "root", "root_from_inclusion", "roots_from_consistency", "split", "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
#: MTH({}) = SHA-256() (RFC 9162 §2.1.1).
EMPTY_ROOT = hashlib.sha256(b"").digest()

#: ``subtree(start, end)`` returns MTH(D[start:end]) for ``0 <= start < end <= size``.
SubtreeHash = Callable[[int, int], bytes]


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: MTH of the one-leaf list ``[data]``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """k, the largest power of two smaller than ``n`` (``n >= 2``): where the RFC splits D[n]."""
    return 1 << ((n - 1).bit_length() - 1)


_CHUNK = 1 << 14  # leaves hashed level by level at a time (memory: one chunk's hashes)


def _level_root(leaf_data: Sequence[bytes]) -> bytes:
    """MTH of 1 or more leaves, level by level: a lone last node moves up unchanged, which builds
    the RFC's tree (its left subtrees are the complete ones)."""
    sha = hashlib.sha256
    level = [sha(b"\x00" + d).digest() for d in leaf_data]
    while len(level) > 1:
        paired = [sha(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def root(leaf_data: Sequence[bytes]) -> bytes:
    """MTH(D[n]) of the leaves' data (RFC 9162 §2.1.1), in O(n) time and O(log n + 16k) memory:
    complete chunks of 2^14 leaves hashed level by level, their roots merged on a stack of the
    complete subtrees so far, the short last chunk (its own MTH) and that stack folded from the
    right as the RFC's tree is."""
    n = len(leaf_data)
    if n == 0:
        return EMPTY_ROOT
    stack: list[tuple[int, bytes]] = []  # (height, hash) of complete subtrees, left to right
    tail = n - n % _CHUNK
    for start in range(0, tail, _CHUNK):
        h, height = _level_root(leaf_data[start:start + _CHUNK]), 0
        while stack and stack[-1][0] == height:
            h, height = node_hash(stack.pop()[1], h), height + 1
        stack.append((height, h))
    h = _level_root(leaf_data[tail:]) if tail < n else stack.pop()[1]
    while stack:
        h = node_hash(stack.pop()[1], h)
    return h


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes, not {HASH_SIZE} (a SHA-256 hash).")


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[size]) (RFC 9162 §2.1.3.1): the sibling hashes from the leaf up to the root."""
    if not 0 <= index < size:
        raise ProofError(f"Leaf index {index} is outside a tree of size {size}; "
                         f"ask for a leaf below {size}.")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:  # descend, collecting the sibling at each level (root to leaf) ...
        k = split(end - start)
        if index - start < k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()  # ... and the RFC's order is leaf to root
    return path


def consistency_proof(old_size: int, new_size: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(old_size, D[new_size]) (RFC 9162 §2.1.4.1); empty when ``old_size`` is 0 or equals
    ``new_size`` (nothing to prove)."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"Cannot prove that a tree of size {old_size} is consistent with a smaller "
                         f"one of size {new_size}; give the older (smaller) size first.")
    if old_size == 0 or old_size == new_size:
        return []
    # SUBPROOF(m, D[start:end], b), unrolled: the RFC's recursion appends after recursing,
    # so collect top-down and reverse.
    path: list[bytes] = []
    m, start, end, complete = old_size, 0, new_size, True
    while True:
        n = end - start
        if m == n:
            if not complete:
                path.append(subtree(start, end))
            break
        k = split(n)
        if m <= k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start, m, complete = start + k, m - k, False
    path.reverse()
    return path


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` and the leaf hash ``leaf`` imply (RFC 9162 §2.1.3.2 steps 1-4);
    raises :class:`ProofError` when the proof's length does not fit the index and size."""
    if not 0 <= index < size:
        raise ProofError(f"Leaf index {index} is outside a tree of size {size}.")
    _check_hash(leaf, "The leaf hash")
    fn, sn, r = index, size - 1, leaf
    for i, p in enumerate(proof):
        _check_hash(p, f"Inclusion proof hash {i}")
        if sn == 0:
            raise ProofError(f"The inclusion proof is too long: {len(proof)} hashes where a leaf "
                             f"{index} of a tree of size {size} needs {i}.")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"The inclusion proof is too short: {len(proof)} hashes for leaf {index} "
                         f"of a tree of size {size}.")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root_hash: bytes) -> None:
    """Check that the leaf hash ``leaf`` is leaf ``index`` of the tree of ``size`` leaves whose
    root is ``root_hash`` (RFC 9162 §2.1.3.2); raises :class:`ProofError` if not."""
    _check_hash(root_hash, "The root hash")
    if root_from_inclusion(index, size, leaf, proof) != root_hash:
        raise ProofError(f"The inclusion proof of leaf {index} does not lead to the root of the "
                         f"tree of size {size}: the leaf is not there, or the proof or root is wrong.")


def roots_from_consistency(old_size: int, new_size: int, old_root: bytes,
                           proof: Sequence[bytes]) -> tuple[bytes, bytes]:
    """``(fr, sr)``: the old and new roots that ``proof`` implies (RFC 9162 §2.1.4.2 steps 1-6),
    for ``0 < old_size < new_size``; raises :class:`ProofError` when its length does not fit."""
    if not 0 < old_size < new_size:
        raise ProofError(f"Sizes {old_size} -> {new_size}: a consistency proof relates a non-empty "
                         f"tree to a larger one.")
    if not proof:
        raise ProofError(f"The consistency proof from size {old_size} to {new_size} is empty.")
    for i, c in enumerate(proof):
        _check_hash(c, f"Consistency proof hash {i}")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # an exact power of 2: the old root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"The consistency proof from size {old_size} to {new_size} is too long "
                             f"({len(proof)} hashes).")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"The consistency proof from size {old_size} to {new_size} is too short "
                         f"({len(proof)} hashes).")
    return fr, sr


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """Check that the tree of ``new_size`` leaves with root ``new_root`` extends the one of
    ``old_size`` leaves with root ``old_root`` (RFC 9162 §2.1.4.2); raises :class:`ProofError`
    if not.  Equal sizes need an empty proof and equal roots; an empty old tree is a prefix of
    every tree (empty proof)."""
    _check_hash(old_root, "The old root hash")
    _check_hash(new_root, "The new root hash")
    if old_size < 0 or new_size < old_size:
        raise ProofError(f"The old tree (size {old_size}) is larger than the new one (size {new_size}): "
                         f"a log only grows; give the older checkpoint first.")
    if old_size == 0 or old_size == new_size:
        if proof:
            raise ProofError(f"A consistency proof from size {old_size} to {new_size} must be empty; "
                             f"this one has {len(proof)} hashes.")
        if old_size == new_size and old_root != new_root:
            raise ProofError(f"Two different roots for the same tree size {old_size}: the log forked.")
        return
    fr, sr = roots_from_consistency(old_size, new_size, old_root, proof)
    if fr != old_root:
        raise ProofError(f"The consistency proof does not lead to the old root (size {old_size}): "
                         f"the log of size {new_size} does not extend it, or the proof is wrong.")
    if sr != new_root:
        raise ProofError(f"The consistency proof does not lead to the new root (size {new_size}): "
                         f"the log of size {new_size} does not extend the one of size {old_size}, "
                         f"or the proof is wrong.")
