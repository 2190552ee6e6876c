"""Scrub credentials out of transcript lines before anything is stored.

Transcripts and tool outputs hold whatever an agent read: cloud keys, tokens, private keys,
``.env`` files.  An append-only store must never hold them, so every value matching a
well-known secret format is replaced by ``[evstore-secret:<kind>:<fingerprint>]`` before the
line is recorded.  The fingerprint is HMAC-SHA256 of the secret under a local key
(``EVSTORE_SCRUB_KEY``, else a random key created once with mode 0600 in
``~/.config/evstore/scrub.key``), cut to 12 hex digits: the same secret gives the same marker
(so "the key leaked in session A is the one used in session B" stays answerable) and the marker
cannot be turned back into the secret without the key.

A pattern may name the part to replace with a group ``(?P<secret>...)``.  Markers use only ``[A-Za-z0-9:_-]``, so a scrubbed JSON line stays valid JSON with the same
structure.  Extra patterns: ``EVSTORE_SECRET_PATTERNS`` names a file of ``kind<TAB>regex``
lines.  Scrubbing is off only with an explicit ``--no-scrub``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Inside a JSON string a newline is the two characters "\n": patterns that span lines match that.
_NL = r"(?:\\n|\n)"

#: A name that means a secret: it ends with one of these words (any case, any prefix:
#: DB_PASSWORD, dbPassword, client-secret, GITHUB_TOKEN, x.auth).  Not: a name that goes on past
#: the word (input_tokens, tokenizer, secretary, author, PASSWORD_FILE).
_KEY_NAME = (r"(?ai:[A-Za-z0-9_.-]*?(?:pass(?:word|wd|phrase)|secret|token|credentials?|auth|"
             r"(?:api|private|access|secret|auth|signing|encryption|client|master)[_.-]?key|"
             r"secret[_.-]?key[_.-]?base)(?![A-Za-z0-9]))")
#: Where a name may start: the text's start, after a character that is no part of a name (a
#: quote, a space, ``;``), or after an escaped newline or tab inside a JSON string.
_AFTER = r"(?:(?<=^)|(?<=[^A-Za-z0-9_.\-\\])|(?<=\\[nrt]))"
#: Where a line starts: the text's start, after a newline, and in JSON text after an escaped
#: newline or where a string starts (a quote: a file's text as a tool output, a command line).
_LINE_START = r"(?:(?<=^)|(?<=[\r\n\"])|(?<=\\n)|(?<=\\r))"

#: A quoted value, read as the quotes around it read it, so a value holding the other quote or an
#: escape is caught whole and never runs past its closing quote.  Three quotings: "..." (JSON or
#: shell, where a backslash escapes the character after it); the same inside a JSON string, whose
#: quotes are backslash-quote (there the value's own escaped quote is three backslashes and a quote,
#: its escaped backslash four backslashes, and an escaped newline ends the line); and '...'.
_QUOTED_VALUE = (
    r"(?:(?P<dq>\")|(?P<eq>\\\")|(?P<sq>\\?'))"
    r"(?P<secret>(?:(?(dq)(?:[^\"\\\r\n]|\\[^\r\n])"
    r"|(?(eq)(?:[^\"\\\r\n]|\\\\\\\\|\\\\\\\"|\\\\[^\"\\]|\\[t/]|\\u[0-9A-Fa-f]{4})"
    r"|(?:[^'\\\r\n]|\\[^nr\r\n])))){1,512}?)"
    r"(?(dq)\"|(?(eq)\\\"|(?P=sq)))")

#: Every built-in pattern, in the order they run: ``(kind, regex)``.  This list is the one place
#: to add a format; ``tests/test_secret_forms.py`` holds a case for every form it claims.
PATTERNS: list[tuple[str, str]] = [
    ("private-key", r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----"),
    ("aws-access-key-id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    ("aws-secret-access-key",
     r"(?i:aws_secret_access_key)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    ("anthropic-api-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-api-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("stripe-key", r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("url-password", r"(?<=://)[^/\s:@\"\\]{1,64}:[^/\s@\"\\]{1,128}(?=@)"),
    ("authorization-header",
     r"(?ai:(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?(?ai:bearer|basic|token|digest)[ \t]+"
     r"(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    # Assignments of a value to a name that means a secret (_KEY_NAME), as people write them.
    # Quoted value, anywhere: JSON "password": "x", TOML/INI/YAML key = "x" / key: 'x', shell
    # export DB_PASSWORD="x", code literals; inside a JSON string the quotes are \".
    ("secret-assignment",
     _AFTER + _KEY_NAME + r"(?:\\?[\"'])?[ \t]*(?::=|=>|[:=])[ \t]*" + _QUOTED_VALUE),
    # NAME=value with nothing around "=", anywhere a word starts: .env and shell (indented, after
    # export, inline before a command: API_TOKEN=x ./deploy), INI without spaces.
    ("env-assignment", _AFTER + _KEY_NAME + r"=(?P<secret>[^\s\"'\\=][^\s\"'\\]{0,511})"),
    # key: value / key = value with a bare value that ends its line, where a line starts (indented
    # or not): YAML, INI, TOML and properties files.
    ("config-assignment",
     _LINE_START + r"(?:[ \t]|\\t)*(?:- )?(?:\\?[\"'])?" + _KEY_NAME + r"(?:\\?[\"'])?[ \t]*[:=][ \t]*"
     r"(?P<secret>[^\s\"'\\#;|>][^\s\"'\\]{0,511})(?=[ \t]*(?:$|[\r\n\"#;]|\\[nrt\"]))"),
]

#: Values that a keyword pattern matched but that hold no secret: references and placeholders
#: (detect-secrets keeps a list like it, ``FALSE_POSITIVES`` in its keyword plugin).  A value is
#: left alone when, lower-cased, it is one of these words, starts with one of the prefixes (a
#: variable, a command substitution, a template), or names a secret word itself (``password``,
#: ``self.token``, ``${{ secrets.API_TOKEN }}``, ``<your-password>``); a bare value that holds a
#: bracket is code (``getpass()``, ``request.form[``).
_NOT_SECRETS = frozenset({"null", "none", "nil", "true", "false", "undefined", "redacted", "todo", "xxx", "***",
                          "changeit", "example", "dummy", "placeholder", "string", "str", "required", "optional",
                          "secret", "test", "...", "…"})
_REFERENCE_PREFIXES = ("$", "%(", "{{", "<", "*", "[evstore-secret", "@", "env:", "env.", "process.env",
                       "os.environ", "os.getenv", "getenv")
_SECRET_WORDS = re.compile(r"(?ai:pass(?:word|wd|phrase)|secret|token|api[_.-]?key|private[_.-]?key|credential)")
#: The kinds whose matches pass through :func:`_is_secret_value`.
_KEYWORD_KINDS = frozenset({"secret-assignment", "env-assignment", "config-assignment", "authorization-header"})


def _is_secret_value(kind: str, value: str) -> bool:
    """Whether a keyword pattern's value is worth replacing (not a reference or placeholder)."""
    low = value.strip().lower()
    if low in _NOT_SECRETS or low.startswith(_REFERENCE_PREFIXES) or _SECRET_WORDS.search(low):
        return False
    if kind != "secret-assignment" and any(c in value for c in "()[]{}"):
        return False
    return len(low) >= 2


