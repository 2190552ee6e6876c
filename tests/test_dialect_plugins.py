"""Dialects are plugins: found through the entry-point group ``evstore.dialects``.

A throwaway distribution (a ``*.dist-info`` folder with an ``entry_points.txt`` and a module,
in a temporary directory put on ``sys.path``) adds a dialect without touching the tree; a
broken one is reported by name and breaks nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EVSTORE

from eventstore import dialects
from eventstore.cli import register
from eventstore.dialects import GROUP, available, broken, get_dialect, registered
from eventstore.errors import EvstoreError

ROOT = Path(__file__).resolve().parent.parent
BUILT_IN = {"generic", "mapipe", "friday", "taskflow", "envelope", "claude", "taskmaster"}

PLUGIN = '''
from typing import Any

from eventstore.dialects.base import Dialect
from eventstore.events import Event


class CounterSet(Event, frozen=True, tag="ticker.counter_set"):
    value: int


class TickerDialect(Dialect):
    name = "ticker"
    description = "a counter file (a throwaway plugin for the tests)"
    catalog = (CounterSet,)
    identity_keys = ("ticker",)

    def stream_id(self, doc: Any) -> str | None:
        return doc.get("ticker") if isinstance(doc, dict) else None

    def derive(self, prev: Any, next_doc: Any) -> list[Event]:
        if prev.get("count") != next_doc.get("count") and isinstance(next_doc.get("count"), int):
            return [CounterSet(value=next_doc["count"])]
        return []

    def apply(self, doc: Any, event: Event) -> Any:
        assert isinstance(event, CounterSet)
        doc["count"] = event.value
        return doc

    def summary(self, event: Event) -> str | None:
        return f"counter set to {event.value}" if isinstance(event, CounterSet) else None
'''


def make_distribution(where: Path, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """A minimal installed distribution in ``where``: ``<name>-0.1.dist-info`` and its modules."""
    info = where / f"{name.replace('-', '_')}-0.1.dist-info"  # a "-" in the folder's name would end the name
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = [f"[{GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, text in modules.items():
        (where / f"{module}.py").write_text(text)
    return where


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway distribution registering ``ticker`` (works) and ``shaky`` (its module is missing)."""
    where = make_distribution(tmp_path / "site", "evstore-ticker", {"ticker": "evstore_ticker:TickerDialect",
                                                                    "shaky": "evstore_shaky_missing:Dialect"},
                              {"evstore_ticker": PLUGIN})
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.setattr(dialects, "_instances", {})
    monkeypatch.setattr(dialects, "_broken", {})
    return where


def test_built_in_dialects_are_registered_as_entry_points() -> None:
    """pyproject.toml declares the built-ins in the group, and the installed metadata has them
    (an editable install older than the declaration would not: reinstall it)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][GROUP]
    assert set(declared) == BUILT_IN
    assert BUILT_IN <= set(registered())
    for name, value in declared.items():
        d = get_dialect(name)
        assert f"{type(d).__module__}:{type(d).__name__}" == value and d.name == name
    assert not hasattr(dialects, "_DIALECTS")  # no second list to keep in step


def test_a_plugin_on_sys_path_is_found_and_a_broken_one_is_reported(plugin_path: Path) -> None:
    assert {"ticker", "shaky"} <= set(registered())
    d = get_dialect("ticker")
    assert type(d).__module__ == "evstore_ticker" and d.name == "ticker"
    with pytest.raises(EvstoreError) as err:
        get_dialect("shaky")
    msg = str(err.value)
    for part in ('"shaky"', "evstore_shaky_missing:Dialect", '"evstore_ticker"', GROUP, "ModuleNotFoundError",
                 str(plugin_path / "evstore_ticker-0.1.dist-info" / "entry_points.txt")):
        assert part in msg, (part, msg)
    have = available()  # the broken one is left out, every other one loads
    assert "shaky" not in have and {"ticker", *BUILT_IN} <= set(have)
    assert "ModuleNotFoundError" in broken()["shaky"]


def test_the_registry_reads_what_importlib_metadata_reads(plugin_path: Path) -> None:
    """The registry's own reading of entry_points.txt (kept for start-up time) finds exactly the
    entry points the stdlib finds, the throwaway distribution's included."""
    from importlib.metadata import entry_points

    want = sorted((ep.name, ep.value) for ep in entry_points(group=GROUP))
    assert sorted((r.name, r.value) for r in dialects._entry_points()) == want
    assert ("ticker", "evstore_ticker:TickerDialect") in want and len(want) >= len(BUILT_IN) + 2


