"""The dialect contract: what every registered dialect promises, run for each without a test file
of its own (as eventsourcing's recorder test cases are for recorders).

The dialects come from the registry (``available()``: every entry point in ``evstore.dialects``
that loads), so a new dialect, built in or from another package, runs the suite by being
registered.  What applies depends on what the dialect has, decided here from the dialect itself:

* **a simulator** (``simulate`` overridden; a *snapshot* dialect): the lens law on simulated
  histories, exact replay through a real store (SQLite and PostgreSQL) of the snapshots rendered to
  bytes as an orchestrator would write them, byte-exact ``replay --raw``, determinism per seed, and
  ``check_identity`` refusing every other simulated dialect's documents;
* **no simulator and no catalog** (document events only, any JSON accepted): the lens law and exact
  replay on histories of random JSON edits generated here;
* **no simulator but a catalog** (a dialect that records lines, not snapshots, and refuses a JSON
  file as one): the catalog parts only; the exclusion from the snapshot parts is itself checked
  (its ``load`` must refuse a snapshot file) and named by :func:`test_every_dialect_is_in_one_part`;
* **every dialect**: catalog tags under the dialect's name and unique across dialects, each catalog
  type encodes and decodes exactly and has the dialect's own summary line for ``evstore log``; its
  analytics facts (of one event of each catalog type and, with a simulator, of simulated runs) match
  the schema it declares, and its views and metric sections run over them.

Simulated runs are bounded (:data:`MAX_SNAPSHOTS`) so the suite stays fast.  Documents are compared
with :mod:`oracles` (structural equality and the stdlib's JSON text), never ``documents.same``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import random
import types
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from analytics_fixtures import one_stream_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import assert_exact, canonical, exact

from eventstore import documents
from eventstore.dialects import available, get_dialect
from eventstore.dialects.base import Dialect, Snapshot, parse_json_document
from eventstore.errors import IngestError
from eventstore.events import Event, decode_event, encode_event
from eventstore.ingest import Ingestor
from eventstore.store import EventStore, RecordedEvent
from projections.replay import replay, replay_raw

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
MAX_SNAPSHOTS = 40  # of one simulated run: enough to reach every phase, bounded for speed


def has_simulator(d: Dialect) -> bool:
    return type(d).simulate is not Dialect.simulate


ALL = available()
SIMULATED = [n for n in ALL if has_simulator(get_dialect(n))]
ANY_JSON = [n for n in ALL if not has_simulator(get_dialect(n)) and not get_dialect(n).catalog]
LINES = [n for n in ALL if not has_simulator(get_dialect(n)) and get_dialect(n).catalog]
SNAPSHOT = SIMULATED + ANY_JSON


# ------------------------------------------------------------------ histories


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return rng.randint(-5, 5)
    if kind == 1:
        return rng.choice([0.5, -0.0, 1.0, 2.5e10])
    if kind == 2:
        return rng.choice(["", "a", "é\u2028", "\\/", "日本"])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return rng.randint(0, 3)
    if kind == 6:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice("zyxab") + str(i): random_json(rng, depth + 1) for i in range(rng.randrange(4))}


def edited(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` after one random edit: a member set, removed, retyped (1 -> 1.0) or the keys reordered."""
    doc = json.loads(json.dumps(doc))
    op = rng.randrange(4)
    keys = list(doc)
    if op == 0 or not keys:
        doc[rng.choice("qrsab") + str(rng.randrange(3))] = random_json(rng)
    elif op == 1:
        del doc[rng.choice(keys)]
    elif op == 2:
        k = rng.choice(keys)
        v = doc[k]
        doc[k] = float(v) if type(v) is int else int(v) if type(v) is float and v == int(v) else random_json(rng)
    else:
        rng.shuffle(keys)
        doc = {k: doc[k] for k in keys}
    return doc


def history(name: str, seed: int) -> list[Snapshot]:
    """A bounded history of ``name``'s documents: its simulator's, else random JSON edits."""
    d = get_dialect(name)
    if has_simulator(d):
        run = d.simulate(random.Random(seed), run_id=f"{name.upper()}-{seed}", start=START)
        return list(itertools.islice(run, MAX_SNAPSHOTS))
    rng = random.Random(seed)
    doc: dict[str, Any] = {"id": f"{name}-{seed}", **{f"k{i}": random_json(rng) for i in range(3)}}
    out = [Snapshot(doc=doc)]
    for _ in range(12):
        doc = edited(rng, doc)
        doc["id"] = f"{name}-{seed}"
        out.append(Snapshot(doc=doc))
    return out