#: For each built-in pattern, what any match of it must contain: every word of the first tuple
#: and one of the second (empty: no condition).  A line that lacks them cannot match, so the
#: pattern is not run on it: the regexes, tried at every position of every line, scrubbed about
#: 2 MB/s together on generated transcripts, while these are substring scans of the line's UTF-8
#: bytes (an ASCII word is in the bytes exactly when it is in the text; scans of ``bytes`` ran
#: 3-5x faster than of a ``str`` holding non-ASCII characters).  No marker holds any of these
#: words, so deciding on the line before earlier patterns replaced anything is sound.
_NEEDS: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {
    "private-key": ((b"-----BEGIN ",), ()),
    "anthropic-api-key": ((b"sk-ant-",), ()),
    "openai-api-key": ((b"sk-",), ()),
    "slack-token": ((b"xox",), ()),
    "google-api-key": ((b"AIza",), ()),
    "jwt": ((b"eyJ",), ()),
    "url-password": ((b"://", b"@"), ()),
}
#: The keyword kinds look at the line lower-cased (their names match in any case, ASCII only):
#: a match holds a name that ends with one of these words, right before its ":" or "=" (maybe
#: after a closing quote).  Claude Code's own "input_tokens": and "max_tokens": do not pass
#: (the name goes on past "token"), so most transcript lines are not searched by these patterns.
_KEYWORD_GATE = re.compile(rb"(?:pass(?:word|wd|phrase)|secret|token|key|credentials?|auth|key_base|authorization)"
                           rb"(?:\\?[\"'])?[ \t]*[:=]")
