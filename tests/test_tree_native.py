"""The Merkle tree's two hashings (eventstore/tree.py): the C accelerator (eventstore/_tree_native.c,
built at install by eventstore/_build_native.py when it can be) and the pure-Python fallback give the same hashes,
the RFC 9162 test vectors' roots, and the same nodes for any sequence of appends; evstore falls back
to Python when the extension is missing or ``EVSTORE_PURE_TREE=1``; the build compiles it where it
can and leaves it out, never failing, where it cannot.  The tests of the C path skip, saying so, where
it was not built."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tlog_merkle import LEAVES, ROOTS

from eventstore import tree

ROOT = Path(__file__).resolve().parent.parent

try:
    from eventstore import _tree_native as native
except ImportError:
    native = None  # type: ignore[assignment]

Hashing = tuple[Callable[[Sequence[bytes]], list[bytes]], Callable[[Sequence[bytes], int], list[bytes]]]
PYTHON: Hashing = (tree._py_leaf_hashes, tree._py_parents)
NATIVE: Hashing | None = (native.leaf_hashes, native.parents) if native is not None else None
needs_native = pytest.mark.skipif(native is None, reason="the C extension is not built (python eventstore/_build_native.py)")
BOTH = [pytest.param(PYTHON, id="python"),
        pytest.param(NATIVE, id="C", marks=needs_native)]


@contextlib.contextmanager
def hashing(which: Hashing) -> Iterator[None]:
    """tree's functions (new_nodes, all_nodes, fold) hashing with ``which``."""
    saved = tree.leaf_hashes, tree.parents
    tree.leaf_hashes, tree.parents = which
    try:
        yield
    finally:
        tree.leaf_hashes, tree.parents = saved


def mth(leaf_hashes: Callable[[Sequence[bytes]], list[bytes]], parents: Callable[[Sequence[bytes], int], list[bytes]],
        data: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1's MTH, every hash taken from the bulk functions under test."""
    if len(data) == 1:
        return leaf_hashes(data)[0]
    k = 1 << ((len(data) - 1).bit_length() - 1)
    return parents([mth(leaf_hashes, parents, data[:k]), mth(leaf_hashes, parents, data[k:])], 1)[0]


@pytest.mark.parametrize("which", BOTH)
def test_both_hashings_give_the_rfc_vectors_roots(which: Hashing) -> None:
    leaf_hashes, parents = which
    for n in range(1, 9):
        assert mth(leaf_hashes, parents, LEAVES[:n]) == ROOTS[n - 1], n
    # the complete subtrees of the vectors in one call: the 8 leaves' root, and the 4 and 2 below it
    hashes = leaf_hashes(LEAVES)
    assert parents(hashes, 3) == [ROOTS[7]]
    assert parents(hashes[:4], 2) == [ROOTS[3]]
    assert parents(hashes, 0) == hashes
    with hashing(which):
        assert tree.fold(hashes) == ROOTS[7]


@pytest.mark.parametrize("which", BOTH)
def test_a_count_that_does_not_pair_up_is_refused(which: Hashing) -> None:
    _, parents = which
    with pytest.raises(ValueError, match="do not pair up"):
        parents([bytes(32)] * 6, 2)


@needs_native
def test_the_c_parents_take_only_32_byte_hashes() -> None:
    assert native is not None
    with pytest.raises(ValueError, match="item 1 is not a 32-byte hash"):
        native.parents([bytes(32), bytes(31)], 1)
    with pytest.raises(TypeError):
        native.leaf_hashes([bytes(32), "text"])  # type: ignore[list-item]


@needs_native
@settings(max_examples=30, deadline=None)
@given(data=st.lists(st.binary(max_size=80), max_size=40), rounds=st.integers(0, 4), memoryviews=st.booleans())
def test_the_c_hashes_are_pythons(data: list[bytes], rounds: int, memoryviews: bool) -> None:
    """Leaves of any length (the RFC's are 0 to 16 bytes, evstore's 32; memoryviews as a driver may give),
    and parents over any whole number of groups."""
    assert NATIVE is not None
    given_data: list[bytes] = [memoryview(d) for d in data] if memoryviews else data  # type: ignore[misc]
    leaves = NATIVE[0](given_data)
    assert leaves == [hashlib.sha256(b"\x00" + d).digest() for d in data] == PYTHON[0](data)
    whole = leaves[:len(leaves) - len(leaves) % (1 << rounds)]
    assert NATIVE[1](whole, rounds) == PYTHON[1](whole, rounds)


@needs_native
@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.one_of(st.integers(1, 40), st.sampled_from([15, 16, 17, 255, 256, 300])),
                      min_size=1, max_size=10),
       seed=st.binary(min_size=4, max_size=4))