def documents_of(snaps: list[Snapshot]) -> list[Any]:
    return [s.doc for s in snaps if s.doc is not None]


def render(doc: Any, n: int) -> bytes:
    """``doc`` written as an orchestrator would: indented by spaces or tabs, or compact, with or
    without non-ASCII and ``/`` escaped (``n`` picks the style)."""
    style = n % 4
    if style == 0:
        return json.dumps(doc, indent=2, ensure_ascii=False).encode()
    if style == 1:
        return json.dumps(doc, indent="\t").encode() + b"\n"
    if style == 2:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps(doc, indent=4).replace("/", "\\/").encode()


# ------------------------------------------------------------------ the parts


def test_every_dialect_is_in_one_part() -> None:
    """Each registered dialect runs the snapshot parts or is a line dialect, whose exclusion is
    checked: its ``load`` refuses a snapshot file (it records lines)."""
    assert ALL and SIMULATED, ALL
    assert sorted(SIMULATED + ANY_JSON + LINES) == sorted(ALL)
    assert not set(SIMULATED) & set(ANY_JSON) and not set(SNAPSHOT) & set(LINES)


@pytest.mark.parametrize("name", LINES)
def test_a_line_dialect_refuses_snapshot_files(name: str, tmp_path: Path) -> None:
    """Excluded from the lens and replay parts: it has no simulator of snapshots and reads no
    state file; its documents are folded from line events (its own tests cover them)."""
    probe = tmp_path / "state.json"
    probe.write_text('{"id": "x"}')
    with pytest.raises(IngestError, match="line"):
        list(get_dialect(name).load(probe))


@pytest.mark.parametrize("name", SNAPSHOT)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_lens_law_on_simulated_histories(name: str, seed: int) -> None:
    """fold(evolve, prev, observe(prev, next)) is ``next`` exactly, for every step of a history;
    the fold starts from the previous fold's result, as replay does."""
    d = get_dialect(name)
    prev = folded = None
    for nxt in documents_of(history(name, seed)):
        events = d.observe(prev, nxt)
        folded = d.fold(documents.copy(folded), events)
        assert exact(folded, nxt) and canonical(folded) == canonical(nxt), (name, seed)
        # events survive their encoding: the stored form folds the same
        again = [decode_event(e.event_type(), e.schema_version, encode_event(e)) for e in events]
        assert canonical(d.fold(documents.copy(prev), again)) == canonical(nxt)
        prev = nxt


@pytest.mark.parametrize("name", SIMULATED)
def test_the_simulator_is_deterministic_per_seed(name: str) -> None:
    def fingerprint(seed: int) -> list[tuple[str, str | None, str | None, list[bytes]]]:
        return [(canonical(s.doc), s.occurred_at.isoformat() if s.occurred_at else None, s.stream_hint,
                 [encode_event(e) for e in s.events]) for s in history(name, seed)]

    first = fingerprint(11)
    assert first and fingerprint(11) == first
    assert any(fingerprint(seed) != first for seed in (12, 13, 14)), "the seed changes nothing"


@pytest.mark.parametrize("name", SNAPSHOT)
def test_ingested_histories_replay_exactly_and_byte_for_byte(store: EventStore, name: str) -> None:
    """Rendered to bytes, ingested through a real store: every version replays to ``json.loads``
    of its bytes, and ``replay --raw`` gives the bytes back."""
    d = get_dialect(name)
    ing = Ingestor(store, d)
    written: dict[tuple[str, int], bytes] = {}
    for i, snap in enumerate(history(name, 1)):
        if snap.doc is not None:
            raw = render(snap.doc, i)  # each version in another style: the bytes, not the style, come back
            snap = dataclasses.replace(snap, doc=parse_json_document(raw, "simulated"), raw=raw)
        r = ing.ingest(snap)
        if snap.raw is not None and r.events:
            written[(r.stream, r.version)] = snap.raw
    assert len(written) >= 4, name
    for (stream, version), raw in written.items():
        got = replay(store, stream, upto_version=version, use_cache=False).doc
        assert_exact(got, json.loads(raw), name, stream, version)
        assert replay_raw(store, stream, version, doc=got) == raw, (name, stream, version)


@pytest.mark.parametrize("name", SIMULATED)
def test_simulated_runs_use_domain_events(name: str) -> None:
    """A dialect with a catalog explains its simulated runs with it, not only with patches."""
    d = get_dialect(name)
    if not d.catalog:
        pytest.fail(f"{name} has a simulator but no event catalog")
    prev, seen = None, set()
    for seed in (1, 2):
        for nxt in documents_of(history(name, seed)):
            seen |= {type(e) for e in d.observe(prev, nxt)}
            prev = nxt
        prev = None
    assert seen & set(d.catalog), name


