"""`evstore usage` on real Claude Code transcripts (``tests/data/claude``, see its ORIGIN.md): every token
count equal to one made here from the JSONL alone (one count per message id + request id, from its last
line), and beside ccusage where it is installed (equal input and cache tokens, more output tokens, since
ccusage keeps each message's first line)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.test_usage_ccusage import ccusage_beside, needs_ccusage

PROJECTS = Path(__file__).resolve().parent / "data" / "claude" / "projects"
TOKENS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_creation_5m_tokens",
          "cache_creation_1h_tokens", "cache_read_tokens")


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")
    monkeypatch.delenv("EVSTORE_PRICES", raising=False)


def by_hand() -> dict[tuple[str, str], dict[str, Any]]:
    """(message.id, requestId) -> the usage on that message's last line, its first line's output, its
    session (the file name) and whether it is a sidechain (sub-agent) message."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(PROJECTS.rglob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            line = json.loads(text)
            if line.get("type") != "assistant":
                continue
            msg = line["message"]
            u = msg["usage"]
            key = (msg["id"], line["requestId"])
            write = u.get("cache_creation_input_tokens", 0)
            split = u.get("cache_creation") or {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0}
            first = out[key]["first_output"] if key in out else u["output_tokens"]
            out[key] = {"session": path.stem, "sidechain": bool(line.get("isSidechain")), "first_output": first,
                        "input_tokens": u.get("input_tokens", 0), "output_tokens": u["output_tokens"],
                        "cache_creation_tokens": write, "cache_read_tokens": u.get("cache_read_input_tokens", 0),
                        "cache_creation_5m_tokens": split["ephemeral_5m_input_tokens"],
                        "cache_creation_1h_tokens": split["ephemeral_1h_input_tokens"]}
    return out


def sums(messages: list[dict[str, Any]]) -> dict[str, int]:
    return {"api_messages": len(messages), **{t: sum(m[t] for m in messages) for t in TOKENS}}


def usage(run: Any, *args: str) -> dict[str, Any]:
    r = run("usage", "--json", *args)
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_usage_on_real_transcripts_equals_a_count_from_the_jsonl(run: Any) -> None:
    r = run("ingest", "claude", str(PROJECTS))
    assert r.exit_code == 0, r.output
    mine = by_hand()
    # what these files were chosen for: streamed messages whose last line says more than the first,
    # a 5-minute cache split on some and none on others, and an inline sub-agent
    assert len(mine) == 8 and sum(m["sidechain"] for m in mine.values()) == 2
    assert sum(m["first_output"] for m in mine.values()) < sum(m["output_tokens"] for m in mine.values())

    report = usage(run, "--by", "session")
    keep = ("api_messages", *TOKENS)
    assert {k: report["total"][k] for k in keep} == sums(list(mine.values()))
    sessions = {m["session"] for m in mine.values()}
    assert {row["key"]: {k: row[k] for k in keep} for row in report["rows"]} == {
        s: sums([m for m in mine.values() if m["session"] == s]) for s in sessions}
    assert report["total"]["unpriced_messages"] == 0 and report["total"]["cost_usd"] > 0

    # no 1-hour cache writes here: the text table keeps the one cache-write column
    text = run("usage")
    assert text.exit_code == 0 and "cache_creation_tokens" in text.stdout and "cache_write_1h" not in text.stdout
    sub = usage(run, "--by", "subagent")["rows"]
    assert len(sub) == 1
    assert {k: sub[0][k] for k in keep} == sums([m for m in mine.values() if m["sidechain"]])


@needs_ccusage
def test_real_transcripts_beside_ccusage(run: Any, tmp_path: Path) -> None:
    config = tmp_path / "claude"
    shutil.copytree(PROJECTS, config / "projects")
    assert run("ingest", "claude", str(config / "projects")).exit_code == 0
    ccusage_beside(usage(run)["total"], config, sum(m["first_output"] for m in by_hand().values()))
