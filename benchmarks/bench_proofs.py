"""The Merkle tree's costs (issue 34): checkpoint and proof time at 10^5 and 10^6 events, the append
overhead of maintaining the tree, and proof sizes.

    python benchmarks/bench_proofs.py                      # 10^5 and 10^6 events, SQLite
    python benchmarks/bench_proofs.py --sizes 100000 --backend postgresql
    python benchmarks/bench_proofs.py --quick              # 10^4 and 10^5: a smoke run

For each size N a fresh store is filled with N events of ~500 bytes (1,000 per append, streams of
1,000), then it measures (medians):

* checkpoint: ``checkpoints.make_checkpoint`` (the tree's root at N from the stored nodes, an
  Ed25519 signature, the record in ``tree_checkpoints``);
* proof: an inclusion proof of a random event against that checkpoint (``checkpoints.inclusion``:
  finding the event, checking that the tree at the checkpoint's size still hashes to its root, the
  RFC 9162 path), and a consistency proof between two random sizes (same checks, both roots);
* proof size: the longest inclusion and consistency proofs drawn, against 32·⌈log2 N⌉ bytes.

Append overhead: the same batch appends (``--overhead-events``, 1,000 per call) with the tree
maintained and with the append transaction's tree steps stubbed out (``_tree_edge``: no edge looked
up or read; ``_grow_tree``: no node hashed, so none inserted; everything else the same), alternated
``--repeat`` times on fresh databases; wall time and process CPU time, medians and the range of each
run against the run beside it.  ``--by-append N`` also alternates append by append between two stores
in one process (N appends each; the events built outside the timing), which a busy machine's drift
disturbs far less than runs of seconds.  "With the tree" hashes it as evstore does here (``tree.HASHING``:
C when the extension was built at install, else Python; ``EVSTORE_PURE_TREE=1`` forces Python); with
``--python-too`` a third store alternates with them whose tree is hashed in Python (tree's pure functions)
while the C extension is in use, so both costs come from the same minutes.
The targets (proof < 10 ms and checkpoint < 1 s at 10^6, overhead < 10 %, proof ≤ 32·⌈log2 n⌉
bytes) are printed as met / NOT met.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # and the checkout's eventstore

from _common import log, make_payloads  # noqa: E402

from eventstore import checkpoints, migrate, tree  # noqa: E402
from eventstore import store as store_module  # noqa: E402
from eventstore.store import EventStore, NewEvent  # noqa: E402
from eventstore.tlog.note import NoteSigner  # noqa: E402


@contextmanager
def fresh_store(backend: str, workdir: Path, pg_url: str | None) -> Iterator[EventStore]:
    """An empty, migrated store on ``backend`` (a SQLite file under ``workdir``, or a private
    PostgreSQL schema dropped afterwards)."""
    if backend == "sqlite":
        d = Path(tempfile.mkdtemp(dir=workdir))
        store = EventStore(f"sqlite:///{d}/events.db", check_schema=False)
        try:
            migrate.upgrade(store.engine)
            yield store
        finally:
            store.close()
            shutil.rmtree(d, ignore_errors=True)
        return
    import uuid

    import psycopg

    assert pg_url is not None
    schema = f"evbench_proofs_{uuid.uuid4().hex[:8]}"
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in pg_url else "?"
    store = EventStore(f"{pg_url}{sep}options=-csearch_path%3D{schema}", check_schema=False)
    try:
        migrate.upgrade(store.engine)
        yield store
    finally:
        store.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def fill(store: EventStore, payloads: list[dict[str, Any]], n: int, batch: int = 1000) -> float:
    """Append ``n`` events, ``batch`` per call, streams of 1,000; the wall time it took."""
    t = time.perf_counter()
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        store.append(f"run-{lo // 1000}", [NewEvent("bench.noted", payloads[i % len(payloads)]) for i in range(lo, hi)])
        if lo and lo % 100_000 == 0:
            log(f"  {lo:,} events")
    return time.perf_counter() - t


def median_ms(fn: Callable[[], Any], times: int) -> float:
    out = []
    for _ in range(times):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def measure_size(store: EventStore, n: int, rng: random.Random, signer: NoteSigner, reps: int) -> dict[str, Any]:
    checkpoint_ms = median_ms(lambda: checkpoints.make_checkpoint(store, signer), 5)
    note = checkpoints.latest_checkpoint(store)
    assert note is not None and note.tree_size == n
    old_sizes = [rng.randrange(1, n) for _ in range(reps)]
    old_notes = {}
    for size in set(old_sizes):  # checkpoints of earlier sizes, signed from the stored tree
        with store.tree(size) as old_tree:
            from eventstore.tlog.checkpoint import Checkpoint, sign_checkpoint

            old_notes[size] = sign_checkpoint(Checkpoint(signer.name, size, old_tree.root()), signer)
    inc_ms, con_ms, inc_len, con_len = [], [], 0, 0
    for i in range(reps):
        version = rng.randrange(1, min(n, 1000) + 1)
        stream = f"run-{rng.randrange(0, n // 1000)}"
        t0 = time.perf_counter()
        proof = checkpoints.inclusion(store, note.note, stream_id=stream, version=version)
        inc_ms.append((time.perf_counter() - t0) * 1000)
        inc_len = max(inc_len, len(proof.inclusion))
        t0 = time.perf_counter()
        con = checkpoints.consistency(store, old_notes[old_sizes[i]], note.note)
        con_ms.append((time.perf_counter() - t0) * 1000)
        con_len = max(con_len, len(con.consistency))
    with store.tree(n) as t:  # the RFC path alone, without finding the event or checking the root
        bare = median_ms(lambda: __import__("eventstore.tlog.merkle", fromlist=["x"]).inclusion_proof(
            rng.randrange(n), n, t.subtree), reps)
    bound = 32 * math.ceil(math.log2(n))
    return {"events": n, "checkpoint_ms": checkpoint_ms, "inclusion_ms": statistics.median(inc_ms),
            "inclusion_p95_ms": sorted(inc_ms)[int(0.95 * (len(inc_ms) - 1))], "inclusion_path_ms": bare,
            "consistency_ms": statistics.median(con_ms), "inclusion_bytes": 32 * inc_len,
            "consistency_bytes": 32 * con_len, "bound_bytes": bound}


@contextmanager
def without_tree() -> Iterator[None]:
    """The append path with none of the tree's work: no edge looked up or read, no node hashed,
    none inserted (the transaction's two tree steps stubbed out; everything else the same)."""
    txn = store_module._Transaction
    real = txn._tree_edge, txn._grow_tree
    txn._tree_edge = lambda self, size, count: None  # type: ignore[method-assign]
    txn._grow_tree = lambda self, size, leaves, edge: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        txn._tree_edge, txn._grow_tree = real  # type: ignore[method-assign]


def overhead(backend: str, workdir: Path, pg_url: str | None, payloads: list[dict[str, Any]], n: int,
             repeat: int) -> dict[str, Any]:
    """Batch appends with and without the tree's work, alternated on fresh stores; every run's wall
    and CPU seconds, their medians, and the overhead of the medians."""
    runs: dict[str, list[tuple[float, float]]] = {"with tree": [], "without": []}
    for r in range(repeat):
        for label in (("with tree", "without") if r % 2 == 0 else ("without", "with tree")):
            with fresh_store(backend, workdir, pg_url) as store, \
                    (without_tree() if label == "without" else contextlib.nullcontext()):
                c = time.process_time()
                wall = fill(store, payloads, n)
                runs[label].append((wall, time.process_time() - c))
    out: dict[str, Any] = {"runs": runs}
    for label, values in runs.items():
        out[label] = (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
    w, c = out["with tree"], out["without"]
    out["wall_overhead"] = w[0] / c[0] - 1
    out["cpu_overhead"] = w[1] / c[1] - 1
    # Run r with against run r without (each pair ran back to back): the spread a busy machine gives.
    pairs = [(a[0] / b[0] - 1, a[1] / b[1] - 1) for a, b in zip(runs["with tree"], runs["without"], strict=True)]
    out["wall_best"] = min(v[0] for v in runs["with tree"]) / min(v[0] for v in runs["without"]) - 1
    out["cpu_best"] = min(v[1] for v in runs["with tree"]) / min(v[1] for v in runs["without"]) - 1
    out["wall_range"] = (min(p[0] for p in pairs), max(p[0] for p in pairs))
    out["cpu_range"] = (min(p[1] for p in pairs), max(p[1] for p in pairs))
    return out


def overhead_by_append(backend: str, workdir: Path, pg_url: str | None, payloads: list[dict[str, Any]],
                       appends: int, python_too: bool = False) -> dict[str, Any]:
    """Two fresh stores in one process, 1,000-event appends alternated append by append between the one
    with the tree and the one with its steps stubbed out (the events built outside the timing): a
    machine's load drifts between two runs of seconds far more than between two appends.  ``python_too``:
    a third store whose tree is hashed by tree's pure-Python functions (when the C ones are in use)."""
    labels = ["with tree", "without"] + (["Python hashing"] if python_too else [])
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    in_use = tree.leaf_hashes, tree.parents

    @contextmanager
    def variant(label: str) -> Iterator[None]:
        if label == "without":
            with without_tree():
                yield
        elif label == "Python hashing":
            tree.leaf_hashes, tree.parents = tree._py_leaf_hashes, tree._py_parents
            try:
                yield
            finally:
                tree.leaf_hashes, tree.parents = in_use
        else:
            yield

    with contextlib.ExitStack() as stack:
        stores = {label: stack.enter_context(fresh_store(backend, workdir, pg_url)) for label in labels}
        for k in range(appends):
            events = [NewEvent("bench.noted", payloads[(k * 1000 + i) % len(payloads)]) for i in range(1000)]
            for label in (labels if k % 2 == 0 else labels[::-1]):
                with variant(label):
                    t, c = time.perf_counter(), time.process_time()
                    stores[label].append(f"run-{k}", events)
                    times[label].append((time.perf_counter() - t, time.process_time() - c))
    out: dict[str, Any] = {"appends": appends}
    for label, values in times.items():
        out[label] = (statistics.median(v[0] for v in values), sum(v[1] for v in values) / appends)
    out["wall"] = (out["with tree"][0], out["without"][0])
    out["cpu"] = (out["with tree"][1], out["without"][1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="log sizes to measure (default 10^5 and 10^6)")
    ap.add_argument("--quick", action="store_true", help="10^4 and 10^5 events, fewer repeats")
    ap.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--pg-url", default=None, help="PostgreSQL URL (default $EVSTORE_TEST_POSTGRES_URL)")
    ap.add_argument("--proofs", type=int, default=50, help="proofs drawn per size")
    ap.add_argument("--overhead-events", type=int, default=100_000, help="events per append-overhead run")
    ap.add_argument("--repeat", type=int, default=5, help="append-overhead runs per variant")
    ap.add_argument("--by-append", type=int, default=0, metavar="N",
                    help="also N appends a variant alternated append by append in one process (overhead_by_append)")
    ap.add_argument("--python-too", action="store_true",
                    help="with --by-append and the C extension in use, a third store whose tree is hashed in "
                         "Python (tree's pure functions): both hashings' costs from the same minutes")
    ap.add_argument("--dir", default=None, help="where SQLite files go (default: a temporary directory)")
    args = ap.parse_args(argv)
    import os

    pg_url = args.pg_url or os.environ.get("EVSTORE_TEST_POSTGRES_URL")
    if args.backend == "postgresql" and not pg_url:
        ap.error("--backend postgresql needs --pg-url or $EVSTORE_TEST_POSTGRES_URL")
    if args.python_too and not args.by_append:
        ap.error("--python-too adds a store to the appends alternated one by one: give --by-append N too")
    if args.python_too and tree.HASHING == "Python":
        ap.error("--python-too compares with the C hashing, which is not in use here (EVSTORE_PURE_TREE is set, "
                 "or the extension is not built: python eventstore/_build_native.py)")
    sizes = [10_000, 100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.quick:
        args.overhead_events, args.repeat, args.proofs = 20_000, 3, 20
    workdir = Path(tempfile.mkdtemp(prefix="evbench-proofs-", dir=args.dir))
    payloads = make_payloads(10_000)
    signer = NoteSigner.generate("bench.example/log")
    rng = random.Random(34)
    results = []
    try:
        for n in sizes:
            with fresh_store(args.backend, workdir, pg_url) as store:
                log(f"filling {n:,} events ({args.backend}) ...")
                took = fill(store, payloads, n)
                log(f"  {n / took:,.0f} events/s")
                results.append(measure_size(store, n, rng, signer, args.proofs))
        log(f"append overhead: {args.overhead_events:,} events, 1,000 per append, {args.repeat} runs each ...")
        ov = overhead(args.backend, workdir, pg_url, payloads, args.overhead_events, args.repeat)
        by_append = overhead_by_append(args.backend, workdir, pg_url, payloads, args.by_append, args.python_too) \
            if args.by_append else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(f"evstore Merkle tree, {args.backend}, stored levels every {tree.STRIDE}, hashed in {tree.HASHING} (medians)")
    print("| events | checkpoint | inclusion proof (p95) | RFC path alone | consistency proof | "
          "inclusion / consistency bytes | 32·⌈log2 n⌉ |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['events']:,} | {r['checkpoint_ms']:.1f} ms | {r['inclusion_ms']:.2f} ms "
              f"({r['inclusion_p95_ms']:.2f}) | {r['inclusion_path_ms']:.2f} ms | {r['consistency_ms']:.2f} ms | "
              f"{r['inclusion_bytes']} / {r['consistency_bytes']} | {r['bound_bytes']} |")
    w, c = ov["with tree"], ov["without"]
    print(f"\nappend, 1,000 events per call, {args.overhead_events:,} events: with the tree {w[0]:.2f} s wall "
          f"{w[1]:.2f} s CPU; without {c[0]:.2f} s wall {c[1]:.2f} s CPU: overhead {ov['wall_overhead']:+.1%} wall, "
          f"{ov['cpu_overhead']:+.1%} CPU (medians); run against run: {ov['wall_range'][0]:+.1%} to "
          f"{ov['wall_range'][1]:+.1%} wall, {ov['cpu_range'][0]:+.1%} to {ov['cpu_range'][1]:+.1%} CPU; "
          f"fastest against fastest: {ov['wall_best']:+.1%} wall, {ov['cpu_best']:+.1%} CPU")
    for label, values in ov["runs"].items():
        print(f"  {label}: " + ", ".join(f"{v[0]:.2f} s ({v[1]:.2f} CPU)" for v in values))
    if by_append is not None:
        (ww, wo), (cw, co) = by_append["wall"], by_append["cpu"]
        print(f"append by append, {by_append['appends']} appends of 1,000 each way, events built outside the timing: "
              f"median wall {ww * 1000:.1f} ms with the tree, {wo * 1000:.1f} ms without ({ww / wo - 1:+.1%}); "
              f"mean CPU {cw * 1000:.2f} ms, {co * 1000:.2f} ms ({cw / co - 1:+.1%})")
        if "Python hashing" in by_append:
            nw, nc = by_append["Python hashing"]
            print(f"  the tree hashed in Python (EVSTORE_PURE_TREE's path): median wall {nw * 1000:.1f} ms "
                  f"({nw / wo - 1:+.1%}), mean CPU {nc * 1000:.2f} ms ({nc / co - 1:+.1%})")
    top = results[-1]
    print("\ntargets:")
    print(f"  proof < 10 ms at {top['events']:,}: {top['inclusion_ms']:.2f} ms, {met(top['inclusion_ms'] < 10)}")
    print(f"  checkpoint < 1 s at {top['events']:,}: {top['checkpoint_ms']:.1f} ms, {met(top['checkpoint_ms'] < 1000)}")
    print(f"  append overhead < 10 %: CPU {ov['cpu_overhead']:+.1%}, {met(ov['cpu_overhead'] < 0.10)}; wall "
          f"{ov['wall_overhead']:+.1%}, {met(ov['wall_overhead'] < 0.10)} (wall time on a shared machine is noisy)")
    print(f"  proof ≤ 32·⌈log2 n⌉ bytes: {met(all(r['inclusion_bytes'] <= r['bound_bytes'] for r in results))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