def test_a_class_that_is_no_dialect_or_misnamed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = make_distribution(tmp_path, "evstore-odd", {"notone": "evstore_odd:Thing", "alias": "evstore_odd:Named"},
                              {"evstore_odd": "from eventstore.dialects.base import Dialect\n"
                                              "class Thing: pass\n"
                                              "class Named(Dialect):\n    name = 'other'\n"})
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.setattr(dialects, "_instances", {})
    with pytest.raises(EvstoreError, match=r'"notone".*evstore_odd:Thing is not a Dialect subclass'):
        get_dialect("notone")
    with pytest.raises(EvstoreError, match=r'"alias".*calls itself "other"'):
        get_dialect("alias")


def test_the_same_name_from_two_distributions_is_a_conflict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = make_distribution(tmp_path / "a", "evstore-a", {"twice": "mod_a:D"}, {})
    b = make_distribution(tmp_path / "b", "evstore-b", {"twice": "mod_b:D"}, {})
    monkeypatch.syspath_prepend(str(a))
    monkeypatch.syspath_prepend(str(b))
    monkeypatch.setattr(dialects, "_instances", {})
    with pytest.raises(EvstoreError, match=r'"twice" is registered more than once.*mod_[ab]:D.*mod_[ab]:D'):
        get_dialect("twice")
    assert "twice" not in available()


def _evstore(url: str, plugin: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([EVSTORE, "--url", url, *args], capture_output=True, env=env, timeout=120, check=False)


def test_evstore_ingest_uses_a_plugin_without_touching_the_tree(plugin_path: Path, sqlite_url: str,
                                                                tmp_path: Path) -> None:
    """A real ``evstore`` process with the throwaway distribution on PYTHONPATH ingests with its
    dialect, logs its typed event by its summary and gives the file back byte for byte."""
    files = tmp_path / "files"
    files.mkdir()
    versions: list[bytes] = []
    for i, count in enumerate([1, 2, 2.5]):
        doc: dict[str, Any] = {"ticker": "T-1", "count": count, "note": "é\u2028"}
        raw = json.dumps(doc, indent="\t", ensure_ascii=i != 1).encode()
        (files / f"{i + 1}.json").write_bytes(raw)
        versions.append(raw)
    r = _evstore(sqlite_url, plugin_path, "ingest", "ticker", str(files))
    assert r.returncode == 0, r.stderr.decode()
    assert "ingested 3 snapshot(s)" in r.stderr.decode()
    bad = _evstore(sqlite_url, plugin_path, "ingest", "shaky", str(files))
    assert bad.returncode == 1
    err = bad.stderr.decode()
    assert err.startswith("Error: ") and '"shaky"' in err and "evstore_shaky_missing" in err, err
    assert "Traceback" not in err
    # log and replay in this process (the distribution is on sys.path through the fixture)
    runner = CliRunner()
    log = runner.invoke(register(), ["--url", sqlite_url, "log", "T-1"], catch_exceptions=False)
    assert log.exit_code == 0, log.output
    assert "counter set to 2" in log.output  # the plugin's typed event and its summary line
    for version, raw in enumerate(versions, start=1):
        out = runner.invoke(register(), ["--url", sqlite_url, "replay", "T-1", "--upto", str(version), "--raw"],
                            catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert out.stdout_bytes == raw, version
    assert "ticker" not in (ROOT / "pyproject.toml").read_text()  # the tree names no plugin
