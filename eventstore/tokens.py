"""Named API tokens for a team's ``evstore serve``: who may read, append or administer.

    >>> secret = add_token(store, "alice-laptop", "append", expires="2027-06-30")  # printed once, never stored
    >>> find_token(store, secret).name  # what the server does per request (one indexed read)
    'alice-laptop'
    >>> revoke_token(store, "alice-laptop")  # refused from the next request on, on every worker

The store keeps each token's name, scope, SHA-256, when it was made, when it expires, when it was
revoked and when it was last used (``api_tokens``, migration 0008): never the secret.  A secret
is 256 bits from :mod:`secrets` (``token_urlsafe(32)``), so a plain SHA-256 makes the stored digest
useless for finding it (a slow password hash protects guessable secrets, which these are not).

Adding and revoking are recorded as events in the admin stream :data:`ADMIN_STREAM` (type
``token.added`` / ``token.revoked``: name, scope, expiry, who ran the command on which machine),
so the hash chain commits to who was allowed to write when.  A name is never reused (a revoked
one stays revoked): the token name an event's ``meta.sent_by`` records means one token.
"""

from __future__ import annotations

import getpass
import hashlib
import re
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from eventstore.errors import EvstoreError
from eventstore.store import EventStore, NewEvent, utcnow

ADMIN_STREAM = "evstore-admin"
SCOPES = ("read", "append", "admin")
#: what each scope may do on ``evstore serve`` (projections/serve/access.py checks "read" and "write")
ACCESS = {"read": frozenset({"read"}), "append": frozenset({"write"}),
          "admin": frozenset({"read", "write", "admin"})}
TOKEN_BYTES = 32  # 256 bits
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")
LAST_USED_EVERY = timedelta(seconds=60)  # last_used_at is written at most this often per token


@dataclass(frozen=True)
class Token:
    """A token as stored (never its secret)."""

    name: str
    scope: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None

    def problem(self, now: str | None = None) -> str | None:
        """Why this token is refused now (revoked, expired), or ``None``."""
        if self.revoked_at is not None:
            return f'the token "{self.name}" was revoked at {self.revoked_at[:19]}Z'
        if self.expires_at is not None and self.expires_at <= (now or utcnow()):
            return f'the token "{self.name}" expired at {self.expires_at[:19]}Z'
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scope": self.scope, "created_at": self.created_at,
                "last_used_at": self.last_used_at, "expires_at": self.expires_at, "revoked_at": self.revoked_at}


def sent_by_line(sender: dict[str, Any]) -> str:
    """``meta.sent_by`` as one line: ``sent by token alice-laptop from machine alice-mbp``."""
    token, machine = sender.get("token"), sender.get("machine")
    return f"sent by token {token if isinstance(token, str) else '?'}" + (
        f" from machine {machine}" if isinstance(machine, str) else " (no machine named)")


def digest(secret: str) -> bytes:
    # surrogatepass: any str is bytes, even one holding a lone surrogate (it then matches no token: a
    # stored secret is ASCII); surrogateescape raised on a high one (U+D800-U+DBFF)
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise EvstoreError(f'Token name "{name[:120]}" is not valid; use letters, digits and . _ @ - (at most 100, '
                           "starting with a letter or digit), e.g. alice-laptop.")
    return name