IDENTITY_PAIRS = [(a, b) for a in SIMULATED for b in SIMULATED if a != b]


@pytest.mark.parametrize(("owner", "other"), IDENTITY_PAIRS)
def test_another_dialects_documents_are_refused(owner: str, other: str) -> None:
    """``owner`` refuses every document ``other`` simulates, naming itself and where."""
    d = get_dialect(owner)
    assert d.identity_keys or d.requires_object, f"{owner} would take any document"
    assert documents_of(history(other, 5))
    for i, doc in enumerate(documents_of(history(other, 5))[:10]):
        with pytest.raises(IngestError, match=rf"{other}-{i}: .*{owner}"):
            d.check_identity(doc, f"{other}-{i}")


@pytest.mark.parametrize("name", SIMULATED)
def test_own_documents_are_accepted(name: str) -> None:
    d = get_dialect(name)
    for doc in documents_of(history(name, 5)):
        assert d.identity_problem(doc, "simulated") is None


# ------------------------------------------------------------------ the catalog


def sample(tp: Any, rng: random.Random) -> Any:
    """A value of type ``tp`` (a field's annotation), chosen to be non-empty where it can."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return {"k": [1, 2.5, "x"]}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None) and a is not msgspec.UnsetType]
        return sample(options[0], rng) if options else None
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return [sample(args[0], rng)] if args else []
    if origin is dict:
        return {"k": sample(typing.get_args(tp)[1], rng)} if typing.get_args(tp) else {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp)).value
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        hints = typing.get_type_hints(tp)
        return {f: sample(hints[f], rng) for f in tp.__struct_fields__}
    if tp is bool:
        return True
    if tp is int:
        return rng.randint(1, 9)
    if tp is float:
        return 1.5
    if tp is str:
        return "x-" + str(rng.randint(1, 9))
    if tp is datetime:
        return START.isoformat()
    return None


def instance(cls: type[Event]) -> Event:
    rng = random.Random(cls.event_type())
    hints = typing.get_type_hints(cls)
    data = {f: sample(hints[f], rng) for f in cls.__struct_fields__}
    return msgspec.convert(data, cls)


@pytest.mark.parametrize("name", ALL)
def test_catalog_tags_are_the_dialects_own(name: str) -> None:
    d = get_dialect(name)
    tags = [c.event_type() for c in d.catalog]
    assert all(t.startswith(f"{name}.") for t in tags), tags
    assert set(d.file_write_types) <= set(tags)  # projections.writers finds a type's dialect by its prefix
    assert len(set(tags)) == len(tags)
    others = {c.event_type() for n in ALL if n != name for c in get_dialect(n).catalog}
    assert not set(tags) & others


@pytest.mark.parametrize("name", ALL)
def test_every_catalog_type_round_trips_and_has_its_own_summary(name: str) -> None:
    """Each type encodes and decodes to an equal event, and ``evstore log`` shows the dialect's own
    line for it (``summary``), not the generic ``field=value`` fallback."""
    d = get_dialect(name)
    missing = []
    for cls in d.catalog:
        ev = instance(cls)
        back = decode_event(cls.event_type(), cls.schema_version, encode_event(ev))
        assert back == ev and type(back) is cls
        line = d.summary(ev)
        if not (isinstance(line, str) and line.strip()) or d.summarize(ev) != line:
            missing.append(cls.event_type())
    assert not missing, f"{name}: no summary line for {missing}"


# ------------------------------------------------------------------ analytics facts


_PY_TYPES: dict[str, tuple[type, ...]] = {"VARCHAR": (str,), "BIGINT": (int,), "BOOLEAN": (bool,),
                                          "DOUBLE": (float, int), "TIMESTAMPTZ": (datetime,)}


def _recorded(events: list[tuple[str, Event]], dialect: str) -> list[RecordedEvent]:
    """Events as the store would give them back (positions in order, the dialect in meta)."""
    out: list[RecordedEvent] = []
    versions: dict[str, int] = {}
    for position, (stream, ev) in enumerate(events, 1):
        versions[stream] = versions.get(stream, 0) + 1
        at = datetime(2026, 11, 1, 9, 0, tzinfo=UTC).isoformat()
        out.append(RecordedEvent(position, stream, versions[stream], f"e{position}", ev.event_type(),
                                 ev.schema_version, encode_event(ev), b'{"dialect": "%s"}' % dialect.encode(), at,
                                 at, b"", b""))
    return out


def _facts_events(name: str) -> list[RecordedEvent]:
    """One instance of every catalog type, then (a simulator's dialect) the events of simulated runs."""
    d = get_dialect(name)
    events: list[tuple[str, Event]] = [("catalog", instance(cls)) for cls in d.catalog]
    if has_simulator(d):
        for seed in (1, 2, 3):
            prev = None
            for doc in documents_of(history(name, seed)):
                events += [(f"run-{seed}", ev) for ev in d.observe(prev, doc)]
                prev = doc
    return _recorded(events, name)


def _facts_connection(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    """DuckDB over fact tables (Arrow): a view per table, the link tables (empty) and the catalog's views,
    under the names a store's analytics give them."""
    import duckdb

    from projections.analytics.facts import catalog
    from projections.analytics.views import LINKS

    con = duckdb.connect(":memory:")
    for table, data in tables.items():
        con.register(f"{table}_arrow", data)
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM {table}_arrow")
    for table, columns in LINKS.items():
        con.execute(f"CREATE TABLE {table} ({columns})")
    for view, sql in catalog().views.items():
        con.execute(f"CREATE VIEW {view} AS {sql}")
    return con


@pytest.mark.parametrize("name", ALL)
def test_facts_match_their_declared_schema(name: str) -> None:
    """Every row a dialect's row functions write has the declared number of columns, the event's
    position and stream, and each value null or of the column's declared type; the Arrow tables build
    from them; every view and metric section the dialect declares runs over them in DuckDB."""
    from projections.analytics.facts import Flattener, catalog
    from projections.metrics import Scope, cross_run_report, run_report

    cat = catalog()
    d = get_dialect(name)
    declared = d.analytics()
    assert declared is not None, f"{name} declares no analytics: `evstore metrics` would say nothing of its runs"
    assert all(cat.owners[t.name] == name for t in declared.tables)
    events = _facts_events(name)
    flat = Flattener(cat)
    for e in events:
        flat.add_one(e)
    by_position = {e.position: e for e in events}
    problems = []
    for table, rows in flat.rows.items():
        columns = cat.tables[table].all_columns()
        for row in rows:
            e = by_position[row[0]]
            if len(row) != len(columns) or row[1] != e.stream_id:
                problems.append(f"{table}: {row!r} is not (position, stream_id, {len(columns) - 2} columns)")
                continue
            for (col, kind), value in zip(columns, row, strict=True):
                ok = value is None or (isinstance(value, _PY_TYPES[kind]) and not (kind == "BIGINT" and
                                                                                  isinstance(value, bool)))
                if not ok or (kind == "TIMESTAMPTZ" and value is not None and value.tzinfo is None):
                    problems.append(f"{table}.{col} ({kind}) got {value!r} from {e.type}")
    assert not problems, "\n".join(problems[:20])
    tables = flat.tables()  # Arrow refuses a value its schema cannot hold
    own = [t.name for t in declared.tables]
    if has_simulator(d):  # the simulated runs fill the dialect's own tables: the facts are not vacuous
        assert sum(tables[t].num_rows for t in own) > 0, f"{name}'s simulated runs give no facts"
    con = _facts_connection(tables)
    for view in declared.views:
        con.execute(f"SELECT * FROM {view}").fetchall()
    report = cross_run_report(con, Scope())
    assert {m.name for m in declared.sections} <= {s.name for s in report.sections}
    if declared.run_sections:
        stream = events[-1].stream_id
        names = {s.name for s in run_report(con, stream).sections}
        assert {m.name for m in declared.run_sections} <= names


def _run_views(name: str) -> tuple[str, ...]:
    declared = get_dialect(name).analytics()
    return declared.run_views if declared is not None else ()


@pytest.mark.parametrize("name", [n for n in SIMULATED if _run_views(n)])
def test_run_views_are_per_run(name: str) -> None:
    """Each run view the dialect declares (``Analytics.run_views``), evaluated over one run's facts alone,
    gives that run's rows of the view over every fact, for each of a few simulated runs (and the stream of
    one event of each catalog type): a metrics report keeps these views' rows and, after new events,
    computes them again from the touched runs' facts only (``projections.analytics.kept``)."""
    from projections.analytics.facts import Flattener, catalog

    cat = catalog()
    events = _facts_events(name)
    flat = Flattener(cat)
    flat.add_batch(events)
    con = _facts_connection(flat.tables())
    filled: set[str] = set()
    for stream in sorted({e.stream_id for e in events}):
        full, narrowed = one_stream_rows(con, _run_views(name), cat.tables, stream)
        assert narrowed == full, (name, stream)
        filled |= {view for view, rows in full.items() if rows}
    assert filled == set(_run_views(name)), f"{name}: no rows in {sorted(set(_run_views(name)) - filled)}"
