"""Nothing outside a dialect's folder names it: the projections and the CLI read every dialect's
facts, views, metric sections, demo weight and commands from the registry, never from a list or an
``if dialect == ...`` of their own.

The check reads the source of ``projections/`` and ``eventstore/cli/`` and fails on any registered
dialect's name as a word (in code, strings and comments alike: a docstring naming a dialect goes
stale as surely as a list does) and on any catalog event type's tag.  A new dialect is checked by
being registered."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

from eventstore.dialects import available, get_dialect

ROOT = Path(__file__).resolve().parents[1]
CHECKED = [ROOT / "projections", ROOT / "eventstore" / "cli"]
#: What still names a dialect, and why.  (A dialect's commands live in its folder and register in
#: the ``evstore.commands`` entry-point group; ``ingest``/``watch``/``replay --raw`` ask the dialect,
#: see Dialect.ingest_command; ``evstore serve`` routes ``POST /hooks/<name>`` to the dialect whose
#: ``http_hook`` it is.)
#: ``projections/writers.py`` reads ``meta.source.claude``, the key stored events already carry for
#: a hook's attribution (history is never rewritten, so the key stays).
#: :func:`test_each_exemption_is_still_needed` fails once one is no longer needed.
EXEMPT: dict[str, set[str]] = {
    "claude": {"projections/writers.py"},
}


def _sources() -> list[Path]:
    return sorted(p for folder in CHECKED for p in folder.rglob("*") if p.suffix in (".py", ".html", ".js", ".css"))


def _hits(pattern: re.Pattern[str], exempt: AbstractSet[str] = frozenset()) -> list[str]:
    out = []
    for path in _sources():
        if str(path.relative_to(ROOT)) in exempt:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


def test_the_sources_checked_exist() -> None:
    assert len(_sources()) > 20 and any(p.name == "metrics.py" for p in _sources())


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.IGNORECASE)


@pytest.mark.parametrize("name", available())
def test_no_dialect_name_outside_its_folder(name: str) -> None:
    hits = _hits(_word(name), EXEMPT.get(name, set()))
    assert not hits, f'"{name}" is named outside eventstore/dialects/{name}/:\n' + "\n".join(hits)


@pytest.mark.parametrize("name", [n for n in available() if get_dialect(n).catalog])
def test_no_dialect_event_type_outside_its_folder(name: str) -> None:
    tags = [str(cls.__struct_config__.tag) for cls in get_dialect(name).catalog]
    hits = _hits(re.compile("|".join(re.escape(t) for t in tags)), EXEMPT.get(name, set()))
    assert not hits, f"{name}'s event types are named outside its folder:\n" + "\n".join(hits)


@pytest.mark.parametrize("name", sorted(EXEMPT))
def test_each_exemption_is_still_needed(name: str) -> None:
    for path in EXEMPT[name]:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert _word(name).search(text), f"{path} no longer names {name}: drop it from EXEMPT"


def test_the_check_finds_a_name() -> None:
    """The pattern is not vacuous: it finds names as the old code wrote them, not inside other words."""
    assert _word("friday").search('WEIGHTS = {"mapipe": 4, "friday": 2}')
    assert _word("envelope").search('if d.name == "envelope":')
    assert _word("mapipe").search("FROM phase_events WHERE dialect = 'mapipe'")
    assert not _word("claude").search("claude-task-master") and not _word("generic").search("generically")
