"""The log's Merkle tree (RFC 9162 §2.1), kept in the store.

Leaf ``i`` (0-based) is the event at position ``i + 1`` (positions are gapless) and its leaf data
is that event's 32-byte chain hash (``events.hash``).  The store keeps the roots of the complete,
aligned subtrees at the levels that are multiples of :data:`STRIDE` (``tree_nodes``: level, index,
hash; level ``L`` index ``j`` is MTH(D[j·2^L : (j+1)·2^L])); level 0 is the leaves themselves, read
from ``events``.  Any other subtree hash is folded from at most ``2^(STRIDE-1)`` stored hashes (or
leaves) a level, so a proof at 10^7 events reads a few hundred hashes, and an append writes one
node per 2^STRIDE - 1 events (about 7 % more rows), computed in the append's transaction
(:func:`new_nodes`).

Why levels and not Go's tiles: a tile row is rewritten while it fills (partial tiles) and the
store's tables are append-only; a node here is written once, when its subtree is complete, and
never changes.

    >>> from eventstore.store import EventStore
    >>> store = EventStore("sqlite:///./.evstore/events.db")
    >>> tree = store.tree()                              # doctest: +SKIP
    >>> tree.root(tree.size) == merkle.root(all_leaf_data)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice, repeat
from typing import Any, Protocol

from eventstore.errors import IntegrityViolation

#: SHA-256 of a node (65 bytes, two compression blocks): hashlib's OpenSSL, which uses the CPU's SHA
#: instructions (measured 0.5 us against 1.1 us for CPython's own).
_sha = hashlib.sha256
_leaf_sha: Callable[[bytes], Any]
try:  # a leaf (33 bytes, one block): CPython's own SHA-256 without OpenSSL's per-call set-up costs
    # less (measured 0.5 vs 1.7 us); the append hashes one leaf an event.
    from _sha256 import sha256 as _leaf_sha  # type: ignore[import-not-found,no-redef]  # Python <= 3.11
except ImportError:  # pragma: no cover - the module's name from 3.12 on, or a build without it
    try:
        from _sha2 import sha256 as _leaf_sha  # type: ignore[import-not-found,no-redef]
    except ImportError:
        _leaf_sha = hashlib.sha256


def _py_leaf_hashes(leaf_data: Sequence[bytes]) -> list[bytes]:
    leaf = _leaf_sha
    return [leaf(b"\x00" + d).digest() for d in leaf_data]


def _py_parents(hashes: Sequence[bytes], rounds: int) -> list[bytes]:
    if len(hashes) % (1 << rounds):
        raise ValueError(f"parents(): {len(hashes)} hashes do not pair up {rounds} times")
    sha, level = _sha, list(hashes)
    for _ in range(rounds):
        level = [sha(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return level


#: The two bulk hashings every node comes from: ``leaf_hashes(data)`` is SHA-256(0x00 || d) of each d,
#: ``parents(hashes, rounds)`` is ``rounds`` rounds of SHA-256(0x01 || left || right) over adjacent
#: pairs (``len(hashes)`` a multiple of 2**rounds).  In C (eventstore/_tree_native.c, OpenSSL's SHA-256)
#: when the extension was built at install: two hashlib calls an event cost batch appends 10-20 % of
#: their CPU, the same hashing in C 5-9 % (docs/performance.md).  Otherwise, or with
#: ``EVSTORE_PURE_TREE=1``, in Python: the same hashes (tests/test_tree_native.py).
leaf_hashes: Callable[[Sequence[bytes]], list[bytes]] = _py_leaf_hashes
parents: Callable[[Sequence[bytes], int], list[bytes]] = _py_parents
#: Which of the two hashes the tree: ``"C (OpenSSL 3.0.x ...)"`` or ``"Python"`` (``evstore --version``).
HASHING = "Python"
if os.environ.get("EVSTORE_PURE_TREE", "") in ("", "0"):
    try:
        from eventstore import _tree_native
    except ImportError:  # not built (no compiler at install, another platform): the pure functions
        pass
    else:
        leaf_hashes, parents = _tree_native.leaf_hashes, _tree_native.parents
        HASHING = f"C ({_tree_native.OPENSSL_VERSION})"

#: Stored levels are the multiples of STRIDE (4: a node per 16 children of the level below).
STRIDE = 4
FAN = 1 << STRIDE


def leaf_hash(data: bytes) -> bytes:
    digest: bytes = _leaf_sha(b"\x00" + data).digest()
    return digest


def node_hash(left: bytes, right: bytes) -> bytes:
    digest: bytes = _sha(b"\x01" + left + right).digest()
    return digest


def fold(hashes: Sequence[bytes]) -> bytes:
    """The root of a complete subtree given its 2^h hashes of one level (left to right)."""
    return parents(hashes, len(hashes).bit_length() - 1)[0]


class TreeSource(Protocol):
    """Where the stored tree is read: the leaves' data and the stored nodes, by index range."""

    def leaf_data(self, start: int, end: int) -> list[bytes]:
        """The data (events.hash) of leaves ``start <= i < end``, in order."""

    def nodes(self, level: int, start: int, end: int) -> list[bytes]:
        """The stored hashes of level ``level``, indexes ``start <= j < end``, in order."""

    def many(self, node_ranges: Sequence[tuple[int, int, int]], leaf_ranges: Sequence[tuple[int, int]]
             ) -> tuple[dict[tuple[int, int], bytes], dict[int, bytes]]:
        """Several ranges in one round trip each: stored nodes ``(level, start, end)`` by (level, index),
        leaves' data ``(start, end)`` by index."""


