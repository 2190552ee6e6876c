"""Simulated task-master projects: the ``tasks.json`` versions a project commits as it works.

A run starts from a parsed PRD (4-7 pending tasks with priorities and dependencies), in the tagged
format (``{"master": {"tasks", "metadata"}}``) or, one run in three, the legacy one.  Then, in
dependency order, a task is expanded into subtasks, set in-progress, its subtasks worked through,
sometimes sent to review, blocked, deferred or reopened after done; a subtask, a task is added or
removed now and then, and a tagged project may open a feature tag and drop it again.  Along the way
a pending task's priority changes, a dependency is added (pushed, then the list sorted, as
``add-dependency`` does) or removed, a task is rewritten (``update-task``) and a subtask gets notes
appended to its details (``update-subtask``).  Titles carry
non-ASCII text and ``/``.
Deterministic per seed; about 35-70 versions.  Only ``tasks.json``: ``state.json`` (a tag switch) is
another file, another stream, which a simulated run does not write.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from eventstore import documents
from eventstore.dialects.base import Snapshot

TITLES = ["Set up CI/CD pipeline", "Écran de connexion", "API 認証 layer", "Database schema & migrations",
          "Rate limiter for /api/v1", "Onboarding e-mails", "Search índice", "Export to CSV/Parquet"]
PRIORITIES = ["high", "medium", "low"]


def _task(rng: random.Random, task_id: int, earlier: list[int]) -> dict[str, Any]:
    title = TITLES[(task_id - 1) % len(TITLES)]
    deps = sorted(rng.sample(earlier, k=min(len(earlier), rng.randrange(3))))
    return {"id": task_id, "title": title, "description": f"Implement {title.lower()}.",
            "details": f"Steps for {title}:\n1. design\n2. build\n3. test", "testStrategy": "Unit and integration tests.",
            "priority": rng.choice(PRIORITIES), "dependencies": deps, "status": "pending", "subtasks": []}


def _replan(rng: random.Random, tasks: list[dict[str, Any]], current: dict[str, Any], when: datetime) -> bool:
    """One planning edit to a pending task other than ``current`` (a priority, a dependency, a
    rewrite), or none; True if the document changed."""
    pending = [t for t in tasks if t is not current and t["status"] == "pending"]
    if not pending:
        return False
    task = rng.choice(pending)
    roll = rng.random()
    if roll < 0.15:
        task["priority"] = rng.choice([p for p in PRIORITIES if p != task["priority"]])
        return True
    if roll < 0.3:
        deps = task["dependencies"]
        if deps and rng.random() < 0.4:
            deps.remove(rng.choice(deps))
            return True
        earlier = [t["id"] for t in tasks if t["id"] < task["id"] and t["id"] not in deps]  # stays acyclic
        if not earlier:
            return False
        deps.append(rng.choice(earlier))
        deps.sort()
        return True
    if roll < 0.42:
        task["description"] = f"Implement {task['title'].lower()}, revised {when:%Y-%m-%d %H:%M}."
        task["details"] += "\n4. update the docs"
        return True
    return False


def simulate_project(rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
    legacy = rng.random() < 1 / 3
    now = start
    n = rng.randint(4, 7)
    tasks: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        tasks.append(_task(rng, i, [t["id"] for t in tasks]))
    if legacy:
        doc: dict[str, Any] = {"tasks": tasks, "metadata": {"projectName": run_id, "totalTasks": n,
                                                            "sourceFile": "scripts/prd.txt",
                                                            "generatedAt": now.isoformat()}}
    else:
        doc = {"master": {"tasks": tasks, "metadata": {"created": now.isoformat(), "updated": now.isoformat(),
                                                       "description": "Tasks for master context"}}}
    stream = f"taskmaster/{run_id}"

    def snap() -> Snapshot:
        if not legacy:
            doc["master"]["metadata"]["updated"] = now.isoformat()
        return Snapshot(doc=documents.copy(doc), occurred_at=now, stream_hint=stream)

    yield snap()
    next_id = n + 1
    for task in list(tasks):
        if task not in tasks:
            continue
        now += timedelta(minutes=rng.randint(3, 40))
        if rng.random() < 0.15 and len(tasks) > 2 and task["status"] == "pending":  # dropped from the plan
            tasks.remove(task)
            yield snap()
            continue
        task["subtasks"] = [{"id": k, "title": f"{task['title']} — step {k}", "description": "", "dependencies":
                             [k - 1] if k > 1 else [], "details": "", "status": "pending", "parentTaskId": task["id"]}
                            for k in range(1, rng.randint(2, 4) + 1)]
        yield snap()
        if len(task["subtasks"]) > 2 and rng.random() < 0.2:  # a step found unnecessary
            task["subtasks"].pop()
            yield snap()
        task["status"] = "in-progress"
        yield snap()
        if _replan(rng, tasks, task, now):
            yield snap()
        for sub in task["subtasks"]:
            now += timedelta(minutes=rng.randint(5, 50))
            sub["status"] = "in-progress"
            yield snap()
            if rng.random() < 0.2:  # update-subtask: notes appended, stamped
                sub["details"] += f"\n<info added on {now.isoformat()}>\nFound an edge case.\n</info added on {now.isoformat()}>"
                yield snap()
            if rng.random() < 0.15:
                task["status"] = "blocked"
                yield snap()
                now += timedelta(minutes=rng.randint(10, 90))
                task["status"] = "in-progress"
            sub["status"] = "done"
            yield snap()
        if rng.random() < 0.3:
            task["status"] = "review"
            yield snap()
        task["status"] = rng.choice(["done", "done", "done", "deferred"])
        yield snap()
        if task["status"] == "done" and rng.random() < 0.2:  # reopened
            now += timedelta(minutes=rng.randint(10, 60))
            task["status"] = "in-progress"
            task["details"] += "\nReopened: regression found."
            yield snap()
            task["status"] = "done"
            yield snap()
        if rng.random() < 0.25:  # a task found on the way
            tasks.insert(rng.randrange(len(tasks) + 1), _task(rng, next_id, [t["id"] for t in tasks]))
            next_id += 1
            if legacy:
                doc["metadata"]["totalTasks"] = len(tasks)
            yield snap()
        if not legacy and "feature-x" in doc and rng.random() < 0.25:  # the feature was dropped
            del doc["feature-x"]
            yield snap()
        elif not legacy and "feature-x" not in doc and rng.random() < 0.2:
            doc["feature-x"] = {"tasks": [_task(rng, 1, [])], "metadata": {
                "created": now.isoformat(), "updated": now.isoformat(), "description": "Tasks for feature-x"}}
            yield snap()
