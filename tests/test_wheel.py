"""The built wheel carries the specs its dialects validate against, and finds them with no setting.

The wheel is built from this checkout and installed into a fresh virtualenv outside it; evstore then
runs from a working directory outside the checkout with no ``EVSTORE_*`` variable set.  Its
dependencies come from the running interpreter's site-packages through a ``.pth`` line (a plain path:
the editable install's own ``.pth`` there is not processed), so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import sysconfig
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from eventstore.dialects.mapipe import MapipeDialect

ROOT = Path(__file__).resolve().parent.parent
SPECS = {
    "eventstore/dialects/mapipe/schemas/agent-state.schema.json",
    "eventstore/dialects/mapipe/schemas/ORIGIN.md",
    "eventstore/dialects/envelope/schemas/envelope.schema.json",
    "eventstore/dialects/envelope/schemas/ORIGIN.md",
    "eventstore/dialects/envelope/schemas/LICENSE.upstream-MIT.txt",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the fresh venv's bin directory) with evstore installed from that wheel."""
    pytest.importorskip("hatchling", reason="hatchling is not installed (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp / "dist"), str(ROOT)], check=True, capture_output=True)
    (wheel,) = (tmp / "dist").glob("evstore-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "evstore-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv / "bin"


def outside_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVSTORE_", "PYTHON"))}
    return env


def test_the_wheel_ships_each_dialects_specs_with_origin_and_licence(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert SPECS <= names, SPECS - names
    assert not [n for n in names if n.startswith("tests/")]


def test_an_installed_evstore_reports_schema_findings_with_no_setting(installed: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    _, bin_dir = installed
    doc = list(MapipeDialect().simulate(random.Random(3), run_id="PROJ-9",
                                        start=datetime(2026, 1, 5, 9, 0, tzinfo=UTC)))[-1].doc
    doc["status"] = "finished-ish"       # not in the schema's enum
    doc["retries"] = 2                   # a key the schema does not define
    (tmp_path / "agent-state.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    env = outside_env()

    def evstore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / "evstore"), "--url", f"sqlite:///{tmp_path}/store/events.db", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    # the installed copy, not this checkout, and the envelope dialect's JSON Schema found the same way
    probe = ("import eventstore; from eventstore.dialects.envelope import validate as v; print(eventstore.__file__); "
             "print(sorted({f.code for f in v.schema_findings({'state': 'BOGUS'})}))")
    where, codes = subprocess.run([str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, check=True).stdout.splitlines()
    assert not Path(where).is_relative_to(ROOT), where
    assert "schema-required" in codes and "schema-enum" in codes, codes
    assert evstore("init").returncode == 0
    r = evstore("ingest", "mapipe", "agent-state.json")
    assert r.returncode == 0 and "2 finding(s)" in r.stderr + r.stdout, (r.stdout, r.stderr)
    r = evstore("replay", "PROJ-9", "--check")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "/status: [schema-enum]" in r.stdout and '/retries: [unknown-key]' in r.stdout, (r.stdout, r.stderr)


def test_an_installed_evstore_runs_init_with_the_migrations_inside_the_wheel(installed: tuple[Path, Path],
                                                                            tmp_path: Path) -> None:
    """`evstore init` from the wheel, in a folder outside the checkout, finds the Alembic scripts the
    wheel carries (eventstore/_migrations), not the checkout's migrations/."""
    wheel, bin_dir = installed
    assert any(n.startswith("eventstore/_migrations/versions/") for n in zipfile.ZipFile(wheel).namelist())
    work = tmp_path / "work"
    work.mkdir()
    env = {**outside_env(), "HOME": str(tmp_path)}
    r = subprocess.run([str(bin_dir / "evstore"), "init"], cwd=work, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert (work / ".evstore" / "events.db").is_file()
    loc = subprocess.run([str(bin_dir / "python"), "-c", "import eventstore.migrate as m; print(m.script_location())"],
                         cwd=work, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert loc.endswith("site-packages/eventstore/_migrations") and not Path(loc).is_relative_to(ROOT), loc


def test_the_installed_evstore_hashes_its_tree_with_what_the_wheel_ships(installed: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    """The build hook (eventstore/_build_native.py) compiles the Merkle tree's C hashing into the wheel where it can,
    a platform wheel then; the installed copy uses it.  Without it, a pure wheel hashing in Python."""
    wheel, bin_dir = installed
    names = zipfile.ZipFile(wheel).namelist()
    shipped = [n for n in names if n.startswith("eventstore/_tree_native.") and n.endswith((".so", ".pyd"))]
    probe = "from eventstore import tree; print(tree.HASHING, tree.__file__)"
    hashing, where = subprocess.run([str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=outside_env(),
                                    capture_output=True, text=True, check=True).stdout.rsplit(" ", 1)
    assert not Path(where.strip()).is_relative_to(ROOT), where
    if shipped:
        assert hashing.startswith("C (OpenSSL") and not wheel.name.endswith("-py3-none-any.whl"), (hashing, wheel)
    else:
        assert hashing == "Python" and wheel.name.endswith("-py3-none-any.whl"), (hashing, wheel)


def test_a_build_that_cannot_compile_gives_a_pure_wheel(tmp_path: Path) -> None:
    """EVSTORE_PURE_TREE=1 (as no compiler would): no extension, a py3-none-any wheel, and the build
    succeeds.  A second wheel build: about 1 s of CPU."""
    pytest.importorskip("hatchling", reason="hatchling is not installed (pip install -e '.[test]')")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True,
                       env={**os.environ, "EVSTORE_PURE_TREE": "1"})
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("evstore-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".so", ".pyd"))]
    assert "the Merkle tree's C hashing is not built (EVSTORE_PURE_TREE is set)" in r.stdout + r.stderr
