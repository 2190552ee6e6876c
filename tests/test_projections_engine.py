"""The projections engine: exactly-once checkpointed batches, rebuild == incremental, SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

from click.testing import CliRunner
from conftest import migrated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.cli import register
from eventstore.store import EventStore, NewEvent
from projections.engine import EventCounts, ProjectionRunner, read_event_counts

REPO = Path(__file__).resolve().parent.parent


def _fresh_sqlite(path: Path) -> str:
    return migrated(f"sqlite:///{path}/events.db")


def _append_random(store: EventStore, rng: random.Random, n: int, types: list[str]) -> Counter[str]:
    truth: Counter[str] = Counter()
    items = []
    for i in range(n):
        t = rng.choice(types)
        truth[t] += 1
        items.append((f"s{rng.randint(1, 7)}", NewEvent(t, {"i": i}), None))
    if items:
        store.append_many(items)
    return truth


def _true_counts(store: EventStore) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for e in store.iter_all():
        a = out.setdefault(e.type, [0, 0])
        a[0] += 1
        a[1] += e.version == 1
    return {t: (a[0], a[1]) for t, a in out.items()}


class Crashy(EventCounts):
    """Writes its rows, then sometimes dies before the commit (the transaction must roll back)."""

    def __init__(self, rng: random.Random, p_crash: float) -> None:
        self.rng, self.p_crash = rng, p_crash

    def apply(self, cur, backend, events):  # type: ignore[no-untyped-def]
        super().apply(cur, backend, events)
        if self.rng.random() < self.p_crash:
            raise RuntimeError("killed between rows and checkpoint")


# ---------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    chunks=st.lists(st.integers(0, 60), min_size=1, max_size=4),
    batch_sizes=st.lists(st.integers(1, 25), min_size=1, max_size=8),
    p_crash=st.sampled_from([0.0, 0.3, 0.6]),
)
def test_incremental_with_crashes_equals_rebuild(seed: int, chunks: list[int], batch_sizes: list[int],
                                                 p_crash: float) -> None:
    """Random batch sizes, appends in between, crashes between rows and checkpoint: the result
    equals a rebuild from scratch and the truth computed from the log."""
    rng = random.Random(seed)
    types = [f"t.{k}" for k in range(rng.randint(1, 5))]
    with tempfile.TemporaryDirectory() as tmp:
        store = EventStore(_fresh_sqlite(Path(tmp)))
        try:
            crashy = Crashy(rng, p_crash)
            for n in chunks:
                _append_random(store, rng, n, types)
                for _ in range(rng.randint(1, 4)):  # a few steps per chunk, each its own runner ("process")
                    with ProjectionRunner(store, batch_size=rng.choice(batch_sizes)) as runner:
                        runner.ensure(crashy)
                        try:
                            runner.step(crashy)
                        except RuntimeError:
                            pass
            crashy.p_crash = 0.0
            with ProjectionRunner(store, batch_size=rng.choice(batch_sizes)) as runner:
                runner.catch_up(crashy)
                incremental = read_event_counts(store)
                assert runner.lag(crashy) == 0
                runner.rebuild(EventCounts())
                rebuilt = read_event_counts(store)
            assert incremental == rebuilt == _true_counts(store)
        finally:
            store.close()


def test_type_filtered_projection_advances_past_other_events(store: EventStore) -> None:
    class OnlyB(EventCounts):
        name = "only_b"
        event_types = ("t.b",)

    store.append_many([("s", NewEvent(t, {}), None) for t in ["t.a", "t.b", "t.a", "t.a"]])
    with ProjectionRunner(store, batch_size=1) as runner:
        runner.catch_up(OnlyB())
        assert read_event_counts(store) == {"t.b": (1, 0)}
        cp = runner.checkpoint("only_b")
        assert cp is not None and cp.position == 4
        assert runner.lag(OnlyB()) == 0
        store.append("s", [NewEvent("t.b", {})])
        assert runner.lag(OnlyB()) == 1


def test_version_bump_rebuilds_from_scratch(store: EventStore) -> None:
    store.append_many([("s", NewEvent("t.a", {}), None) for _ in range(5)])
    with ProjectionRunner(store) as runner:
        runner.catch_up(EventCounts())
        assert read_event_counts(store) == {"t.a": (5, 1)}

        class CountsV2(EventCounts):
            version = 2

        assert runner.ensure(CountsV2()) is True  # tables dropped, checkpoint back to 0
        assert read_event_counts(store) == {}
        assert runner.status([CountsV2()])[0].lag == 5
        runner.catch_up(CountsV2())
        assert read_event_counts(store) == {"t.a": (5, 1)}
        assert runner.ensure(CountsV2()) is False
        assert runner.status([CountsV2()])[0].to_dict()["stored_version"] == 2


def test_two_runners_never_double_count(store: EventStore) -> None:
    store.append_many([("s", NewEvent("t.a", {}), None) for _ in range(200)])
    with ProjectionRunner(store, batch_size=7) as r1, ProjectionRunner(store, batch_size=11) as r2:
        r1.ensure(EventCounts())
        while r1.step(EventCounts()) + r2.step(EventCounts()):
            pass
    assert read_event_counts(store) == {"t.a": (200, 1)}


# ---------------------------------------------------------------- a real SIGKILL

_CHILD = textwrap.dedent("""
    import sys, time
    from eventstore.store import EventStore
    from projections.engine import EventCounts, ProjectionRunner

    class Slow(EventCounts):
        def apply(self, cur, backend, events):
            super().apply(cur, backend, events)
            time.sleep(0.01)  # rows written, checkpoint not yet: the kill often lands here

    store = EventStore(sys.argv[1])
    with ProjectionRunner(store, batch_size=int(sys.argv[2])) as runner:
        runner.catch_up(Slow())