_KEYWORD_NEEDS = frozenset({"authorization-header", "secret-assignment", "env-assignment", "config-assignment"})
#: Where one regex with a literal first character scans as fast as one substring test and
#: replaces several.
_NEEDS_RX: dict[str, re.Pattern[bytes]] = {
    "aws-access-key-id": re.compile(rb"A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)"),
    "github-token": re.compile(rb"gh[pousr]_|github_pat_"),
    "stripe-key": re.compile(rb"_(?:live|test)_"),
}
#: ``re``'s IGNORECASE also matches ``ſ`` (U+017F) to ``s`` and the Kelvin sign (U+212A) to
#: ``k``: a line holding either is always searched for the case-insensitive pattern.
_FOLDS_TO_ASCII = (b"\xc5\xbf", b"\xe2\x84\xaa")


def _may_match(kind: str, data: bytes, lower: bytes | None = None) -> bool:
    """False only if the built-in pattern ``kind`` cannot match the text whose UTF-8 (or
    latin-1) bytes are ``data`` (``lower``: ``data.lower()``, if the caller has it)."""
    rx = _NEEDS_RX.get(kind)
    if rx is not None:
        return rx.search(data) is not None
    if kind == "aws-secret-access-key":
        return b"aws_secret_access_key" in (lower or data.lower()) or any(f in data for f in _FOLDS_TO_ASCII)
    if kind in _KEYWORD_NEEDS:
        return _KEYWORD_GATE.search(lower or data.lower()) is not None
    every, one_of = _NEEDS[kind]
    return all(word in data for word in every) and (not one_of or any(word in data for word in one_of))


@dataclass(frozen=True)
class Scrubbed:
    """A secret replaced in a line: its kind, the marker that replaced it, where it started."""

    kind: str
    marker: str
    offset: int


def local_key() -> bytes:
    """The local key (``EVSTORE_SCRUB_KEY``, else ``~/.config/evstore/scrub.key``, created once)."""
    return _key()


def _key() -> bytes:
    env = os.environ.get("EVSTORE_SCRUB_KEY")
    if env:
        return env.encode()
    path = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "evstore" / "scrub.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_hex(32).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key)
        finally:
            os.close(fd)
        return key


_GATED = tuple(kind for kind, _ in PATTERNS)


def _gates(data: bytes) -> frozenset[str]:
    """The built-in patterns that may match the text whose bytes are ``data``."""
    lower = data.lower()
    keyword = _KEYWORD_GATE.search(lower) is not None  # one search for the four keyword kinds
    return frozenset(k for k in _GATED if (keyword if k in _KEYWORD_NEEDS else _may_match(k, data, lower)))


#: JSON's ``\u`` escapes (four hex digits) in JSON text, and escaped backslashes (so ``\\u0068`` stays a backslash
#: and the text "u0068").
_ESCAPE = re.compile(r"\\\\|\\u([0-9A-Fa-f]{4})")


def _unescape(m: re.Match[str]) -> str:
    if m.group(1) is None:
        return m.group(0)
    char = chr(int(m.group(1), 16))
    # Kept escaped: what JSON must escape (controls, quote, backslash) and lone surrogate halves.
    if char < " " or char in "\"\\" or "\ud800" <= char <= "\udfff":
        return m.group(0)
    return char


def decode_json_escapes(text: str) -> str:
    r"""``text`` (JSON, or strings of it) with each ``\u`` escape (four hex digits) of a character JSON does not
    need to escape written as that character: the same JSON value, in the form the patterns read
    (``gh\u0070_...`` is a GitHub token; ``\"pass\u0077ord\"`` a password key)."""
    return _ESCAPE.sub(_unescape, text) if "\\u" in text else text


