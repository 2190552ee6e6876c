"""A measuring aid, not part of evstore: :func:`eventstore.tree.new_nodes` with its hashing in C
(merkle_native.c), to show what the append's tree costs without two Python SHA-256 calls an event.

    python benchmarks/native_tree/native_tree.py build   # gcc, Python's headers, libssl-dev's headers
    python benchmarks/native_tree/native_tree.py check   # the same nodes as tree.new_nodes, random appends

``bench_proofs.py --native-prototype`` alternates a third store whose appends use it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # the checkout's eventstore

from eventstore import tree  # noqa: E402


def build() -> Path:
    """Compile merkle_native.c beside this file; the module's path."""
    out = HERE / f"_merkle_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    str(HERE / "merkle_native.c"), "-lcrypto", "-o", str(out)], check=True)
    return out


def native() -> Any:
    sys.path.insert(0, str(HERE))
    try:
        import _merkle_native  # type: ignore[import-not-found]
    except ImportError as exc:
        raise SystemExit(f"{exc}: build it first (python {HERE / 'native_tree.py'} build)") from None
    finally:
        sys.path.remove(str(HERE))
    return _merkle_native


def make_new_nodes() -> Any:
    """A drop-in for tree.new_nodes: the same nodes from the same reads, hashed in C."""
    m = native()
    leaves, pairs, fan, stride = m.leaves, m.pairs, tree.FAN, tree.STRIDE

    def new_nodes(old_size: int, leaf_data: Sequence[bytes], source: tree.TreeSource) -> list[tuple[int, int, bytes]]:
        out: list[tuple[int, int, bytes]] = []
        first, level = old_size, 0
        current = leaves(leaf_data)  # the hashes at `level` from index `first`, joined
        while True:
            n = len(current) // 32
            p_first, p_end = first // fan, (first + n) // fan
            if p_end <= p_first:
                return out
            before = p_first * fan
            children = current[:(p_end * fan - first) * 32]
            if before < first:
                earlier = (leaves(tree._exactly(source.leaf_data(before, first), first - before, 0, before))
                           if level == 0 else
                           b"".join(tree._exactly(source.nodes(level, before, first), first - before, level, before)))
                children = earlier + children
            for _ in range(stride):
                children = pairs(children)
            level += stride
            out.extend(zip([level] * (len(children) // 32), range(p_first, p_end),
                           [children[i:i + 32] for i in range(0, len(children), 32)], strict=True))
            current, first = children, p_first

    return new_nodes


def check(events: int = 20_000) -> None:
    """The prototype's nodes are tree.new_nodes' for random append sizes, each from its own edge."""
    fast = make_new_nodes()
    rng = random.Random(34)
    data = [os.urandom(32) for _ in range(events)]
    edges = [tree.Frontier(0, {}), tree.Frontier(0, {})]
    size = 0
    while size < events:
        batch = data[size:size + rng.choice([1, 3, 15, 16, 17, 255, 256, 300, 1000, 4097])]
        got = [f(size, batch, tree.EdgeSource(e)) for f, e in zip((tree.new_nodes, fast), edges, strict=True)]
        assert got[0] == got[1], size
        edges = [e.advance(batch, got[0]) for e in edges]
        size += len(batch)
    print(f"the C prototype's nodes are tree.new_nodes' over {events:,} leaves")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    if what == "build":
        print(build())
    else:
        check()