def new_nodes(old_size: int, leaf_data: Sequence[bytes], source: TreeSource) -> list[tuple[int, int, bytes]]:
    """The nodes ``(level, index, hash)`` that appending ``leaf_data`` to a tree of ``old_size``
    leaves completes, bottom up.  Reads from ``source`` only the children a first new parent has
    from before the append (fewer than :data:`FAN` per level)."""
    out: list[tuple[int, int, bytes]] = []
    first, level = old_size, 0
    current = leaf_hashes(leaf_data)  # hashes at `level`, indexes first..
    while True:
        p_first, p_end = first // FAN, (first + len(current)) // FAN
        if p_end <= p_first:
            return out
        before = p_first * FAN
        if before < first:
            earlier = (leaf_hashes(_exactly(source.leaf_data(before, first), first - before, 0, before))
                       if level == 0 else _exactly(source.nodes(level, before, first), first - before, level, before))
            children = earlier + current[:p_end * FAN - first]
        else:
            children = current[:p_end * FAN - first]
        # The children start at a parent's first child and number a multiple of FAN: STRIDE rounds of
        # pairwise hashing over the whole list give every parent (one call a level, none per parent).
        children = parents(children, STRIDE)
        level += STRIDE
        out.extend(zip([level] * len(children), range(p_first, p_first + len(children)), children, strict=True))
        current, first = children, p_first


