"""Fuzzing the two ways in: `ingest` (every snapshot dialect) and `append --batch`.

Random bytes, random JSON and mutated simulator snapshots go to `evstore ingest DIALECT`; random
JSONL lines go to `evstore append --batch`.  Every input either succeeds, and then replays
exactly (the document of each snapshot at the version it reached, and its bytes), or fails with
`Error: ...` and exit 1 having written nothing (the max position and every stream's version are
unchanged).  Never a traceback.  A failing example prints its seed and blob (conftest profile).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import assert_exact

from eventstore.cli import register
from eventstore.dialects import get_dialect
from eventstore.ingest import Ingestor, load_paths
from eventstore.store import EventStore
from projections import replay as rp

# Few examples in the suite (seconds); EVSTORE_FUZZ_EXAMPLES=500 for a long hunt.
FUZZ = settings(max_examples=int(os.environ.get("EVSTORE_FUZZ_EXAMPLES", "10")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SNAPSHOT_DIALECTS = ["generic", "mapipe", "friday", "envelope", "taskflow"]

# Text the backends treat specially: NUL (PostgreSQL text), long values (varchar columns).
texts = st.sampled_from(["\x00", "a\x00b", "é" * 300, "x" * 2100]) | st.text(max_size=12)
# Keys the dialects read (task ids, what the runs index shows), as well as any.
keys = st.sampled_from(["taskId", "task_id", "id", "status", "title", "phase", "project", "name"]) | st.text(max_size=8)
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | texts)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(keys, inner, max_size=4), max_leaves=16)
json_objects = st.dictionaries(keys, json_values, max_size=6)


def dumps(doc: Any, style: int) -> bytes:
    """``doc`` as a state file might be written: indented or not, ASCII or not, newline or not."""
    indent = (None, 2, 4, "\t")[style % 4]
    text = json.dumps(doc, indent=indent, ensure_ascii=bool(style & 4))
    return (text + ("\n" if style & 8 else "")).encode("utf-8", "surrogatepass")


@cache
def simulated(dialect: str) -> tuple[Any, ...]:
    """Real-shaped snapshots of a few simulated runs (taskflow: tasks/ trees)."""
    if dialect == "taskflow":
        from eventstore.dialects.taskflow.simulate import simulate_trees

        return tuple(tree for seed in (1, 2) for _, tree in simulate_trees(
            random.Random(seed), run_id=f"FZ-{seed}", start=datetime(2026, 1, 5, tzinfo=UTC)))
    if dialect == "generic":  # no simulator of its own: any dialect's documents are generic ones
        return simulated("mapipe") + simulated("friday")
    d = get_dialect(dialect)
    return tuple(s.doc for seed in (1, 2) for s in d.simulate(random.Random(seed), run_id=f"FZ-{seed}",
                                                              start=datetime(2026, 1, 5, tzinfo=UTC))
                 if s.doc is not None)


def mutate(doc: Any, draw: Callable[..., Any], rounds: int) -> Any:
    """``doc`` with a few random edits: a member replaced, removed or added, an item dropped."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rounds):
        node, key = doc, None
        for _ in range(draw(st.integers(0, 4))):  # walk down a random path
            if isinstance(node, dict) and node:
                key = draw(st.sampled_from(sorted(node)))
            elif isinstance(node, list) and node:
                key = draw(st.integers(0, len(node) - 1))
            else:
                break
            if not isinstance(node[key], (dict, list)):
                break
            node = node[key]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if isinstance(node, dict):
            target = key if key in node else (draw(st.sampled_from(sorted(node))) if node else None)
            if action == "add" or target is None:
                node[draw(keys)] = draw(json_values)
            elif action == "remove":
                del node[target]
            else:
                node[target] = draw(json_values)
        elif isinstance(node, list):
            if node and action == "remove":
                node.pop(draw(st.integers(0, len(node) - 1)))
            else:
                node.append(draw(json_values))
    return doc


@st.composite
def snapshot_bytes(draw: Callable[..., Any], dialect: str) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "object", "object", "mutated", "mutated", "mutated"]))
    if kind == "bytes":
        return bytes(draw(st.binary(max_size=200)))
    if kind == "json":
        return dumps(draw(json_values), draw(st.integers(0, 15)))
    if kind == "object":  # what the dialects read from a document, with odd values
        doc = draw(json_objects)
        for key in ("taskId", "status", "title", "phase", "project", "schemaVersion", "skill", "state"):
            if draw(st.booleans()):
                doc[key] = draw(texts)
        return dumps(doc, draw(st.integers(0, 15)))
    real = draw(st.sampled_from(simulated(dialect)))
    return dumps(mutate(real, draw, draw(st.integers(1, 3))), draw(st.integers(0, 15)))


@st.composite
def task_trees(draw: Callable[..., Any]) -> dict[str, dict[str, bytes]]:
    """A tasks/ tree: a simulated one with files rewritten, added or removed, or folders added."""
    tree = {rel: dict(files) for rel, files in draw(st.sampled_from(simulated("taskflow"))).items()}
    names = ["SPEC.md", "PLAN.md", "VERDICT.md", "BUG_REPORT.md", "README", ".manual", ".autopilot", "x.bin"]
    for _ in range(draw(st.integers(1, 3))):
        rel = draw(st.sampled_from(sorted(tree)))
        action = draw(st.sampled_from(["write", "write", "remove", "folder"]))
        if action == "folder":
            sub = draw(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True))
            tree[f"{rel}/{sub}" if rel else sub] = {}
        elif action == "remove" and tree[rel]:
            del tree[rel][draw(st.sampled_from(sorted(tree[rel])))]
        else:
            content = draw(st.binary(max_size=120) | st.text(max_size=120).map(str.encode) | st.sampled_from(
                [b"PASS\n", b"FAIL\n", b"NEEDS_REVIEW\n", b"## Verdict\n\nFAIL: null-handling\n", b""]))
            tree[rel][draw(st.sampled_from(names))] = content
    return tree