def parse_expiry(value: str) -> str:
    """``--expires``: a date (``2027-06-30``: the end of that day, UTC) or an ISO time; stored as evstore
    stores times.  A time in the past is an error."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            when = datetime.fromisoformat(value).replace(tzinfo=UTC) + timedelta(days=1)
        else:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
    except ValueError:
        raise EvstoreError(f'--expires "{value}" is not a date; give YYYY-MM-DD or an ISO time such as '
                           "2027-06-30T18:00:00Z.") from None
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if stamp <= utcnow():
        raise EvstoreError(f'--expires "{value}" is in the past; give a later date.')
    return stamp


def _who() -> dict[str, str]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return {"user": user, "machine": socket.gethostname()}


def _row(row: tuple[Any, ...]) -> Token:
    return Token(*row)


def list_tokens(store: EventStore) -> list[Token]:
    with store.reading() as cur:
        return [_row(r) for r in store.backend.token_rows(cur)]


def get_token(store: EventStore, name: str) -> Token | None:
    with store.reading() as cur:
        rows = store.backend.token_rows(cur, name)
    return _row(rows[0]) if rows else None


def add_token(store: EventStore, name: str, scope: str, *, expires: str | None = None) -> str:
    """Make a token named ``name`` with ``scope``; returns its secret (shown once, never stored).
    ``expires``: as :func:`parse_expiry` returns it."""
    check_name(name)
    if scope not in SCOPES:
        raise EvstoreError(f'Scope "{scope}" is not one of {", ".join(SCOPES)}.')
    existing = get_token(store, name)
    if existing is not None:
        state = "revoked; names are never reused" if existing.revoked_at else "in use"
        raise EvstoreError(f'A token named "{name}" exists ({state}); choose another name (e.g. {name}-2).')
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    with store.writing("adding an API token") as cur:
        store.backend.insert_token(cur, name, scope, digest(secret), utcnow(), expires)
    try:
        store.append(ADMIN_STREAM, [NewEvent("token.added", {"name": name, "scope": scope, "expires_at": expires},
                                             meta={"by": _who()})])
    except BaseException:
        with store.writing("taking back an API token") as cur:  # no token the admin stream does not record
            store.backend.delete_token(cur, name)
        raise
    return secret


def revoke_token(store: EventStore, name: str) -> Token:
    """Revoke the token named ``name`` (an error if there is none or it is revoked already)."""
    found = get_token(store, name)
    if found is None:
        raise EvstoreError(f'No token is named "{name}"; `evstore tokens list` shows them.')
    if found.revoked_at is not None:
        raise EvstoreError(f'The token "{name}" was revoked already (at {found.revoked_at[:19]}Z).')
    with store.writing("revoking an API token") as cur:
        store.backend.revoke_token(cur, name, utcnow())
    store.append(ADMIN_STREAM, [NewEvent("token.revoked", {"name": name, "scope": found.scope},
                                         meta={"by": _who()})])
    revoked = get_token(store, name)
    assert revoked is not None
    return revoked


def find_token(store: EventStore, secret: str) -> Token | None:
    """The stored token whose secret is ``secret`` (revoked and expired ones too: see
    :meth:`Token.problem`), noting its use at most once a minute."""
    with store.reading() as cur:
        row = store.backend.token_by_digest(cur, digest(secret))
    if row is None:
        return None
    token = _row(row)
    now = utcnow()
    if token.problem(now) is None and (token.last_used_at is None or token.last_used_at <= _minus(now)):
        with store.writing("noting an API token's use") as cur:
            store.backend.touch_token(cur, token.name, now)
    return token


def tokens_in_transaction(store: EventStore, cur: Any, digests: list[bytes]) -> dict[bytes, Token]:
    """Inside a write transaction (``cur``): the stored tokens of these secrets' digests as they are
    now (a revocation committed a moment ago included), noting each one's use at most once a minute,
    as :func:`find_token` does.  A digest no token has is missing from the answer."""
    rows = store.backend.tokens_by_digests(cur, list(dict.fromkeys(digests)))
    now, out = utcnow(), {}
    for key, row in rows.items():
        token = out[key] = _row(row)
        if token.problem(now) is None and (token.last_used_at is None or token.last_used_at <= _minus(now)):
            store.backend.touch_token(cur, token.name, now)
    return out


def write_tokens_in_force(store: EventStore) -> int:
    """How many tokens that may write (append, admin) are neither revoked nor expired."""
    with store.reading() as cur:
        return store.backend.write_tokens_in_force(cur, utcnow())


def _minus(now: str) -> str:
    when = datetime.strptime(now, "%Y-%m-%dT%H:%M:%S.%fZ") - LAST_USED_EVERY
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


__all__ = ["ACCESS", "ADMIN_STREAM", "SCOPES", "Token", "add_token", "find_token", "get_token", "list_tokens",
           "parse_expiry", "revoke_token", "sent_by_line", "tokens_in_transaction", "write_tokens_in_force"]
