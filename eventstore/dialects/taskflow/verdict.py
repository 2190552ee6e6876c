"""Reading the Referee's VERDICT.md: which verdict, by which rule, on which line.

The seed names three verdicts (PASS, FAIL, NEEDS_REVIEW) and three lists (``Findings``,
``Remaining Issues``, ``Tasks for Review / Tie-Breaks``) but no file format, so the parser is
deliberately conservative: a verdict is only read where the file states one explicitly, and a
file that states none, or several different ones, is *unparsed*, never a guessed PASS.

Rules, by priority (the first rule that matches anywhere decides; fenced code is ignored):

``heading``
    a Markdown heading naming the verdict: ``# Verdict: PASS``, ``## Final verdict — FAIL``.
``field``
    a ``Verdict:`` line, markup allowed: ``**Verdict:** NEEDS_REVIEW``, ``- Verdict: fail``.
``heading-next-line``
    a bare ``## Verdict`` heading whose first non-blank line starts with a verdict.
``bare-line``
    a line that is only an upper-case verdict, markup allowed: ``**PASS**``.

The verdict word must start the value (``Verdict: PASS - minor notes`` is PASS;
``Verdict: probably passes`` is nothing).  ``NEEDS REVIEW`` / ``needs-review`` read as
NEEDS_REVIEW, ``PASSED`` / ``FAILED`` as PASS / FAIL.  A matching line that names two verdicts
(``Verdict: PASS/FAIL``) or two lines of the deciding rule that disagree make the file unparsed.

Example::

    >>> parse_verdict("# Verdict: FAIL\\n\\n## Findings\\n- null-handling: lookup returns None\\n").value
    'FAIL'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RULES = ("heading", "field", "heading-next-line", "bare-line")
VERDICTS = ("PASS", "FAIL", "NEEDS_REVIEW")

_WORD = r"(PASS(?:ED)?|FAIL(?:ED)?|NEEDS[ _-]?REVIEW)"
_WORD_START = re.compile(r"^" + _WORD + r"(?![A-Za-z])", re.IGNORECASE)
_WORD_ANY = re.compile(r"(?<![A-Za-z])" + _WORD + r"(?![A-Za-z])", re.IGNORECASE)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_VERDICT_KEY = r"(?:final\s+|referee\s+|overall\s+)?verdict"
_HEADING_VALUE = re.compile(r"^" + _VERDICT_KEY + r"\s*(?::|-|—|–)?\s*(.+)$", re.IGNORECASE)
_HEADING_BARE = re.compile(r"^" + _VERDICT_KEY + r"\s*:?\s*$", re.IGNORECASE)
_FIELD = re.compile(r"^\s*(?:[-*+]\s+|>\s*)?" + _VERDICT_KEY + r"\s*:\s*(.*)$", re.IGNORECASE)
_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EMPTY_ITEMS = {"none", "none.", "n/a", "na", "-", "nothing", "no findings", "(none)"}


@dataclass(frozen=True)
class Item:
    issue: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"issue": self.issue, "text": self.text}


@dataclass(frozen=True)
class ParsedVerdict:
    value: str | None  # PASS / FAIL / NEEDS_REVIEW, or None when unparsed
    parsed_by: str | None
    line: int | None
    reason: str | None  # why it is unparsed
    findings: list[Item] = field(default_factory=list)
    remaining_issues: list[Item] = field(default_factory=list)
    tie_breaks: list[Item] = field(default_factory=list)


def _unmark(text: str) -> str:
    """Strip emphasis and code markup (not underscores: NEEDS_REVIEW has one)."""
    return re.sub(r"[*`]", "", text).strip()


def _normalise(word: str) -> str:
    w = re.sub(r"[ _-]", "", word.upper())
    if w.startswith("PASS"):
        return "PASS"
    if w.startswith("FAIL"):
        return "FAIL"
    return "NEEDS_REVIEW"


def _value_of(text: str) -> tuple[str | None, bool]:
    """(verdict, ambiguous) of a value that must *start* with a verdict word."""
    value = _unmark(text).lstrip(":-—– ").strip()
    m = _WORD_START.match(value)
    if not m:
        return None, False
    words = {_normalise(w) for w in _WORD_ANY.findall(value)}
    return _normalise(m.group(1)), len(words) > 1


def _code_mask(lines: list[str]) -> list[bool]:
    mask, inside = [], False
    for line in lines:
        if _FENCE.match(line):
            mask.append(True)
            inside = not inside
            continue
        mask.append(inside)
    return mask


def parse_verdict(text: str) -> ParsedVerdict:
    """Parse VERDICT.md text.  See the module docstring for the rules."""
    lines = text.splitlines()
    in_code = _code_mask(lines)
    matches: dict[str, list[tuple[int, str, bool]]] = {rule: [] for rule in RULES}
    for i, line in enumerate(lines):
        if in_code[i]:
            continue
        h = _HEADING.match(line)
        if h:
            title = _unmark(h.group(2))
            hv = _HEADING_VALUE.match(title)
            if hv:
                value, amb = _value_of(hv.group(1))
                if value:
                    matches["heading"].append((i + 1, value, amb))
                    continue
            if _HEADING_BARE.match(title):
                for j in range(i + 1, len(lines)):
                    if in_code[j] or not lines[j].strip():
                        continue
                    if not _HEADING.match(lines[j]):
                        value, amb = _value_of(lines[j])
                        if value:
                            matches["heading-next-line"].append((j + 1, value, amb))
                    break
            continue
        f = _FIELD.match(_unmark(line))
        if f:
            value, amb = _value_of(f.group(1))
            if value:
                matches["field"].append((i + 1, value, amb))
            continue
        bare = _unmark(line).strip()
        if bare and re.fullmatch(r"(PASS(?:ED)?|FAIL(?:ED)?|NEEDS[ _-]?REVIEW)", bare):
            matches["bare-line"].append((i + 1, _normalise(bare), False))
    findings, remaining, tie_breaks = parse_sections(lines, in_code)
    for rule in RULES:
        found = matches[rule]
        if not found:
            continue
        ambiguous = [n for n, _, amb in found if amb]
        if ambiguous:
            reason = f"line {ambiguous[0]} names more than one verdict"
            return ParsedVerdict(None, None, None, reason, findings, remaining, tie_breaks)
        values = sorted({v for _, v, _ in found})
        if len(values) > 1:
            where = ", ".join(f"{v} (line {n})" for n, v, _ in found)
            return ParsedVerdict(None, None, None, f"conflicting verdicts: {where}",
                                 findings, remaining, tie_breaks)
        line_no, value, _ = found[0]
        return ParsedVerdict(value, rule, line_no, None, findings, remaining, tie_breaks)
    return ParsedVerdict(None, None, None, "no line states PASS, FAIL or NEEDS_REVIEW",
                         findings, remaining, tie_breaks)


def _section_kind(title: str) -> str | None:
    t = _unmark(title).lower().rstrip(":").strip()
    if re.search(r"tie[\s-]?breaks?", t):
        return "tie_breaks"
    if "remaining issue" in t:
        return "remaining_issues"
    if t.startswith("finding") or t.endswith("findings"):
        return "findings"
    return None


def parse_sections(lines: list[str], in_code: list[bool] | None = None
                   ) -> tuple[list[Item], list[Item], list[Item]]:
    """Top-level list items under the Findings / Remaining Issues / Tie-Breaks sections.

    A section starts at a heading (or a line that is only bold text) naming it and ends at the
    next heading.  Items reading "None" / "N/A" are not items.
    """
    mask = in_code if in_code is not None else _code_mask(lines)
    out: dict[str, list[Item]] = {"findings": [], "remaining_issues": [], "tie_breaks": []}
    current: str | None = None
    for i, line in enumerate(lines):
        if mask[i]:
            continue
        h = _HEADING.match(line)
        bold = re.fullmatch(r"\s*\*\*([^*]+)\*\*:?\s*", line)
        if h or bold:
            current = _section_kind(h.group(2) if h else bold.group(1))  # type: ignore[union-attr]
            continue
        if current is None:
            continue
        m = _ITEM.match(line)
        if not m:
            continue
        text = m.group(1).strip()
        if _unmark(text).lower() in _EMPTY_ITEMS:
            continue
        items = out[current]
        slug = issue_slug(text)
        taken = {it.issue for it in items}
        base, n = slug, 2
        while slug in taken:
            slug = f"{base}-{n}"
            n += 1
        items.append(Item(slug, text))
    return out["findings"], out["remaining_issues"], out["tie_breaks"]


def issue_slug(text: str) -> str:
    """Kebab-case issue id for follow-up task names.

    A leading ``**bold**`` or ``code`` span, else a short label before ``:`` / `` — ``, else
    the first four words::

        >>> issue_slug("null-handling: user lookup returns None")
        'null-handling'
        >>> issue_slug("**Auth gateway** times out under load")
        'auth-gateway'
    """
    t = text.strip()
    m = re.match(r"^(?:\*\*|__)(.+?)(?:\*\*|__)", t) or re.match(r"^`([^`]+)`", t)
    if m:
        head = m.group(1)
    else:
        lab = re.match(r"^([^:—–]+?)\s*(?::|—|–|\s-\s)", t)
        head = lab.group(1) if lab and len(lab.group(1).split()) <= 5 else " ".join(t.split()[:4])
    slug = re.sub(r"[^a-z0-9]+", "-", head.lower()).strip("-")[:40].strip("-")
    return slug or "item"
