"""CLI commands that live in the projections layer; each module registers on ``eventstore.cli.cli``."""

from __future__ import annotations

import importlib

for _name in ("runs", "analytics", "serve"):
    try:
        importlib.import_module(f"projections.cli.{_name}")
    except ModuleNotFoundError as exc:  # a layer that has not landed yet
        if exc.name != f"projections.cli.{_name}":
            raise
