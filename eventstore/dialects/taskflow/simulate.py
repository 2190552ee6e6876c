"""Simulated agent-framework tasks: the ``tasks/`` folder as an orchestrator leaves it.

:func:`simulate_trees` yields ``(time, tree)`` for every change of one task's folder and of the
follow-up folders it spawns; :func:`simulate` turns those into snapshots of the task's
lifecycle, and :func:`write_simulated_task` writes one step to a real directory so folder
ingest (``TaskflowDialect.load``) can be tested against the simulator.

What a run does (probabilities are per run):

* manual (65 %) or autopilot (35 %; the ``.autopilot`` marker in the task folder or in
  ``tasks/``);
* SPEC.md, sometimes written empty first (20 % per artifact) and sometimes revised (15 %);
* DESIGN.md (50 %) and then TEST_PLAN.md (50 %);
* IMPLEMENTATION.md, BUG_REPORT.md, ADVERSARIAL_BUG_REPORT.md, DOC_REVIEW.md, with one
  mandatory phase skipped in 8 % of runs;
* VERDICT.md in one of the four formats the parser knows: PASS 45 %, FAIL 30 %, NEEDS_REVIEW
  15 %, unparseable 10 % (then rewritten with a real verdict 60 % of the time); a tie-break
  item in 25 %;
* a failing verdict (or tie-breaks): manual mode spawns ``{task}-{fix|review|tiebreak}-{issue}``
  folders with an empty IMPLEMENTATION.md and copies of SPEC.md, BUG_REPORT.md and
  ADVERSARIAL_BUG_REPORT.md; autopilot pauses, and in half of those runs the user then switches
  to manual (the marker is removed) and the follow-ups are spawned.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from eventstore.dialects.base import Snapshot
from eventstore.dialects.taskflow.lifecycle import COPIED_FILES, Tree, expected_follow_ups, lifecycle, write_tree

TOPICS = [
    ("Add user authentication", "users sign in with email and password; sessions expire after 24 h"),
    ("Rate-limit the public API", "each API key gets 100 requests per minute with a burst of 20"),
    ("Export invoices as CSV", "finance downloads all invoices of a month as one CSV file"),
    ("Retry failed webhooks", "failed webhook deliveries are retried with exponential backoff"),
    ("Search orders by customer", "support staff find orders by customer name or e-mail"),
    ("Migrate settings to TOML", "the settings file moves from INI to TOML without losing keys"),
]
ISSUES = [
    ("null-handling", "user lookup returns None for deleted accounts and the handler crashes"),
    ("race-on-refresh", "two concurrent token refreshes can both succeed"),
    ("missing-tests", "the error paths of the new module have no tests"),
    ("error-messages", "validation errors do not say which field is wrong"),
    ("perf", "the listing query scans the whole table"),
    ("token-expiry", "expired tokens are accepted for one extra minute"),
    ("docs-drift", "the README still documents the old flag names"),
    ("input-validation", "negative page sizes are not rejected"),
    ("retry-policy", "retries ignore the Retry-After header"),
]
TIE_BREAKS = [
    ("auth-gateway", "reviewers disagree whether the gateway or the service checks scopes"),
    ("schema-ownership", "design and implementation disagree on who owns the schema migration"),
]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task"


def _spec(title: str, goal: str) -> str:
    return (f"# {title}\n\n## Goal\n\n{goal[0].upper() + goal[1:]}.\n\n## Acceptance criteria\n\n"
            f"- The behaviour is covered by automated tests.\n- Errors are reported with a clear message.\n"
            f"\n## Out of scope\n\n- UI changes.\n")


def _doc(title: str, kind: str, rng: random.Random) -> str:
    bodies = {
        "DESIGN.md": "## Approach\n\nA small module behind the existing service interface.\n\n"
                     "## Data model\n\nOne new table, indexed by owner id.\n",
        "TEST_PLAN.md": "## Unit tests\n\n- happy path\n- invalid input\n\n## Integration\n\n- end to end\n",
        "IMPLEMENTATION.md": f"## Changes\n\n- `src/{_slug(title)}.py`: new module ({rng.randint(80, 400)} lines)\n"
                             f"- `tests/test_{_slug(title).replace('-', '_')}.py`: {rng.randint(5, 30)} tests\n",
        "BUG_REPORT.md": "## Bugs found\n\n" + "".join(f"- {i}: {t}\n" for i, t in rng.sample(ISSUES, 2)),
        "ADVERSARIAL_BUG_REPORT.md": "## Adversarial inputs\n\n"
                                     + "".join(f"- {i}: {t}\n" for i, t in rng.sample(ISSUES, 2)),
        "DOC_REVIEW.md": "## Documentation review\n\n- README updated: "
                         + rng.choice(["yes", "partially", "no"]) + "\n- Docstrings: complete\n",
    }
    return f"# {kind.removesuffix('.md').replace('_', ' ').title()}: {title}\n\n{bodies[kind]}"


def _verdict_text(value: str, findings: list[tuple[str, str]], remaining: list[tuple[str, str]],
                  ties: list[tuple[str, str]], rng: random.Random) -> str:
    style = rng.choice(["heading", "field", "heading-next-line", "bare-line"])
    head = {
        "heading": f"# Verdict: {value}\n",
        "field": f"# Referee report\n\n**Verdict:** {value}\n",
        "heading-next-line": f"# Referee report\n\n## Verdict\n\n{value}\n",
        "bare-line": f"# Referee decision\n\n**{value}**\n",
    }[style]
    return head + _sections(findings, remaining, ties)


def _sections(findings: list[tuple[str, str]], remaining: list[tuple[str, str]],
              ties: list[tuple[str, str]]) -> str:
    def block(title: str, items: list[tuple[str, str]]) -> str:
        lines = "".join(f"- {i}: {t}\n" for i, t in items) or "- None\n"
        return f"\n## {title}\n\n{lines}"

    return (block("Findings", findings) + block("Remaining Issues", remaining)
            + block("Tasks for Review / Tie-Breaks", ties))


def _unparseable_text(findings: list[tuple[str, str]], rng: random.Random) -> str:
    if rng.random() < 0.5:  # prose without a verdict
        return ("# Referee notes\n\nThe change mostly works, but I could not decide between the two "
                "reviewers on the remaining issues.\n" + _sections(findings, [], []))
    return "# Referee report\n\nVerdict: PASS\n\nOn second thought:\n\nVerdict: FAIL\n" + _sections(findings, [], [])


class _Run:
    """Accumulates the steps of one simulated tasks/ directory."""

    def __init__(self, rng: random.Random, name: str, start: datetime) -> None:
        self.rng, self.name, self.t = rng, name, start
        self.tree: Tree = {"": {}, name: {}}
        self.steps: list[tuple[datetime, Tree]] = []

    def snap(self) -> None:
        self.steps.append((self.t, {k: dict(v) for k, v in self.tree.items()}))
        self.t += timedelta(minutes=self.rng.randint(2, 90), seconds=self.rng.randint(0, 59))

    def write(self, fname: str, text: str, empty_first: float = 0.2) -> None:
        if self.rng.random() < empty_first:
            self.tree[self.name][fname] = b""
            self.snap()
        self.tree[self.name][fname] = text.encode("utf-8")
        self.snap()

    def spawn(self, verdict: dict[str, object]) -> None:
        parent = self.tree[self.name]
        for _, task, _ in expected_follow_ups(self.name, verdict):
            files = {f: parent[f] for f in COPIED_FILES if f in parent}
            files["IMPLEMENTATION.md"] = b""
            self.tree[task] = dict(sorted(files.items()))
        self.snap()


def simulate_trees(rng: random.Random, *, run_id: str, start: datetime) -> list[tuple[datetime, Tree]]:
    """Every state of the simulated tasks/ directory, oldest first."""
    name = _slug(run_id)
    run = _Run(rng, name, start)
    autopilot = rng.random() < 0.35
    marker_home = "" if rng.random() < 0.5 else name
    if autopilot:
        run.tree[marker_home][".autopilot"] = b""
    run.snap()  # the orchestrator created the empty folder
    title, goal = rng.choice(TOPICS)
    run.write("SPEC.md", _spec(title, goal))
    if rng.random() < 0.15:
        run.write("SPEC.md", _spec(title, goal) + "\n## Clarifications\n\n- Confirmed with the user.\n", 0)
    if rng.random() < 0.5:
        run.write("DESIGN.md", _doc(title, "DESIGN.md", rng))
        if rng.random() < 0.5:
            run.write("TEST_PLAN.md", _doc(title, "TEST_PLAN.md", rng))
    skip = rng.choice(["BUG_REPORT.md", "ADVERSARIAL_BUG_REPORT.md", "DOC_REVIEW.md"]) if rng.random() < 0.08 else None
    for fname in ("IMPLEMENTATION.md", "BUG_REPORT.md", "ADVERSARIAL_BUG_REPORT.md", "DOC_REVIEW.md"):
        if fname != skip:
            run.write(fname, _doc(title, fname, rng))
    value = rng.choices(["PASS", "FAIL", "NEEDS_REVIEW", "unparsed"], [45, 30, 15, 10])[0]
    findings = rng.sample(ISSUES, rng.randint(1, 3))
    if value == "unparsed":
        run.write("VERDICT.md", _unparseable_text(findings, rng))
        if rng.random() >= 0.6:
            return run.steps
        value = rng.choice(["PASS", "FAIL", "NEEDS_REVIEW"])
    ties = [rng.choice(TIE_BREAKS)] if rng.random() < 0.25 else []
    remaining = rng.sample(ISSUES, rng.randint(1, 2)) if value == "NEEDS_REVIEW" else []
    text = _verdict_text(value, findings if value == "FAIL" else [], remaining, ties, rng)
    run.write("VERDICT.md", text, 0 if "VERDICT.md" in run.tree[name] else 0.2)
    verdict = lifecycle(run.tree, name)["verdict"]
    if not expected_follow_ups(name, verdict):
        return run.steps
    if autopilot:
        if rng.random() < 0.5:
            return run.steps  # paused, waiting for the user
        del run.tree[marker_home][".autopilot"]  # the user takes over in manual mode
        run.snap()
    run.spawn(verdict)
    return run.steps


def simulate(rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
    """Snapshots of one simulated task's lifecycle (stream ``taskflow/<task>``)."""
    name = _slug(run_id)
    for step, (when, tree) in enumerate(simulate_trees(rng, run_id=run_id, start=start)):
        yield Snapshot(doc=lifecycle(tree, name), raw=None,
                       source={"simulated": "taskflow", "dir": f"tasks/{name}", "step": step},
                       occurred_at=when, stream_hint=f"taskflow/{name}")


def write_simulated_task(tasks_dir: Path, rng: random.Random, *, run_id: str, start: datetime,
                         step: int = -1) -> str:
    """Write step ``step`` (default: the last) of a simulated run into ``tasks_dir``.

    Returns the task's name; its folder is ``tasks_dir / name``.  Other content of
    ``tasks_dir`` is replaced (see :func:`~.lifecycle.write_tree`).
    """
    steps = simulate_trees(rng, run_id=run_id, start=start)
    write_tree(tasks_dir, steps[step][1])
    return _slug(run_id)
