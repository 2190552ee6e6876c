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
from dataclasses import dataclass
from pathlib import Path

# Inside a JSON string a newline is the two characters "\n": patterns that span lines match that.
_NL = r"(?:\\n|\n)"

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
    # .env assignments: NAME=value where NAME says secret, at a line start (real or escaped newline).
    ("env-assignment",
     r"(?:(?<=^)|(?<=\n)|(?<=\\n))(?:export )?[A-Z][A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|"
     r"PRIVATE_KEY|CREDENTIALS?)[A-Z0-9_]*=(?!\[evstore-secret)[^\s\"\\]+"),
]


@dataclass(frozen=True)
class Scrubbed:
    """A secret replaced in a line: its kind, the marker that replaced it, where it started."""

    kind: str
    marker: str
    offset: int


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


class Scrubber:
    """Replaces secrets in text; one instance per ingest (the key is read once)."""

    def __init__(self, extra: list[tuple[str, str]] | None = None, key: bytes | None = None) -> None:
        patterns = list(PATTERNS) + list(extra or []) + _env_patterns()
        self._compiled = [(kind, re.compile(rx, re.S)) for kind, rx in patterns]
        self._key = key if key is not None else _key()
        self._quick = re.compile("|".join(f"(?:{rx})" for _, rx in patterns), re.S)

    def marker(self, kind: str, secret: str) -> str:
        mac = hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:12]
        return f"[evstore-secret:{kind}:{mac}]"

    def scrub(self, text: str) -> tuple[str, list[Scrubbed]]:
        """``text`` with every secret replaced, and what was replaced (empty: unchanged)."""
        if not self._quick.search(text):
            return text, []
        found: list[Scrubbed] = []
        for kind, rx in self._compiled:
            def replace(m: re.Match[str], kind: str = kind) -> str:
                # A pattern with a group named "secret" replaces only that group (the rest is context).
                group = "secret" if "secret" in m.re.groupindex else 0
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
