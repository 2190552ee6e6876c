"""The README's CLI reference and first commands stay in step with the code (sqlite-utils style)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from eventstore.cli import register

README = Path(__file__).resolve().parent.parent / "README.md"


def _commands(group: click.Group, prefix: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, cmd in group.commands.items():
        if cmd.hidden:  # deprecated spellings: --help does not list them either
            continue
        if isinstance(cmd, click.Group):
            out.update(_commands(cmd, f"{prefix} {name}"))
        else:
            out[f"{prefix} {name}"] = cmd.get_short_help_str(200)
    return out


def test_cli_reference_matches_help() -> None:
    text = README.read_text()
    block = text.split("<!-- cli-reference:start -->")[1].split("<!-- cli-reference:end -->")[0]
    documented = dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", block, flags=re.M))
    assert documented == _commands(register(), "evstore"), "regenerate the README's CLI reference table"


def test_readme_opens_with_the_two_commands() -> None:
    lines = [line for line in README.read_text().splitlines() if line.strip()]
    fence = lines.index("```")
    assert lines[fence + 1] == "pip install -e . && evstore demo"
    assert lines[fence + 2] == "pip install -e '.[test]' && pytest"


def test_try_it_block_runs_top_to_bottom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command of "Try it", as written, on a fresh store in an empty folder: each succeeds."""
    block = README.read_text().split("<!-- try-it:start -->")[1].split("<!-- try-it:end -->")[0]
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("evstore ")]
    assert commands[0] == "evstore demo" and len(commands) >= 8
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVSTORE_URL", raising=False)
    task = None
    for command in commands:
        if "<task-id>" in command:
            assert task, "the demo printed no task id to try"
            command = command.replace("<task-id>", task)
        r = CliRunner().invoke(register(), shlex.split(command)[1:])
        assert r.exit_code == 0, f"{command}\n{r.output}"
        assert r.stdout.strip(), f"{command} printed nothing"
        if task is None:  # the demo names one: "  evstore replay TASK"
            task = re.search(r"^  evstore replay (\S+)$", r.stdout, re.M).group(1)  # type: ignore[union-attr]
    assert (tmp_path / ".evstore" / "events.db").exists()


def test_readme_stands_on_its_own() -> None:
    """It names no file outside the repository and no issue a reader cannot see."""
    text = README.read_text()
    assert not re.search(r"\bissue\b|\bissues? \d+|\.\./shared/DESIGN|(?<!docs/)\bDESIGN\.md", text), \
        re.findall(r".{40}(?:\bissue\b|DESIGN\.md).{20}", text)
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in link:
            assert (README.parent / link).exists(), link
    assert (README.parent / "docs" / "DESIGN.md").read_text().startswith("# evstore: how it is built")


def test_opening_paragraph_names_every_source_evstore_captures() -> None:
    """Every dialect's source is named where a newcomer reads what evstore is for (Claude Code and
    task-master were missing); a new dialect fails this until the paragraph names it."""
    from eventstore.dialects import available

    named = {"mapipe": "multi-agent-pipeline", "friday": "TemperAI FRIDAY", "taskmaster": "claude-task-master",
             "taskflow": "agent-framework task folders", "envelope": "agentic-workflow envelopes",
             "claude": "Claude Code", "generic": "any other JSON state file"}
    assert set(named) == set(available()), "name the new dialect's source in the README's opening paragraph"
    opening = next(p for p in README.read_text().split("\n\n") if p.startswith("evstore is an append-only"))
    opening = " ".join(opening.split())
    assert [name for name, phrase in named.items() if phrase not in opening] == []


def test_readme_says_what_a_repeated_capture_does() -> None:
    """The capture paragraph says what running the same capture again does, and the rule for a write
    of the same bytes (tests/test_capture_once.py holds the behaviour)."""
    text = " ".join(README.read_text().split())
    for phrase in ("Capturing the same source again records nothing", "a folder that grew adds only its new versions",
                   "a rewritten history is refused", "a new commit with the same blob) is no version",
                   "nothing is written for it"):
        assert phrase in text, phrase


def test_readme_says_how_to_run_a_notebook_on_your_own_store() -> None:
    text = README.read_text()
    line = next(x for x in text.splitlines() if x.startswith("EVSTORE_NOTEBOOK_URL="))
    assert "jupyter" in line and "notebooks/" in line
    for nb in (README.parent / "notebooks").glob("*.ipynb"):  # the variable the README names is the one they read
        assert 'os.environ.get(\\"EVSTORE_NOTEBOOK_URL\\")' in nb.read_text(), nb
