"""Model prices: a dated table of US dollars per million tokens, per model (``prices.toml`` beside
this module), which a user file overrides or extends (``evstore usage --prices FILE``, or
``$EVSTORE_PRICES``).

Each row gives a model's input, output, cache-write (5-minute), cache-read and, from the date the
1-hour cache took effect, 1-hour cache-write (``cache_write_1h``) price and the date it took effect;
a message is priced at the newest row of its model effective on or before the message's time
(:data:`USAGE_SQL` in :mod:`projections.usage` does that as a DuckDB ASOF join).  Model names are
compared after :func:`price_key`: ``claude-sonnet-4-5-20250929`` and ``claude-sonnet-4-5`` share a
price.  A model no row names has no price: the usage report says so, never a zero.

    >>> table = load_prices()
    >>> table.price("claude-sonnet-4-5-20250929", "2025-10-01").output
    15.0
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from eventstore.errors import EvstoreError

PRICES_ENV = "EVSTORE_PRICES"

# The same normalisation in SQL (projections.usage) and here; tests hold them together.
_PREFIX = re.compile(r"^([a-z0-9-]+\.)*anthropic\.")
_SUFFIX = re.compile(r"(-\d{8})?(-v\d+(:\d+)?)?(@\d{8})?$")
PRICE_KEY_SQL = (r"regexp_replace(regexp_replace(lower({col}), '^([a-z0-9-]+\.)*anthropic\.', ''), "
                 r"'(-\d{{8}})?(-v\d+(:\d+)?)?(@\d{{8}})?$', '')")


def price_key(model: str) -> str:
    """The name a model is priced under: lower case, without a provider prefix or a date/version
    suffix (``us.anthropic.claude-3-5-sonnet-20241022-v2:0`` -> ``claude-3-5-sonnet``)."""
    return _SUFFIX.sub("", _PREFIX.sub("", model.lower()), count=1)


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row: dollars per million tokens of ``model`` from ``effective`` (an ISO date) on."""

    model: str
    effective: date
    input: float
    output: float
    cache_write: float
    cache_read: float
    #: the 1-hour cache write; None: the row has none (a message with 1-hour writes it prices has no price)
    cache_write_1h: float | None = None


class _Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str = "user"
    as_of: date | None = None


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    price: list[Price]
    table: _Header = _Header()


@dataclass(frozen=True)
class PriceTable:
    """The prices in force: the package's table with the user file's rows for the models it names.

    ``source``: "package" or the package table's name and the user file's path; ``as_of``: the newest
    ``as_of`` of the tables used (the date they were last checked against the price list)."""

    rows: tuple[Price, ...]
    name: str
    as_of: date | None
    source: str
    override: str | None = None

    def price(self, model: str, at: str | date | None = None) -> Price | None:
        """The row pricing ``model`` at ``at`` (an ISO date or time; None: the newest row)."""
        key = price_key(model)
        day = date.fromisoformat(at[:10]) if isinstance(at, str) else at
        found = [r for r in self.rows if price_key(r.model) == key and (day is None or r.effective <= day)]
        return max(found, key=lambda r: r.effective) if found else None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.name, "as_of": self.as_of.isoformat() if self.as_of else None,
                "source": self.source, "override": self.override, "models": len({r.model for r in self.rows})}

    def sql_rows(self) -> list[tuple[str, date, float, float, float, float, float | None]]:
        return [(price_key(r.model), r.effective, r.input, r.output, r.cache_write, r.cache_read, r.cache_write_1h)
                for r in self.rows]


def _read(text: str, where: str) -> _File:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EvstoreError(f"Price table {where} is not valid TOML ({exc}) — fix the file; see docs/metrics.md "
                           "for its shape.") from exc
    try:
        return msgspec.convert(raw, _File, strict=False)
    except msgspec.ValidationError as exc:
        raise EvstoreError(f"Price table {where}: {exc} — each [[price]] needs model, effective (a date), "
                           "input, output, cache_write and cache_read (dollars per million tokens; cache_write_1h optional).") from exc


def package_prices() -> PriceTable:
    """The table shipped with evstore (``projections/prices.toml``)."""
    text = resources.files("projections").joinpath("prices.toml").read_text("utf-8")
    f = _read(text, "projections/prices.toml")
    return PriceTable(rows=tuple(f.price), name=f.table.name, as_of=f.table.as_of, source="package")


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """The package's prices, overridden by ``path`` (default: ``$EVSTORE_PRICES`` if set): a model the
    user file names takes its rows from there only."""
    base = package_prices()
    chosen = path if path is not None else os.environ.get(PRICES_ENV) or None
    if chosen is None:
        return base
    p = Path(chosen).expanduser()
    try:
        text = p.read_text("utf-8")
    except OSError as exc:
        raise EvstoreError(f"Cannot read the price table {p}: {exc.strerror or exc} — give an existing TOML file "
                           f"(--prices or ${PRICES_ENV}).") from exc
    except UnicodeDecodeError as exc:
        raise EvstoreError(f"Price table {p} is not UTF-8 text — save it as UTF-8 TOML.") from exc
    user = _read(text, str(p))
    named = {price_key(r.model) for r in user.price}
    rows = tuple(r for r in base.rows if price_key(r.model) not in named) + tuple(user.price)
    dates = [d for d in (base.as_of, user.table.as_of) if d is not None]
    return PriceTable(rows=rows, name=f"{base.name}+{user.table.name}", as_of=max(dates) if dates else None,
                      source=f"package+{p}", override=str(p))


__all__ = ["PRICES_ENV", "PRICE_KEY_SQL", "Price", "PriceTable", "load_prices", "package_prices", "price_key"]
