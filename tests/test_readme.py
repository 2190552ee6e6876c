"""The README's CLI reference and first commands stay in step with the code (sqlite-utils style)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from eventstore.cli import register

README = Path(__file__).resolve().parent.parent / "README.md"


def _commands(group: click.Group, prefix: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, cmd in group.commands.items():
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