class Frontier:
    """The incomplete right edge of the stored tree at one size, kept by the process that appends:
    at ``size`` leaves, for level 0 the data of the last ``size % FAN`` leaves and for each stored level
    ``L`` the last ``(size >> L) % FAN`` node hashes, the children a next append's first new parents
    need (:func:`new_nodes` would read them, one statement per level that completes a node).

    Valid only for the exact tree size it was made at: an append checks ``size`` under the append
    lock, and any other writer's append (another process, another thread's connection) changes the
    size first, so a stale frontier is never used; the log is append-only, so the same size means the
    same leaves.  One process appending alone reads nothing back; otherwise it reads the whole edge
    in one round trip (:meth:`load`) where it would have read part of it anyway."""

    __slots__ = ("size", "edge")

    def __init__(self, size: int, edge: dict[int, list[bytes]]) -> None:
        self.size, self.edge = size, edge

    @staticmethod
    def ranges(size: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
        """The stored ranges that make the edge at ``size``: ``(level, start, end)`` of nodes and
        ``(start, end)`` of leaves, as :meth:`TreeSource.many` takes them."""
        nodes: list[tuple[int, int, int]] = []
        leaves: list[tuple[int, int]] = []
        level, count = 0, size
        while count:
            if count % FAN:
                if level:
                    nodes.append((level, count - count % FAN, count))
                else:
                    leaves.append((count - count % FAN, count))
            level, count = level + STRIDE, count >> STRIDE
        return nodes, leaves

    @classmethod
    def load(cls, size: int, source: TreeSource) -> Frontier:
        node_ranges, leaf_ranges = cls.ranges(size)
        nodes, leaves = source.many(node_ranges, leaf_ranges)
        edge: dict[int, list[bytes]] = {}
        for start, end in leaf_ranges:
            edge[0] = _exactly([leaves[i] for i in range(start, end) if i in leaves], end - start, 0, start)
        for level, start, end in node_ranges:
            edge[level] = _exactly([nodes[(level, j)] for j in range(start, end) if (level, j) in nodes],
                                   end - start, level, start)
        return cls(size, edge)

    def get(self, level: int, start: int, end: int) -> list[bytes] | None:
        """Entries ``start <= j < end`` of the edge at ``level`` (leaf data at level 0), or None if
        the edge does not hold them all (new_nodes asks only for what it holds)."""
        have = self.edge.get(level, [])
        first = (self.size >> level) - len(have)
        return have[start - first:end - first] if first <= start and end - first <= len(have) else None

    def advance(self, leaf_data: Sequence[bytes], new: Sequence[tuple[int, int, bytes]]) -> Frontier:
        """The edge after appending ``leaf_data``, given the nodes that append completed (new_nodes')."""
        size = self.size + len(leaf_data)
        grown: dict[int, list[bytes]] = {0: self.edge.get(0, []) + list(leaf_data)}
        for level, _idx, h in new:
            grown.setdefault(level, list(self.edge.get(level, []))).append(h)
        edge: dict[int, list[bytes]] = {}
        level, count = 0, size
        while count:
            keep = count % FAN
            if keep:
                edge[level] = (grown.get(level) or self.edge.get(level, []))[-keep:]
            level, count = level + STRIDE, count >> STRIDE
        return Frontier(size, edge)


class EdgeSource:
    """A :class:`TreeSource` that reads nothing: what ``edge`` holds, else an error.  An append
    computes its nodes while PostgreSQL's COPY of its rows holds the connection, where a read would
    wait on the connection for ever; given the edge at the exact size (Frontier's promise),
    :func:`new_nodes` asks only for what it holds, and with no edge for nothing."""

    __slots__ = ("edge",)

    def __init__(self, edge: Frontier | None) -> None:
        self.edge = edge

    def _held(self, level: int, start: int, end: int) -> list[bytes]:
        got = self.edge.get(level, start, end) if self.edge is not None else None
        if got is None:
            held = "no edge is kept" if self.edge is None else f"the edge at {self.edge.size} leaves does not hold them"
            raise RuntimeError(f"The tree's nodes asked for level {level}, indexes {start}..{end - 1}, but "
                               f"{held}; nothing was appended.")
        return got

    def leaf_data(self, start: int, end: int) -> list[bytes]:
        return self._held(0, start, end)

    def nodes(self, level: int, start: int, end: int) -> list[bytes]:
        return self._held(level, start, end)

    def many(self, node_ranges: Sequence[tuple[int, int, int]], leaf_ranges: Sequence[tuple[int, int]]
             ) -> tuple[dict[tuple[int, int], bytes], dict[int, bytes]]:
        raise RuntimeError("The tree's edge is read before an append's rows are sent, never while.")


def _exactly(got: list[bytes], n: int, level: int, start: int) -> list[bytes]:
    if len(got) != n:
        what = f"leaves {start}..{start + n - 1} (positions {start + 1}..{start + n})" if level == 0 else \
            f"tree nodes of level {level}, indexes {start}..{start + n - 1}"
        raise IntegrityViolation(f"The store holds {len(got)} of the {n} {what}; the log or its Merkle tree "
                                 "is damaged: run `evstore verify`.")
    return got


def all_nodes(leaf_data: Iterable[bytes], batch: int = 1 << 12) -> Iterator[tuple[int, int, bytes]]:
    """Every node the store keeps for a log of these leaves, recomputed from the leaves alone
    (what the migration fills and ``verify`` compares with); each level's nodes in index order.

    The leaves are taken ``batch`` at a time and each level's complete groups of :data:`FAN` hashed
    as one list (STRIDE rounds of pairwise hashing, as :func:`new_nodes` does): no call per node."""
    pending: dict[int, list[bytes]] = {}  # per stored level: the hashes of a group not yet complete
    counts: dict[int, int] = {}
    it = iter(leaf_data)
    while chunk := list(islice(it, batch)):
        current, level = leaf_hashes(chunk), 0
        while current:
            left = pending.get(level)
            if left:
                current = left + current
            whole = len(current) - len(current) % FAN
            pending[level] = current[whole:]
            children = current[:whole]
            if not children:
                break
            children = parents(children, STRIDE)
            level += STRIDE
            first = counts.get(level, 0)
            counts[level] = first + len(children)
            yield from zip(repeat(level), range(first, first + len(children)), children)
            current = children


class Tree:
    """RFC 9162 subtree hashes of the first ``size`` leaves, from the stored nodes.

    ``subtree(start, end)`` is MTH(D[start:end]) (what :func:`eventstore.tlog.merkle.inclusion_proof`
    and ``consistency_proof`` take); complete aligned subtrees are read or folded from the nearest
    stored level below, the others split as the RFC does."""

    def __init__(self, source: TreeSource, size: int) -> None:
        self.source, self.size = source, size
        self._memo: dict[tuple[int, int], bytes] = {}
        self._nodes: dict[tuple[int, int], bytes] = {}  # prefetched stored nodes
        self._leaves: dict[int, bytes] = {}  # prefetched leaves' data

    def prefetch(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Read, in two round trips, every stored hash the subtrees ``ranges`` need (the ranges a
        proof will ask for: run the proof once with a subtree function that records them, since its
        steps never depend on the hashes).  On PostgreSQL a proof is then 2 queries, not 20-40."""
        node_reads: set[tuple[int, int, int]] = set()
        leaf_reads: set[tuple[int, int]] = set()
        for start, end in ranges:
            self._plan(start, end, node_reads, leaf_reads)
        if node_reads or leaf_reads:
            nodes, leaves = self.source.many(sorted(node_reads), sorted(leaf_reads))
            self._nodes.update(nodes)
            self._leaves.update(leaves)

    def _plan(self, start: int, end: int, node_reads: set[tuple[int, int, int]],
              leaf_reads: set[tuple[int, int]]) -> None:
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:
            level = n.bit_length() - 1
            stored = level - level % STRIDE
            count = 1 << (level - stored)
            first = (start // n) * count
            if stored == 0:
                leaf_reads.add((first, first + count))
            else:
                node_reads.add((stored, first, first + count))
            return
        k = 1 << ((n - 1).bit_length() - 1)
        self._plan(start, start + k, node_reads, leaf_reads)
        self._plan(start + k, end, node_reads, leaf_reads)

    def subtree(self, start: int, end: int) -> bytes:
        if not 0 <= start < end <= self.size:
            raise IntegrityViolation(f"Subtree [{start}, {end}) is outside the tree of {self.size} leaves.")
        key = (start, end)
        got = self._memo.get(key)
        if got is None:
            n = end - start
            if n & (n - 1) == 0 and start % n == 0:
                got = self._complete(n.bit_length() - 1, start // n)
            else:
                k = 1 << ((n - 1).bit_length() - 1)
                got = node_hash(self.subtree(start, start + k), self.subtree(start + k, end))
            self._memo[key] = got
        return got

    def root(self) -> bytes:
        """MTH(D[size]); SHA-256 of nothing for an empty log."""
        return self.subtree(0, self.size) if self.size else hashlib.sha256(b"").digest()

    def _complete(self, level: int, idx: int) -> bytes:
        stored = level - level % STRIDE
        count = 1 << (level - stored)
        first = idx * count
        if stored == 0:
            data = [self._leaves.get(i) for i in range(first, first + count)]
            if None in data:
                data = _exactly(self.source.leaf_data(first, first + count), count, 0, first)  # type: ignore[assignment]
            return fold(leaf_hashes(data))  # type: ignore[arg-type]
        hashes = [self._nodes.get((stored, j)) for j in range(first, first + count)]
        if None in hashes:
            hashes = _exactly(self.source.nodes(stored, first, first + count), count, stored, first)  # type: ignore[assignment]
        return fold(hashes)  # type: ignore[arg-type]
