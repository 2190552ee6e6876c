"""A dialect's commands are plugins too: the entry-point group ``evstore.commands``.

The built-in ones live in their dialect's folder (``eventstore/dialects/<name>/commands.py``); a
throwaway distribution on ``sys.path`` adds a command without touching the tree, and a broken
one is listed as broken and says why when run, without breaking ``evstore --help``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_dialect_plugins import make_distribution

from eventstore.cli import COMMANDS_GROUP, cli, register
from eventstore.plugins import entry_points

ROOT = Path(__file__).resolve().parent.parent

COMMAND = '''
import click


@click.command()
@click.argument("word")
def tick(word):
    """Say WORD back (a throwaway plugin command)."""
    click.echo(f"tick {word}")


not_a_command = 42
'''


def _declared() -> dict[str, str]:
    declared: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        COMMANDS_GROUP]
    return declared


def test_built_in_commands_live_in_their_dialects_folder_and_are_installed() -> None:
    declared = _declared()
    assert {"hook", "doctor"} <= set(declared)
    for value in declared.values():
        module = value.partition(":")[0].split(".")
        assert module[:2] == ["eventstore", "dialects"] and module[3] == "commands" and len(module) == 4, value
    installed = {r.name: r.value for r in entry_points(COMMANDS_GROUP)}
    assert {k: installed.get(k) for k in declared} == declared, "reinstall: pip install -e ."
    assert not (ROOT / "eventstore" / "cli" / "claude.py").exists()


def test_evstore_help_lists_the_dialects_commands() -> None:
    out = CliRunner().invoke(register(), ["--help"])
    assert out.exit_code == 0, out.output
    listed = {line.split()[0] for line in out.output.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert set(_declared()) <= listed and {"ingest", "replay", "serve"} <= listed
    hook = CliRunner().invoke(register(), ["hook", "--help"])
    assert hook.exit_code == 0 and "claude-code" in hook.output and "install" in hook.output


@pytest.fixture
def command_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = make_distribution(tmp_path / "site", "evstore-tick", {}, {"evstore_tick": COMMAND})
    (where / "evstore_tick-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{COMMANDS_GROUP}]\n"
        "tick = evstore_tick:tick\n"
        "shaky = evstore_tick_missing:tick\n"
        "odd = evstore_tick:not_a_command\n"
        "ingest = evstore_tick:tick\n")
    monkeypatch.syspath_prepend(str(where))
    yield where
    for name in ("tick", "shaky", "odd"):  # a command the group loaded stays on it: drop them again
        cli.commands.pop(name, None)


def test_a_plugin_command_runs_and_a_broken_one_says_why(command_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(register(), ["tick", "hello"])
    assert out.exit_code == 0 and out.output == "tick hello\n", out.output
    listing = runner.invoke(register(), ["--help"])
    assert listing.exit_code == 0, listing.output
    for name in ("tick", "shaky", "odd"):
        assert f"\n  {name} " in listing.output, listing.output
    shaky = runner.invoke(register(), ["shaky", "--anything"])
    assert shaky.exit_code == 1
    for part in ("'shaky'", "evstore_tick_missing:tick", "ModuleNotFoundError", COMMANDS_GROUP, '"evstore_tick"'):
        assert part in shaky.output, (part, shaky.output)
    odd = runner.invoke(register(), ["odd"])
    assert odd.exit_code == 1 and "names no click command" in odd.output
    # A plugin cannot take a built-in command's name: ``ingest`` is still evstore's own.
    ingest = runner.invoke(register(), ["ingest", "--help"])
    assert ingest.exit_code == 0 and "DIALECT" in ingest.output