@pytest.fixture
def cli(store_url: str) -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(register(), ["--url", store_url, *args])  # exceptions caught: asserted below

    return invoke


@pytest.fixture
def reader(store_url: str) -> Iterator[EventStore]:
    with EventStore(store_url) as s:
        yield s


def state(store: EventStore) -> tuple[int, list[tuple[str, str | None, int]]]:
    return store.max_position(), store.list_streams()


def failed_cleanly(r: Result, store: EventStore, before: Any) -> None:
    """Exit 1 with one `Error: ...`, no traceback, and nothing written."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 1, (r.exit_code, r.output)
    assert "\nError: " in "\n" + r.stderr and "Traceback" not in r.stderr, r.stderr  # after any notes
    assert state(store) == before


def ingest_and_check(cli: Callable[..., Result], store: EventStore, dialect: str, path: Path) -> None:
    before = state(store)
    r = cli("ingest", dialect, str(path), "--json")
    if r.exit_code != 0:
        failed_cleanly(r, store, before)
        return
    assert r.exception is None, repr(r.exception)
    results = [json.loads(line) for line in r.stdout.splitlines()]
    d = get_dialect(dialect)
    snaps = load_paths(d, [path])  # what ingest read, in the same order
    assert len(results) == len(snaps)
    for res, snap in zip(results, snaps, strict=True):
        if Ingestor(store, d).classify(snap).doc is None:  # an unreadable version: recorded as such
            continue
        assert_exact(rp.replay(store, res["stream"], upto_version=res["version"]).doc, snap.doc, res)
        if snap.raw is not None:
            assert rp.replay_raw(store, res["stream"], res["version"]) == snap.raw, res


@pytest.mark.parametrize("dialect", SNAPSHOT_DIALECTS)
def test_fuzzed_snapshots_ingest_exactly_or_fail_cleanly(dialect: str, cli: Callable[..., Result],
                                                         reader: EventStore, tmp_path: Path) -> None:
    if dialect == "taskflow":
        @FUZZ
        @given(tree=task_trees())
        def fuzz_tree(tree: dict[str, dict[str, bytes]]) -> None:
            from eventstore.dialects.taskflow.lifecycle import write_tree

            tasks = tmp_path / uuid.uuid4().hex / "tasks"
            write_tree(tasks, tree)
            ingest_and_check(cli, reader, dialect, tasks)

        fuzz_tree()
        return

    suffix = ".md" if dialect == "envelope" else ".json"

    @FUZZ
    @given(files=st.lists(snapshot_bytes(dialect), min_size=1, max_size=3), md=st.booleans())
    def fuzz_files(files: list[bytes], md: bool) -> None:
        folder = tmp_path / uuid.uuid4().hex
        folder.mkdir()
        for i, raw in enumerate(files):  # envelope reads .md transcripts and .json envelopes
            (folder / f"{i:02d}{suffix if md else '.json'}").write_bytes(raw)
        ingest_and_check(cli, reader, dialect, folder)

    fuzz_files()


# ---------------------------------------------------------------- append --batch

streams = st.sampled_from(["S-1", "S-2", "ünï", "a\x00b", "\ud800", "x" * 256]) | st.text(max_size=6)
times = (st.datetimes(timezones=st.timezones()).map(datetime.isoformat)
         | st.sampled_from(["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00", "2026-01-01", "soon", ""])
         | st.integers())
event_lines = st.fixed_dictionaries(
    {"stream": streams, "type": st.sampled_from(["t.x", "t\x00", ""]) | st.text(max_size=6)},
    optional={"data": json_values, "meta": json_values, "occurred_at": times,
              "expected_version": st.sampled_from(["any", "no-stream", "nope", -1, 0]) | st.integers(0, 3),
              "schema_version": st.integers(-1, 40000), "unknown": st.none()})


@st.composite
def batch_lines(draw: Callable[..., Any]) -> list[bytes]:
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["event", "event", "event", "valid", "json", "bytes"]))
        if kind == "bytes":
            lines.append(draw(st.binary(max_size=40)).replace(b"\n", b" "))
        elif kind == "json":
            lines.append(json.dumps(draw(json_values)).encode())
        elif kind == "valid":
            lines.append(json.dumps({"stream": draw(st.sampled_from(["S-1", "S-2"])), "type": "t.x",
                                     "data": draw(json_objects)}).encode("utf-8", "surrogatepass"))
        else:
            lines.append(json.dumps(draw(event_lines)).encode())
    return lines


@FUZZ
@given(lines=batch_lines())
def _batch_property(lines: list[bytes], cli: Callable[..., Result], store: EventStore, path: Path) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = state(store)
    r = cli("append", "--batch", str(path), "--json")
    if r.exit_code != 0:
        failed_cleanly(r, store, before)
        return
    assert r.exception is None, repr(r.exception)
    wanted = [json.loads(line) for line in lines if line.strip()]
    got = list(store.iter_all(after_position=before[0]))
    assert json.loads(r.stdout)["events"] == len(got) == len(wanted)
    for want, rec in zip(wanted, got, strict=True):
        assert (rec.stream_id, rec.type) == (want["stream"], want["type"])
        assert_exact(rec.payload, want.get("data", {}))
        assert_exact(rec.metadata, want.get("meta") or {})


def test_fuzzed_batches_append_exactly_or_fail_cleanly(cli: Callable[..., Result], reader: EventStore,
                                                       tmp_path: Path) -> None:
    _batch_property(cli=cli, store=reader, path=tmp_path / "batch.jsonl")
