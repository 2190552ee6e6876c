"""The ``claude`` dialect: Claude Code session transcripts (JSONL), recorded line by line.

Claude Code keeps each session as ``~/.claude/projects/<encoded cwd>/<session id>.jsonl``
(subagents under ``<session id>/subagents/agent-<id>.jsonl``) and deletes transcripts older
than ``cleanupPeriodDays``.  ``evstore ingest claude FILE|DIR`` archives them:

* one stream per transcript file, named by the session id (a subagent file's stream is
  ``<session id>/agent-<id>``, linked to its parent session in ``meta.transcript`` and to the Task
  tool use that started it by a ``claude.subagent_linked`` event: :mod:`.links`);
* one typed event per line (:mod:`eventstore.dialects.claude.events`), the line kept exactly,
  after secrets are scrubbed (:mod:`eventstore.dialects.claude.secrets`), so
  ``evstore replay SESSION --raw`` gives the file back byte for byte — lines that are not JSON
  and record types nobody knows included;
* incremental: the last event of each ingest records the byte offset reached and the SHA-256 of
  the file up to it; a grown file appends only its new lines, an unchanged one nothing, and a
  file whose recorded prefix changed is recorded as a ``claude.prefix_rewritten`` finding and
  not merged.  An unterminated last line is left for the next ingest unless it is complete JSON.

The state document a session folds to (``replay --json``) is a summary: lines, records per type,
models, tool calls and errors, first and last time.
"""

from __future__ import annotations

# The package imports nothing: `evstore --help` lists this dialect's commands (`hook`, `doctor`, from
# `commands.py`), and importing a submodule runs this file first; the dialect itself (msgspec, the
# event catalog, the scrubber) loads on first use of a name below, from `dialect.py`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from eventstore.dialects.claude.dialect import *  # noqa: F403


def __getattr__(name: str) -> object:
    import os

    if os.path.exists(os.path.join(os.path.dirname(__file__), name + ".py")):
        # a submodule not imported yet (`from eventstore.dialects.claude import events`): let the
        # import system load just that one
        raise AttributeError(name)
    from eventstore.dialects.claude import dialect

    try:
        return getattr(dialect, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
