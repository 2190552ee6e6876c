"""The ``generic`` dialect: any JSON document, document events only.

Its analytics give the ``runs`` view each run's task id and status (the document's ``status``, as
the runs index shows it) and a section of runs per status; what every dialect's histories look
like (versions, write intervals, unreadable versions, the keys that change most) is the shared
``histories`` and ``changing_keys`` sections (``projections.analytics.facts``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from eventstore.dialects.base import Dialect, RunInfo

if TYPE_CHECKING:
    from datetime import datetime

    from eventstore.dialects.analytics import Analytics, Rows
    from eventstore.store import RecordedEvent


class GenericDialect(Dialect):
    name = "generic"
    description = "any JSON state document (document events only)"
    requires_object = False
    streams_by_source = True  # without an id in the document: the file's name (or the repository path)

    def stream_id(self, doc: Any) -> str | None:
        if isinstance(doc, dict):
            for key in ("taskId", "task_id", "id", "runId", "run_id"):
                v = doc.get(key)
                if isinstance(v, str) and v:
                    return v
        return None

    def describe(self, doc: Any) -> RunInfo:
        if not isinstance(doc, dict):
            return RunInfo()
        status = doc.get("status")
        return RunInfo(task_id=self.stream_id(doc), status=status if isinstance(status, str) else None)

    def analytics(self) -> Analytics:
        return _analytics()


def _observed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    from eventstore.dialects.analytics import attr

    doc = p.get("doc")
    if isinstance(doc, dict):
        attr(rows, e, "task_id", GenericDialect().stream_id(doc))
        attr(rows, e, "status", doc.get("status"))


def _patched(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    from eventstore.dialects.analytics import attr

    ops = p.get("ops")
    for op in ops if isinstance(ops, list) else ():
        if isinstance(op, dict) and op.get("path") == "/status" and op.get("op") in ("add", "replace"):
            attr(rows, e, "status", op.get("value"))
        elif isinstance(op, dict) and op.get("path") == "" and isinstance(op.get("value"), dict):
            _observed(rows, e, {"doc": op["value"]}, at)


@functools.cache
def _analytics() -> Analytics:
    from eventstore.dialects.analytics import Analytics, MetricSection

    return Analytics(
        version=1,
        rows={"document.observed": _observed, "document.patched": _patched},
        sections=(MetricSection(
            "generic_status", "Generic runs by status (the document's status)", ("status", "runs", "last_event_at"),
            """SELECT coalesce(status, '(none)') AS status, count(*) AS runs, max(last_event_at) AS last_event_at
               FROM runs WHERE dialect = 'generic' AND stream_id IN (SELECT stream_id FROM sel)
               GROUP BY ALL ORDER BY runs DESC, status"""),),
    )
