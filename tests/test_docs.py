"""The pages in docs/ stay true: their links resolve, every command they name exists and parses as written,
their runnable blocks run, and the files and benchmark options they name are there.

The README is the front door (tests/test_readme.py holds its own blocks); each topic page under docs/ is
held here the same way, so moving a section between pages keeps it tested."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from eventstore.cli import register

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The topic pages the README links to (one page per topic), beside docs/DESIGN.md and docs/MUTATION.md.
TOPICS = ("capture", "serve-and-teams", "proofs", "metrics", "performance", "development")
PAGES = sorted([README, *DOCS.glob("*.md")])


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _blocks(text: str) -> list[str]:
    """The fenced code blocks that hold shell commands (not ```python or ```toml)."""
    # every fence is paired, whatever its language (a ```text block left unpaired shifted the pairs after it)
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
            if lang in ("", "sh", "bash", "console")]


def _command_lines(block: str) -> list[str]:
    """Each `evstore ...` command of a block, as written: comments cut, `&&` chains split, a leading
    VAR=value and a trailing `&` dropped."""
    out = []
    for line in block.splitlines():
        line = line.split("  #")[0].strip()
        for part in line.split("&&"):
            part = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", part.strip()).removesuffix("&").strip()
            if part.startswith("evstore "):
                out.append(part)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def _resolve(tokens: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """Walk `evstore [global options] GROUP ... COMMAND` to the command; return its path, the command
    and the arguments left for it."""
    cmd: click.Command = register()
    ctx = click.Context(cmd, info_name="evstore")
    path = ["evstore"]
    rest = list(tokens)
    while isinstance(cmd, click.Group):
        while rest and rest[0].startswith("-"):  # the group's own options (--url URL, --traceback, ...)
            opt = rest.pop(0)
            param = next((p for p in cmd.params if opt.split("=")[0] in getattr(p, "opts", ())), None)
            assert param is not None, f"{' '.join(path)} has no option {opt}"
            if not getattr(param, "is_flag", False) and "=" not in opt:
                rest.pop(0)
        assert rest, f"{' '.join(path)} needs a command"
        name = rest.pop(0)
        sub = cmd.get_command(ctx, name)
        assert sub is not None, f"`{' '.join(path)} {name}`: no such command"
        path.append(name)
        ctx = click.Context(sub, info_name=name, parent=ctx)
        cmd = sub
    return path, cmd, rest


def _parse(line: str) -> None:
    """Parse one documented command line as click would run it, without running it: unknown options,
    missing or extra arguments and bad choices fail; a path that only needs to exist is accepted."""
    tokens = shlex.split(re.sub(r"<[^>]+>", "X", line))[1:]
    path, cmd, rest = _resolve(tokens)
    parent = click.Context(register(), info_name="evstore")
    try:
        cmd.make_context(" ".join(path[1:]), rest, parent=parent)
    except click.BadParameter as e:
        if "does not exist" not in e.format_message():
            raise AssertionError(f"{line}: {e.format_message()}") from e
    except click.UsageError as e:
        raise AssertionError(f"{line}: {e.format_message()}") from e


# ---------------------------------------------------------------- the front door links every page


def test_readme_links_every_topic_page_and_they_resolve() -> None:
    text = README.read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)", text))
    for topic in (*TOPICS, "DESIGN", "MUTATION"):
        assert f"docs/{topic}.md" in linked, f"README does not link docs/{topic}.md"
    for link in linked:
        assert (ROOT / link).is_file(), link
    assert len(text.splitlines()) <= 300, "the README is the front door: move details to a page in docs/"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_links_resolve(page: Path) -> None:
    """Every relative link (file and #anchor) of README.md and docs/*.md points at something that is there."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{_id(page)}: {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{_id(page)}: no heading #{anchor} in {dest.name}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent == DOCS], ids=_id)
def test_pages_stand_on_their_own(page: Path) -> None:
    """A page names no issue a reader cannot see and no file outside the repository."""
    text = page.read_text()
    assert not re.search(r"\bissues? \d+|\.\./shared/|/work/", text), re.findall(r".{40}(?:issue|/work/).{20}", text)


# ---------------------------------------------------------------- every command named exists and parses


#: Inline code that quotes what evstore prints, not a command (``evstore serve``'s start-up line).
OUTPUT = ("evstore serving on ",)


def _named_commands(page: Path) -> list[str]:
    text = page.read_text()
    inline = [c for c in re.findall(r"`(evstore [^`]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
              if not c.startswith(OUTPUT)]
    return [c for block in _blocks(text) for c in _command_lines(block)] + inline


def _hidden(group: click.Group, prefix: str) -> set[str]:
    out: set[str] = set()
    for name, cmd in group.commands.items():
        if cmd.hidden:
            out.add(f"{prefix} {name}")
        if isinstance(cmd, click.Group):
            out |= _hidden(cmd, f"{prefix} {name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_command_named_exists(page: Path) -> None:
    """`evstore X` in a page's text or blocks is a command `evstore --help` lists (a hidden, deprecated
    spelling only where the same paragraph says it is hidden)."""
    hidden = _hidden(register(), "evstore")
    paragraphs = page.read_text().split("\n\n")
    for named in _named_commands(page):
        words = [w for w in re.sub(r"\[.*?\]|<[^>]+>", "", named).split()[1:] if not w.startswith("-")]
        if not words:  # `evstore --help`
            continue
        for alternative in (words[1].split("|") if len(words) > 1 and "|" in words[1] else [None]):
            tokens = words[:1] + ([alternative] if alternative else words[1:2])
            path, _, _ = _resolve(tokens)
            spelled = " ".join(path)
            if spelled in hidden:
                assert any(named in p and "hidden" in p for p in paragraphs), \
                    f"{_id(page)} names {spelled}, which --help does not list"


@pytest.mark.parametrize("page", [p for p in PAGES if any(_command_lines(b) for b in _blocks(p.read_text()))],
                         ids=_id)
def test_command_blocks_parse(page: Path) -> None:
    """Every command line of every block parses with the options and arguments the CLI has today."""
    for block in _blocks(page.read_text()):
        for line in _command_lines(block):
            _parse(line)


def test_every_topic_page_with_commands_is_checked() -> None:
    """The parametrised checks above cover each topic page that has command blocks (a page with none
    is prose and tables only, e.g. performance, whose commands are benchmark scripts: see below)."""
    for topic in TOPICS:
        page = DOCS / f"{topic}.md"
        assert page.is_file(), page
        blocks = _blocks(page.read_text())
        assert any(_command_lines(b) for b in blocks) or "python benchmarks/" in page.read_text(), topic


# ---------------------------------------------------------------- runnable blocks run


RUNNABLE = [(p, i) for p in PAGES if p != README
            for i, _ in enumerate(re.findall(r"<!-- run:start -->", p.read_text()))]


@pytest.mark.parametrize(("page", "index"), RUNNABLE, ids=[f"{_id(p)}-{i}" for p, i in RUNNABLE])
def test_runnable_blocks_run_top_to_bottom(page: Path, index: int, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A block between <!-- run:start --> and <!-- run:end --> runs as written, on a fresh store in an
    empty folder; `<task-id>` is the one the demo at its top prints."""
    block = page.read_text().split("<!-- run:start -->")[index + 1].split("<!-- run:end -->")[0]
    commands = _command_lines(block)
    assert commands and commands[0].startswith("evstore demo")
    monkeypatch.chdir(tmp_path)
    for var in ("EVSTORE_URL", "EVSTORE_SIGNING_KEY", "EVSTORE_ANALYTICS_DIR"):
        monkeypatch.delenv(var, raising=False)
    task = None
    for command in commands:
        if "<task-id>" in command:
            assert task, "the demo printed no task id to try"
            command = command.replace("<task-id>", task)
        r = CliRunner().invoke(register(), shlex.split(command)[1:])
        assert r.exit_code == 0, f"{command}\n{r.output}"
        if task is None:
            task = re.search(r"^  evstore replay (\S+)$", r.stdout, re.M).group(1)  # type: ignore[union-attr]


def test_proofs_and_metrics_pages_have_runnable_blocks() -> None:
    assert {p.name for p, _ in RUNNABLE} >= {"proofs.md", "metrics.md"}


# ---------------------------------------------------------------- named files and benchmark options are there


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_named_files_and_benchmark_options_exist(page: Path) -> None:
    """`python benchmarks/X.py --opt` names a script that defines --opt; a `tests/...`, `benchmarks/...`,
    `notebooks/...` or `migrations/...` path in backticks is in the repository."""
    text = page.read_text()
    for script, args in re.findall(r"python\s+(benchmarks/[\w/]+\.py)((?:\s+-[-\w]+(?:\s+[\w.]+)?)*)", text):
        source = (ROOT / script).read_text()
        for opt in re.findall(r"--[\w-]+", args):
            assert f'"{opt}"' in source, f"{_id(page)}: {script} has no option {opt}"
    for path in re.findall(r"`((?:tests|benchmarks|notebooks|migrations)/[^`\s*<:]+)`", text):
        assert (ROOT / path.split("::")[0]).exists(), f"{_id(page)}: {path}"
