"""The analytics Parquet tables as a projection of the runner (``evstore projections
status|rebuild|run`` list, rebuild and catch them up like the database projections).

Its rows and checkpoint live in the store's analytics folder (:mod:`.files`: the manifest is the
checkpoint, bound to the store's identity and to the hash of the event at the checkpoint), so it is
an :class:`~projections.engine.ExternalProjection`: the runner calls :func:`.files.refresh`
instead of applying batches in database transactions.

    >>> ProjectionRunner(store).catch_up(ANALYTICS)    # same as analytics.refresh(store)
"""

from __future__ import annotations

from typing import ClassVar

from eventstore.store import EventStore
from projections import engine
from projections.analytics.facts import FLATTEN_VERSION
from projections.analytics.files import NAME, refresh, status


class AnalyticsProjection(engine.ExternalProjection):
    """The Parquet fact tables in the store's analytics folder (the default folder: see
    :func:`.files.analytics_dir`; ``--analytics-dir`` commands name their own)."""

    name = NAME
    version = FLATTEN_VERSION  # the shared part; status() reports the catalog's full version
    storage: ClassVar[str] = "parquet"
    caught_up_by: ClassVar[str | None] = "evstore metrics, query, export, serve (each refreshes first)"

    def catch_up(self, store: EventStore, *, progress: engine.Progress | None = None) -> int:
        return refresh(store, progress=progress).events

    def rebuild(self, store: EventStore, *, progress: engine.Progress | None = None) -> int:
        return refresh(store, rebuild=True, progress=progress).events

    def status(self, store: EventStore) -> engine.ProjectionStatus:
        s = status(store)
        return engine.ProjectionStatus(
            name=self.name, version=s["version"], stored_version=s["stored_version"], position=s["checkpoint"],
            lag=s["lag"], inline=False, updated_at=s["updated_at"], storage=self.storage,
            details={"directory": s["directory"], "files": s["files"], "updated_at": s["updated_at"],
                     "stale": s["stale"]})


ANALYTICS = engine.register(AnalyticsProjection())

__all__ = ["ANALYTICS", "AnalyticsProjection"]
