"""evstore usage beside ccusage (v17) on the same transcripts, where ccusage can run: equal input and
cache tokens, more output tokens (evstore reads each message's last line, ccusage its first), both
counting the subagent files.  Skipped, with the reason, when ccusage is not installed:
``npm install --prefix /tmp/ccusage ccusage@17`` and ``EVSTORE_CCUSAGE=/tmp/ccusage/node_modules/.bin/ccusage``
(it runs offline with ``--offline``).  ``benchmarks/bench_usage.py`` prints the same side by side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import claude_usage_fixtures as F
from tests.test_usage import count_by_hand

CCUSAGE = os.environ.get("EVSTORE_CCUSAGE") or shutil.which("ccusage")
needs_ccusage = pytest.mark.skipif(
    CCUSAGE is None, reason="ccusage is not installed (npm install --prefix /tmp/ccusage ccusage@17; "
                            "EVSTORE_CCUSAGE=/tmp/ccusage/node_modules/.bin/ccusage)")
pytestmark = needs_ccusage


def ccusage_beside(ours: dict[str, Any], config: Path, first_outputs: int) -> None:
    """ccusage's totals over the transcripts under ``config`` (its CLAUDE_CONFIG_DIR) against
    evstore's ``ours``: equal input and cache tokens; its output is the messages' first lines'
    (``first_outputs``), below evstore's final counts."""
    assert CCUSAGE is not None
    out = subprocess.run([CCUSAGE, "daily", "--json", "--offline"], env={**os.environ, "CLAUDE_CONFIG_DIR": str(config)},
                         capture_output=True, text=True, timeout=120, check=True)
    theirs = json.loads(out.stdout)["totals"]
    assert ours["input_tokens"] == theirs["inputTokens"]
    assert ours["cache_creation_tokens"] == theirs["cacheCreationTokens"]
    assert ours["cache_read_tokens"] == theirs["cacheReadTokens"]
    # ccusage keeps a message's first line: its output is what those lines say, ours the final count
    assert theirs["outputTokens"] == first_outputs < ours["output_tokens"]


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    monkeypatch.delenv("EVSTORE_PRICES", raising=False)


def test_evstore_and_ccusage_side_by_side(run: Any, tmp_path: Path) -> None:
    config = tmp_path / "claude"
    F.write(config / "projects")
    assert run("ingest", "claude", str(config / "projects")).exit_code == 0
    r = run("usage", "--json")
    assert r.exit_code == 0, r.output
    ours = json.loads(r.stdout)["total"]
    ccusage_beside(ours, config, sum(m["first_output"] for m in count_by_hand(config / "projects").values()))
