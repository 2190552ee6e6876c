"""Dialect registry: ``get_dialect(name)``.  Each dialect module registers itself here."""

from __future__ import annotations

import importlib

from eventstore.dialects.base import Dialect, DocumentObserved, DocumentPatched, Finding, RunInfo, Snapshot
from eventstore.errors import EvstoreError

# name -> "module:Class"; modules are imported lazily so a broken dialect cannot break the rest.
_DIALECTS: dict[str, str] = {
    "generic": "eventstore.dialects.generic:GenericDialect",
    "mapipe": "eventstore.dialects.mapipe:MapipeDialect",
    "friday": "eventstore.dialects.friday:FridayDialect",
    "taskflow": "eventstore.dialects.taskflow:TaskflowDialect",
    "envelope": "eventstore.dialects.envelope:EnvelopeDialect",
    "claude": "eventstore.dialects.claude:ClaudeDialect",
}
_instances: dict[str, Dialect] = {}


def available() -> list[str]:
    out = []
    for name, target in _DIALECTS.items():
        mod = target.split(":")[0]
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError:
            continue
        out.append(name)
    return out


def get_dialect(name: str) -> Dialect:
    if name in _instances:
        return _instances[name]
    target = _DIALECTS.get(name)
    if target is None:
        raise EvstoreError(f'Unknown dialect "{name}"; choose one of: {", ".join(available())}.')
    mod, cls = target.split(":")
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        raise EvstoreError(f'Dialect "{name}" is not available in this build ({exc}).') from exc
    inst: Dialect = getattr(module, cls)()
    _instances[name] = inst
    return inst


def _import_all() -> None:
    for name in _DIALECTS:
        try:
            get_dialect(name)
        except EvstoreError:
            pass


__all__ = ["Dialect", "DocumentObserved", "DocumentPatched", "Finding", "RunInfo", "Snapshot",
           "available", "get_dialect"]
