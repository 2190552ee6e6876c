"""Contract: every real state-file history replays exactly, as committed, broken versions included.

Each folder of ``tests/data/real`` (and of every folder named in ``EVSTORE_REAL_HISTORIES``,
separated by ``os.pathsep``; a folder holding files is itself one history) is ingested with
``evstore ingest`` as one stream.  Then every version is replayed and compared with what the test
reads from the source file itself, an oracle evstore did not compute:

* ``--raw`` (``replay_raw``) must give the file's bytes back, byte for byte, for every version,
  unreadable ones included;
* the document (what ``--json`` prints) must equal ``json.loads`` of the file with the same key
  order and the same int/float/bool types (:func:`strictly_equal`, written here); for a file that
  ``json.loads`` refuses, the last valid file before it, and the event must be ``document.unreadable``;
* every file whose bytes differ from the previous file's adds a version (100 % recorded).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import migrated

from eventstore.cli import register
from eventstore.store import EventStore
from projections import replay as rp

REAL = Path(__file__).parent / "data" / "real"


def _histories() -> list[Path]:
    roots = [REAL] + [Path(p) for p in os.environ.get("EVSTORE_REAL_HISTORIES", "").split(os.pathsep) if p]
    found: dict[str, Path] = {}
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"EVSTORE_REAL_HISTORIES names {root}, which is not a folder")
        folders = sorted(p for p in root.iterdir() if p.is_dir())
        for folder in folders or [root]:
            found.setdefault(folder.name, folder)  # the repository's copy first
    return list(found.values())


HISTORIES = _histories()


def strictly_equal(a: Any, b: Any, path: str = "$") -> None:
    """Assert JSON equality that also holds key order and int vs float vs bool."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
    if type(a) is dict:
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            strictly_equal(a[k], b[k], f"{path}.{k}")
    elif type(a) is list:
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            strictly_equal(x, y, f"{path}[{i}]")
    elif type(a) is float:
        assert repr(a) == repr(b), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _oracle(raw: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(raw)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False, None


def test_the_repository_has_real_histories() -> None:
    names = {h.name for h in HISTORIES}
    assert {"codeharness-sprint-state", "codeharness-ralph-status", "friday-temper-ai-full"} <= names


@pytest.mark.parametrize("history", HISTORIES, ids=[h.name for h in HISTORIES])
def test_real_history_replays_exactly(history: Path, tmp_path: Path) -> None:
    url = migrated(f"sqlite:///{tmp_path}/store.db")
    dialect = "friday" if history.name.startswith("friday") else "generic"
    files = sorted(p for p in history.iterdir() if p.is_file() and not p.name.startswith("."))
    r = CliRunner().invoke(register(), ["--url", url, "ingest", dialect, str(history), "--stream", "h", "--json"])
    assert r.exit_code == 0, r.output
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert [Path(x["file"]).name for x in results] == [f.name for f in files]  # the committed order

    with EventStore(url) as store:
        last_valid: Any = None
        previous = b""
        versions = set()
        changed = 0
        for f, res in zip(files, results, strict=True):
            raw = f.read_bytes()
            if raw != previous:
                assert res["events"] >= 1, f"{f.name} was not recorded"
                changed += 1
            previous = raw
            version = res["version"]
            versions.add(version)
            valid, expected = _oracle(raw)
            if valid:
                last_valid = expected
            else:
                rec = next(store.read_stream("h", after_version=version - 1, upto_version=version))
                assert rec.type == "document.unreadable", f.name
            got = rp.replay(store, "h", upto_version=version).doc
            strictly_equal(got, last_valid)
            assert rp.replay_raw(store, "h", version, doc=got) == raw, f"{f.name}: bytes differ"
        assert len(versions) == changed  # one version per write that changed the file, no more