#: Pieces whose verdict a scrubber remembers (by SHA-256; 32 bytes and a small set each).
_REMEMBERED = 200_000


class Scrubber:
    """Replaces secrets in text; one instance per ingest (the key is read once)."""

    def __init__(self, extra: list[tuple[str, str]] | None = None, key: bytes | None = None) -> None:
        extra = list(extra or []) + _env_patterns()
        # Built-ins are gated by what their matches contain (_may_match); extra patterns always run.
        self._compiled = [(kind, re.compile(rx, re.S), True) for kind, rx in PATTERNS]
        self._compiled += [(kind, re.compile(rx, re.S), False) for kind, rx in extra]
        self._key = key if key is not None else _key()
        self._seen: dict[bytes, frozenset[str]] = {}

    def kinds(self, pieces: Iterable[tuple[bytes, bytes | None]]) -> frozenset[str]:
        """The built-in patterns that may match a line cut into ``pieces`` at its quote characters,
        each ``(bytes, SHA-256 or None)``.  No word a pattern needs holds a quote, and the words a
        pattern needs together (``://`` and ``@``; ``=`` and a secret-sounding name) sit in a match
        that cannot hold one, so looking at each piece alone decides the same; a piece with a
        digest is looked at once per scrubber (a tool output written twice in a line, the same
        file read or image in many sessions)."""
        out: set[str] = set()
        for data, digest in pieces:
            got = self._seen.get(digest) if digest is not None else None
            if got is None:
                got = _gates(data)
                if digest is not None and len(self._seen) < _REMEMBERED:
                    self._seen[digest] = got
            out |= got
        return frozenset(out)

    def keyed_digest(self, data: bytes) -> str:
        """HMAC-SHA256 of ``data`` under the local key (hex): an identity for ``data`` that whoever
        lacks the key cannot test a guess against (a plain SHA-256 could be)."""
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def marker(self, kind: str, secret: str) -> str:
        mac = hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:12]
        return f"[evstore-secret:{kind}:{mac}]"

    def scrub(self, text: str, raw: bytes | None = None, *,
              kinds: frozenset[str] | None = None) -> tuple[str, list[Scrubbed]]:
        """``text`` with every secret replaced, and what was replaced (empty: unchanged).
        ``raw``: the bytes ``text`` was decoded from (UTF-8 or latin-1), if the caller has them;
        ``kinds``: the built-in patterns that may match, if the caller has decided (:meth:`kinds`)."""
        if "\\u" in text:  # a secret written with JSON escapes is stored escaped and printed decoded
            decoded = decode_json_escapes(text)
            if decoded != text:
                scrubbed, found = self.scrub(decoded)
                return (scrubbed, found) if found else (text, [])  # unchanged lines keep their bytes
        if kinds is None:
            data = raw if raw is not None else text.encode("utf-8", "surrogatepass")
            kinds = _gates(data)
        found = []
        for kind, rx, gated in self._compiled:
            if gated and kind not in kinds:
                continue
            def replace(m: re.Match[str], kind: str = kind) -> str:
                # A pattern with a group named "secret" replaces only that group (the rest is context).
                group = "secret" if "secret" in m.re.groupindex else 0
                if kind in _KEYWORD_KINDS and not _is_secret_value(kind, m.group(group)):
                    return m.group(0)
                mark = self.marker(kind, m.group(group))
                found.append(Scrubbed(kind, mark, m.start(group)))
                whole, start = m.group(0), m.start(group) - m.start()
                return whole[:start] + mark + whole[start + len(m.group(group)):]

            text = rx.sub(replace, text)
        return text, found


def _env_patterns() -> list[tuple[str, str]]:
    path = os.environ.get("EVSTORE_SECRET_PATTERNS")
    if not path:
        return []
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, rx = line.partition("\t")
        try:
            re.compile(rx)
        except re.error as exc:
            from eventstore.errors import EvstoreError

            raise EvstoreError(f"{path}, line {n}: not a regular expression ({exc}).") from exc
        out.append((kind.strip() or "custom", rx))
    return out
