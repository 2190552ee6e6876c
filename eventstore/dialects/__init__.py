"""Dialect registry: ``get_dialect(name)``, ``available()``.

Dialects are plugins: every distribution may register one in the entry-point group
``evstore.dialects`` (``name = "module:Class"``, the class a :class:`Dialect` subclass whose
``name`` is the entry point's).  The built-in ones register the same way, in evstore's own
``pyproject.toml``; a separate package adds a dialect with one line in its own::

    [project.entry-points."evstore.dialects"]
    mytool = "mytool_evstore:MyToolDialect"

Entry points are read from the installed distributions' metadata (``*.dist-info``), so an
editable install must be reinstalled (``pip install -e .``) after a line is added.  Modules are
imported lazily, one dialect at a time: a plugin that fails to import is reported by name (its
entry point, its distribution and the error) when it is asked for, and never breaks the others.
"""

from __future__ import annotations

import sys

from eventstore.errors import EvstoreError
from eventstore.plugins import Registration, entry_points

# The lens types are re-exported lazily (PEP 562): a dialect's submodule (its click commands, which
# `evstore --help` lists) imports this package first, and `base` costs msgspec and the event model.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from eventstore.dialects.base import Dialect, DocumentObserved, DocumentPatched, Finding, RunInfo, Snapshot

_BASE_NAMES = ("Dialect", "DocumentObserved", "DocumentPatched", "Finding", "RunInfo", "Snapshot")


def __getattr__(name: str) -> object:
    if name in _BASE_NAMES:
        from eventstore.dialects import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: The entry-point group dialects register in.
GROUP = "evstore.dialects"
#: The dialect of a stream that names none (events appended with ``evstore append``): document
#: events only, any JSON.  The one dialect the host itself relies on.
FALLBACK = "generic"


_registrations: tuple[tuple[str, ...], dict[str, Registration], dict[str, list[Registration]]] | None = None
_instances: dict[str, Dialect] = {}
_broken: dict[str, str] = {}


def _entry_points() -> list[Registration]:
    """The ``evstore.dialects`` entry points of the distributions on ``sys.path``
    (:func:`eventstore.plugins.entry_points`)."""
    return entry_points(GROUP)


def _scan() -> tuple[dict[str, Registration], dict[str, list[Registration]]]:
    """The registrations on the current ``sys.path`` (rescanned when it changes) and the names
    two distributions register differently (a conflict: neither is used)."""
    global _registrations
    key = tuple(sys.path)
    if _registrations is None or _registrations[0] != key:
        found: dict[str, list[Registration]] = {}
        for reg in _entry_points():
            regs = found.setdefault(reg.name, [])
            if all(r.value != reg.value for r in regs):
                regs.append(reg)
        one = {name: regs[0] for name, regs in found.items() if len(regs) == 1}
        conflicts = {name: regs for name, regs in found.items() if len(regs) > 1}
        _registrations = (key, one, conflicts)
    return _registrations[1], _registrations[2]


def registered() -> list[str]:
    """Every registered dialect name (imported or not), in name order."""
    one, conflicts = _scan()
    return sorted([*one, *conflicts])


def available() -> list[str]:
    """The registered dialects that load (a broken plugin is left out; see :func:`broken`)."""
    out = []
    for name in registered():
        try:
            get_dialect(name)
        except EvstoreError:
            continue
        out.append(name)
    return out


def broken() -> dict[str, str]:
    """Registered dialects that failed to load, with why (after :func:`available` or a lookup)."""
    return dict(_broken)


def get_dialect(name: str) -> Dialect:
    if name in _instances:
        return _instances[name]
    one, conflicts = _scan()
    if name in conflicts:
        where = "; ".join(r.where() for r in conflicts[name])
        raise EvstoreError(f'Dialect "{name}" is registered more than once, differently: {where}. '
                           "Uninstall one of the distributions.")
    reg = one.get(name)
    if reg is None:
        names = sorted(one)
        if not names:
            raise EvstoreError(f'Unknown dialect "{name}": no dialect is registered (entry-point group {GROUP}); '
                               "is evstore installed? (pip install -e . in a checkout)")
        raise EvstoreError(f'Unknown dialect "{name}"; choose one of: {", ".join(names)}.')
    from eventstore.dialects.base import Dialect

    try:
        cls = reg.load()
    except Exception as exc:  # a broken plugin: reported by name, never fatal to the others
        why = f"{type(exc).__name__}: {exc}"
        _broken[name] = why
        raise EvstoreError(f'Dialect "{name}" could not be loaded from its {reg.where()}: {why}') from exc
    if not (isinstance(cls, type) and issubclass(cls, Dialect)):
        why = f"{reg.value} is not a Dialect subclass"
        _broken[name] = why
        raise EvstoreError(f'Dialect "{name}" could not be loaded from its {reg.where()}: {why}.')
    if cls.name != name:
        why = f'{reg.value} calls itself "{cls.name}"'
        _broken[name] = why
        raise EvstoreError(f'Dialect "{name}" could not be loaded from its {reg.where()}: {why}; the entry '
                           "point's name and the class's name must be the same.")
    inst: Dialect = cls()
    _instances[name] = inst
    _broken.pop(name, None)
    return inst


def _import_all() -> None:
    """Load every registered dialect (their event catalogs register with :mod:`eventstore.events`)."""
    available()


__all__ = ["FALLBACK", "GROUP", "Dialect", "DocumentObserved", "DocumentPatched", "Finding", "Registration", "RunInfo",
           "Snapshot", "available", "broken", "get_dialect", "registered"]