""")


def test_sigkill_mid_run_then_resume_is_exactly_once(store_url: str, tmp_path: Path) -> None:
    url = store_url
    store = EventStore(url)
    try:
        rng = random.Random(7)
        _append_random(store, rng, 3000, ["t.a", "t.b", "t.c"])
        script = tmp_path / "child.py"
        script.write_text(_CHILD)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        killed_mid_run = 0
        for attempt in range(3):
            child = subprocess.Popen([sys.executable, str(script), url, "37"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with ProjectionRunner(store) as watcher:
                deadline = time.time() + 60
                while time.time() < deadline:
                    cp = watcher.checkpoint("event_counts")
                    if cp is not None and cp.position > 300 * (attempt + 1):
                        break
                    if child.poll() is not None:
                        break
                    time.sleep(0.01)
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
                cp = watcher.checkpoint("event_counts")
                if child.returncode == -signal.SIGKILL and cp is not None and 0 < cp.position < 3000:
                    killed_mid_run += 1
        assert killed_mid_run >= 1, "the runner was never killed mid-run"
        with ProjectionRunner(store) as runner:
            runner.catch_up(EventCounts())
        assert read_event_counts(store) == _true_counts(store)
    finally:
        store.close()


# ---------------------------------------------------------------- CLI


def test_cli_projections_status_run_rebuild(sqlite_url: str) -> None:
    migrated(sqlite_url)
    store = EventStore(sqlite_url)
    store.append_many([("s1", NewEvent("t.a", {}), None) for _ in range(3)])
    store.close()
    runner = CliRunner()
    cli = register()
    res = runner.invoke(cli, ["--url", sqlite_url, "projections", "status", "--json"])
    assert res.exit_code == 0, res.output
    import json

    status = {r["name"]: r for r in json.loads(res.stdout)}
    assert status["event_counts"]["lag"] == 3 and status["event_counts"]["last_run"] is None
    assert status["runs"]["mode"] == "inline"

    res = runner.invoke(cli, ["--url", sqlite_url, "projections", "run"])
    assert res.exit_code == 0, res.output
    assert "event_counts: applied 3 events" in res.stdout

    res = runner.invoke(cli, ["--url", sqlite_url, "projections", "rebuild", "event_counts"])
    assert res.exit_code == 0, res.output
    assert "event_counts: rebuilt from 3 events (version 1)" in res.stdout

    res = runner.invoke(cli, ["--url", sqlite_url, "projections", "status"])
    assert res.exit_code == 0
    assert "event_counts" in res.stdout and "async" in res.stdout

    res = runner.invoke(cli, ["--url", sqlite_url, "projections", "rebuild", "nope"])
    assert res.exit_code == 1
    assert 'Error: No projection "nope"' in res.stderr


def test_the_analytics_tables_are_a_projection_of_the_runner(sqlite_url: str) -> None:
    """The Parquet tables are listed, caught up and rebuilt by the runner like the database
    projections (no special case in the CLI), and still checked against this store's log."""
    import json

    from analytics_fixtures import simulate_into

    from projections.analytics import Manifest, analytics_dir
    from projections.engine import get_projection

    migrated(sqlite_url)
    with EventStore(sqlite_url) as store:
        simulate_into(store, {"mapipe": 1, "taskflow": 1}, seed=4)
        high = store.max_position()
        proj = get_projection("analytics")
        with ProjectionRunner(store) as runner:
            before = {s.name: s for s in runner.status()}["analytics"]
            assert (before.position, before.lag, before.storage) == (0, high, "parquet")
            assert runner.run()["analytics"] == high
            after = runner.status([proj])[0]
            assert (after.position, after.lag, after.details["stale"]) == (high, 0, None)
            assert runner.catch_up(proj) == 0
        m = Manifest.load(analytics_dir(store))
        assert m is not None and m.position == high and m.store_id == store.store_id()
    res = CliRunner().invoke(register(), ["--url", sqlite_url, "projections", "rebuild", "analytics"])
    assert res.exit_code == 0, res.output
    assert f"analytics: rebuilt from {high} events" in res.stdout
    rows = json.loads(CliRunner().invoke(register(), ["--url", sqlite_url, "projections", "status", "--json"]).stdout)
    row = next(r for r in rows if r["name"] == "analytics")
    assert (row["checkpoint"], row["lag"], row["storage"], row["mode"]) == (high, 0, "parquet", "async")


def test_a_projection_check_inside_a_snapshot_read_leaves_the_snapshot_open(store: EventStore) -> None:
    """The runner reads its checkpoints on the store's connection, unless that connection is inside a
    transaction (a snapshot read, a write): then on one of its own, so ending its read ends nothing else."""
    store.append("S", [NewEvent("demo.note", {"n": 1})])
    be = store.backend
    with store.reading(snapshot=True) as cur:
        assert be.stream_state(cur, "S") is not None
        raw = cur.connection
        assert be.in_transaction(raw)
        with ProjectionRunner(store) as runner:
            runner.checkpoint("runs")
            runner.read(lambda c: be.read_checkpoint(c, "writers"))
        assert be.in_transaction(raw)  # still the snapshot
        assert be.stream_state(cur, "S") is not None
    assert not be.in_transaction(raw)
