"""Who may reach ``evstore serve`` and what they may do: the Host check and the tokens.

    >>> policy = Policy.of(host="0.0.0.0", token="…", read_token=None, allowed_hosts=())
    >>> policy.host_problem("attacker.example:8765")  # a name the server does not answer to: why
    >>> policy.authorize(request.headers, "read")  # the Grant, or HTTPError 401/403

Two defences, each in one place:

- :meth:`Policy.host_problem`: the ``Host`` header must be the bound address, an address literal,
  ``localhost`` on a loopback server, or a name given with ``--allowed-host``.  A page on
  ``attacker.example`` whose DNS answer flips to 127.0.0.1 (DNS rebinding) sends
  ``Host: attacker.example`` and is refused (421) before anything is read.  An address literal
  cannot be rebound: a browser page whose origin is the address is this server itself.
- :meth:`Policy.authorize`: writes need a token with the ``write`` scope; reads need a token with
  the ``read`` scope whenever the server listens beyond loopback or a read token is configured.
  Writes take the token only as ``Authorization: Bearer`` (or the integrity page's form field):
  never as credentials a browser attaches by itself, so a cross-site form cannot write.  Reads also
  take it as the password of HTTP Basic authentication, so a browser can open the pages.

Tokens come from two places: the server's own (``EVSTORE_SERVE_TOKEN``: read and write, named
``EVSTORE_SERVE_TOKEN``; the read token) and the store's named tokens (``evstore tokens add``,
:mod:`eventstore.tokens`), looked up per request by the SHA-256 of what was sent (one indexed
read), so a revoked or expired token is refused from the next request on, on every worker.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from eventstore.errors import EvstoreError

Scope = Literal["read", "write"]
MIN_TOKEN_BITS = 128
# The smallest alphabet holding every character of a token decides its bits per character.
_ALPHABETS = [(frozenset(string.digits), 10), (frozenset(string.hexdigits), 16),
              (frozenset(string.ascii_lowercase + string.digits), 36),
              (frozenset(string.ascii_letters + string.digits), 62),
              (frozenset(string.ascii_letters + string.digits + "-_+/="), 64),
              (frozenset(string.printable) - frozenset("\t\n\r\x0b\x0c"), 95)]
WILDCARDS = ("0.0.0.0", "::", "")


class HTTPError(Exception):
    """A request answered with an error: ``status``, a message, headers to send."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def token_bits(token: str) -> float:
    """At most how many bits of secret ``token`` can hold: its length times the bits of one
    character of the smallest usual alphabet it is written in (hex: 4, base64: 6, printable: 6.6;
    anything beyond ASCII: 8 per UTF-8 byte).  An upper bound: ``"a" * 40`` passes as 206 bits."""
    chars = frozenset(token)
    for alphabet, size in _ALPHABETS:
        if chars <= alphabet:
            return len(token) * math.log2(size)
    return len(token.encode("utf-8")) * 8.0


def check_token_strength(token: str, what: str = "token") -> None:
    """Raise :class:`EvstoreError` for a token that cannot hold 128 bits (guessable over the network)."""
    bits = token_bits(token)
    if bits < MIN_TOKEN_BITS:
        raise EvstoreError(f"The {what} is too short to be secret ({len(token)} characters, at most {bits:.0f} "
                           f"bits; at least {MIN_TOKEN_BITS} are needed); make one with "
                           "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`.")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower case, without a final dot."""
    header = header.strip()
    if header.startswith("["):  # [::1]:8765
        end = header.find("]")
        name = header[1:end] if end > 0 else header
    elif header.count(":") == 1:
        name = header.split(":", 1)[0]
    else:
        name = header  # a name, or a bare IPv6 address (no port is possible then)
    return name.lower().rstrip(".")


@dataclass(frozen=True)
class Grant:
    """One token and what it may do."""

    name: str
    secret: str
    scopes: frozenset[str]


class TokenSource(Protocol):
    """The store's named tokens, as the policy asks about them (see projections/serve/app.py)."""

    def find(self, secret: str) -> Grant | str | None:
        """The grant of ``secret``, why it is refused (revoked, expired), or ``None`` (unknown)."""

    def can_write(self) -> bool:
        """Whether any token in force may write (else writes are refused as disabled)."""


SERVE_TOKEN = "EVSTORE_SERVE_TOKEN"  # the name the server's own token has in meta.sent_by


