"""The ``generic`` dialect: any JSON document, document events only."""

from __future__ import annotations

from typing import Any

from eventstore.dialects.base import Dialect, RunInfo


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
