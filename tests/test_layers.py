"""The layering holds, checked by import-linter (contracts in pyproject.toml, ``[tool.importlinter]``).

eventstore (the log and the language) never imports projections, click, rich, DuckDB or Arrow below
its CLI; projections below the CLI never import the CLI; dialects do not import each other.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -e '.[test]')")


def _lint(config: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())"]
    if config is not None:
        args += ["--config", str(config)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True)


def test_layer_contracts_are_kept() -> None:
    r = _lint()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout and "BROKEN" not in r.stdout


def test_the_checker_sees_the_cli_wiring_projections_in(tmp_path: Path) -> None:
    """Without its one exception (the CLI, the top layer) the first contract breaks: the checker
    really follows eventstore's imports, so the kept contracts above mean something."""
    config = tmp_path / "contracts.ini"
    config.write_text(textwrap.dedent("""
        [importlinter]
        root_packages =
            eventstore
            projections

        [importlinter:contract:strict]
        name = eventstore never imports projections, not even its CLI
        type = forbidden
        source_modules = eventstore
        forbidden_modules = projections
    """))
    r = _lint(config)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "eventstore.cli" in r.stdout and "BROKEN" in r.stdout