@dataclass(frozen=True)
class Policy:
    host: str  # the address served on
    allowed_hosts: frozenset[str]  # more names (Host headers) the server answers to
    grants: tuple[Grant, ...]
    reads_need_token: bool
    tokens: TokenSource | None = None  # the store's named tokens

    @classmethod
    def of(cls, *, host: str, token: str | None, read_token: str | None,
           allowed_hosts: tuple[str, ...] | list[str], tokens: TokenSource | None = None) -> Policy:
        """The policy of a server on ``host``; raises :class:`EvstoreError` for a weak token."""
        grants = []
        if token is not None:
            check_token_strength(token)
            grants.append(Grant(SERVE_TOKEN, token, frozenset({"read", "write", "admin"})))
        if read_token is not None:
            check_token_strength(read_token, "read token")
            grants.append(Grant("read token", read_token, frozenset({"read"})))
        return cls(host=host_name(host) if host not in WILDCARDS else host,
                   allowed_hosts=frozenset(host_name(h) for h in allowed_hosts),
                   grants=tuple(grants), reads_need_token=not is_loopback(host) or read_token is not None,
                   tokens=tokens)

    @property
    def writable(self) -> bool:
        """Whether some token may write now (the server's own, or a named one in force)."""
        return any("write" in g.scopes for g in self.grants) or (self.tokens is not None and self.tokens.can_write())

    # -- the Host header -------------------------------------------------------

    def host_problem(self, header: str | None) -> str | None:
        """Why a request with this ``Host`` header is refused, or ``None`` when it is served."""
        if not header:
            return "the request has no Host header; send the address of this server as its Host."
        name = host_name(header)
        if name in self.allowed_hosts:
            return None
        wildcard = self.host in WILDCARDS
        try:
            addr = ipaddress.ip_address(name)
        except ValueError:
            addr = None
        if addr is not None:  # a literal cannot be rebound to this server by DNS
            if wildcard or (is_loopback(self.host) and addr.is_loopback) or name == self.host.strip("[]"):
                return None
        elif name == self.host or (name == "localhost" and (wildcard or is_loopback(self.host))):
            return None
        shown = name[:80].encode("ascii", "backslashreplace").decode()
        return (f'Host "{shown}" is not a name of this server (a guard against DNS rebinding); if clients reach '
                f"it by that name, start `evstore serve` with --allowed-host {shown}.")

    # -- tokens ----------------------------------------------------------------

    def authorize(self, headers: Mapping[str, str], scope: Scope, form_token: str | None = None) -> Grant | None:
        """The grant a request may act with for ``scope`` (``None``: an open read), else
        :class:`HTTPError` (401 without a token, 403 with a wrong or too weak one)."""
        if scope == "read" and not self.reads_need_token:
            return None
        given = self._given(headers, basic=scope == "read") or form_token
        # Whether anyone may write is asked only when this request cannot (a count of the store's
        # tokens): a write with a valid token pays one indexed read, no more.
        if not given:
            self._writes_disabled(scope)
            challenge = 'Bearer realm="evstore"' if scope == "write" else 'Basic realm="evstore", charset="UTF-8"'
            raise HTTPError(401, f"this needs a token with {scope} access: send \"Authorization: Bearer TOKEN\""
                                    + ("" if scope == "write" else " (a browser: the token as the password)")
                                    + ".", {"www-authenticate": challenge})
        grant = self._match(given)
        if grant is None and self.tokens is not None:
            found = self.tokens.find(given)
            if isinstance(found, str):
                self._writes_disabled(scope)
                raise HTTPError(403, f"{found}; ask an admin for a new one (`evstore tokens add`).")
            grant = found
        if grant is None:
            self._writes_disabled(scope)
            raise HTTPError(403, "the token is not valid for this server.")
        if scope not in grant.scopes:
            raise HTTPError(403, f"the {grant.name} may not {scope}; use a token with {scope} access.")
        return grant

    def _writes_disabled(self, scope: Scope) -> None:
        if scope == "write" and not self.writable:
            raise HTTPError(403, "writes are disabled on this server; start `evstore serve` with "
                                    "EVSTORE_SERVE_TOKEN or --token-file, or add a token with `evstore tokens add "
                                    "NAME --scope append`, to allow them.")

    @staticmethod
    def _given(headers: Mapping[str, str], *, basic: bool) -> str | None:
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            return value.strip(" \t") or None  # HTTP's own blanks only: any other byte is part of the token
        if basic and scheme.lower() == "basic":  # any user name; the token is the password
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return decoded.partition(":")[2] or None
        return None

    def _match(self, given: str) -> Grant | None:
        found = None
        raw = given.encode("utf-8", "surrogatepass")  # any str, even one with a lone surrogate, is bytes
        for grant in self.grants:  # every grant compared, in constant time each
            if hmac.compare_digest(raw, grant.secret.encode("utf-8")) and found is None:
                found = grant
        return found

    def describe(self) -> str:
        """Who can read and who can write, for the start-up line."""
        if not self.reads_need_token:
            reads = f"anyone on this machine ({self.host} is loopback)"
        elif any(g.name == "read token" for g in self.grants):
            reads = "holders of the token or the read token"
        else:
            reads = "holders of the token"
        writes = "holders of the token" if any("write" in g.scopes for g in self.grants) else ""
        if self.tokens is not None and self.tokens.can_write():
            writes = (writes + " or " if writes else "holders of ") + "a named token with append or admin scope"
        writes = writes or "nobody (read-only: no token)"
        return f"reads: {reads}; writes: {writes}"


__all__ = ["HTTPError", "Grant", "SERVE_TOKEN", "TokenSource", "MIN_TOKEN_BITS", "Policy", "check_token_strength", "host_name",
           "is_loopback", "token_bits"]