def test_random_appends_give_the_same_nodes_either_way(sizes: list[int], seed: bytes) -> None:
    """new_nodes from each process's own edge (Frontier), append after append: the C and Python paths
    give the same nodes, and together they are all_nodes' of the leaves."""
    assert NATIVE is not None
    data = [hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(sum(sizes))]
    made: dict[str, list[tuple[int, int, bytes]]] = {"python": [], "C": []}
    edges = {"python": tree.Frontier(0, {}), "C": tree.Frontier(0, {})}
    size = 0
    for n in sizes:
        batch = data[size:size + n]
        for name, which in (("python", PYTHON), ("C", NATIVE)):
            with hashing(which):
                new = tree.new_nodes(size, batch, tree.EdgeSource(edges[name]))
            made[name] += new
            edges[name] = edges[name].advance(batch, new)
        assert made["python"] == made["C"], size
        size += n
    with hashing(NATIVE):
        assert sorted(made["C"]) == sorted(tree.all_nodes(data, batch=64))


@needs_native
def test_the_built_extension_is_of_the_current_source() -> None:
    """An in-place build (editable install) compiled from an older eventstore/_tree_native.c would
    test, and run, old code: it carries its source's digest."""
    assert native is not None
    source = Path(native.__file__).with_name("_tree_native.c")
    if not source.is_file():
        pytest.skip("an installed extension without its source beside it")
    assert native.SOURCE_SHA256 == hashlib.sha256(source.read_bytes()).hexdigest(), \
        "eventstore/_tree_native.c changed since it was built: run `python eventstore/_build_native.py`"


def _hashing_in_a_child(env: dict[str, str], prelude: str = "") -> str:
    code = (f"{prelude}from eventstore import tree; import os; d = [os.urandom(32) for _ in range(300)]; "
            "assert sorted(tree.new_nodes(0, d, tree.EdgeSource(None))) == sorted(tree.all_nodes(d)); "
            "print(tree.HASHING)")
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_evstore_hashes_in_python_when_told_or_when_the_extension_is_missing() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("EVSTORE_PURE_TREE", None)
    assert _hashing_in_a_child({**env, "EVSTORE_PURE_TREE": "1"}) == "Python"
    # no extension: an import of it fails as it does where it was never built
    assert _hashing_in_a_child(env, "import sys; sys.modules['eventstore._tree_native'] = None; ") == "Python"
    assert _hashing_in_a_child(env).startswith("C (OpenSSL") == (native is not None)


def test_the_build_hook_leaves_the_extension_out_when_it_cannot_compile(tmp_path: Path) -> None:
    """No compiler, or EVSTORE_PURE_TREE=1: a reason for a warning, never an exception (the install goes on
    with a pure wheel; tests/test_wheel.py builds one)."""
    from eventstore import _build_native as hatch_build
    out = tmp_path / hatch_build.filename()
    env = {k: v for k, v in os.environ.items() if k != "EVSTORE_PURE_TREE"}
    why = hatch_build.compile_native(out, {**env, "CC": str(tmp_path / "no-such-cc")})
    assert why is not None and "no C compiler" in why and not out.exists()
    why = hatch_build.compile_native(out, {**env, "EVSTORE_PURE_TREE": "1"})
    assert why == "EVSTORE_PURE_TREE is set" and not out.exists()


def test_version_says_which_hashing_keeps_the_tree() -> None:
    from click.testing import CliRunner

    from eventstore.cli import cli

    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("evstore, version ") and f"\nMerkle tree hashing: {tree.HASHING}\n" in r.output


def test_the_build_hook_compiles_where_a_compiler_and_openssls_headers_are(tmp_path: Path) -> None:
    """The hook's own build (what the wheel ships), loaded from where it was written: about 0.4 s of CPU."""
    import importlib.util
    import shutil
    import sysconfig

    from eventstore import _build_native as hatch_build
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None or not Path("/usr/include/openssl/sha.h").is_file():
        pytest.skip("no C compiler or no OpenSSL headers in /usr/include (Debian: build-essential, libssl-dev)")
    out = tmp_path / hatch_build.filename()
    env = {k: v for k, v in os.environ.items() if k != "EVSTORE_PURE_TREE"}
    assert hatch_build.compile_native(out, env) is None
    spec = importlib.util.spec_from_file_location("eventstore._tree_native", out)
    assert spec is not None and spec.loader is not None
    built = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(built)
    assert built.SOURCE_SHA256 == hashlib.sha256((ROOT / "eventstore" / "_tree_native.c").read_bytes()).hexdigest()
    assert built.leaf_hashes(LEAVES) == PYTHON[0](LEAVES) and built.parents(built.leaf_hashes(LEAVES), 3) == [ROOTS[7]]
