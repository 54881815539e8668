"""Verifying a dataset: every task valid, shown by running the reference, dummy and hollow agents on it.

A task is valid when the reference agent passes every check it supports
(its variants included), and the dummy agent (no change) builds, passes the
function test and fails every proof of concept and every variant (README, "Quick start"). Grading must also rest on nothing the
agent's files decide: the hollow agent leaves the bug and edits only build
files, tests and harnesses, the ways that once forged a pass, so on a valid
task it is graded failed with those files set aside; and the reference fix
changes nothing grading sets aside (else it is not graded whole: the task
names such files in `fix_may_change`). `verify` runs the three agents on
every task, N runs at a time, through the same code as a pytest item, and
says for each task which check, if any, disagrees.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ssebench import manifest
from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.image import image_names
from ssebench.leak import answer_pieces, leak_terms, searchable, task_leaks
from ssebench.logs import for_terminal
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig, limits_for
from ssebench.session import Plan, RunSession
from ssebench.settings import Settings
from ssebench.task import Task

AGENTS = ("reference", "dummy", "hollow")


@dataclass
class TaskVerdict:
    task: Task
    records: dict[str, RunRecord] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    build_seconds: float | None = None

    @property
    def valid(self) -> bool:
        return not self.problems


def judge(task: Task, agent: str, record: RunRecord) -> list[str]:
    """What is wrong with one run for a valid task, each naming the task and the check; empty when right."""
    checks = task.checks()
    patch = record.patch_result
    where = f"{task.id} ({agent})"
    if record.infra_error:
        return [f"{where}: not graded: {record.infra_error.splitlines()[0]}"]
    problems = []
    if agent == "reference":
        if record.grade != "passed":
            problems.append(f"{where}: graded {record.grade}, expected passed: {patch.error_msg}")
        wanted = {
            "build": patch.build_success,
            "function_test": patch.func_test_success,
            "intent_test": patch.intent_test_success,
        }
        for check, passed in wanted.items():
            if check in checks and passed is not True:
                problems.append(f"{where}: {check} did not pass")
        if "poc" in checks and (patch.pov_total is None or patch.pov_passed != patch.pov_total):
            problems.append(f"{where}: poc: {patch.pov_passed} of {patch.pov_total} fixed, expected all")
        variants = task.config.files.variants
        if variants and (patch.variants_total != len(variants) or patch.variants_passed != patch.variants_total):
            ran = (
                "none ran"
                if patch.variants_total is None
                else f"{patch.variants_passed} of {patch.variants_total} fixed"
            )
            problems.append(f"{where}: variants: {ran}, expected all {len(variants)} fixed")
        set_aside, count = record.set_aside
        if count:
            problems.append(
                f"{where}: grading set aside {count} file(s) of the fix ({', '.join(set_aside[:5])}): "
                "list those the fix needs under fix_may_change in config.yaml"
            )
        return problems
    if agent == "hollow":
        if record.grade != "failed":
            problems.append(
                f"{where}: graded {record.grade}, expected failed: its build, test and harness "
                "edits decided a check; protect the files its scripts go through (protected_files)"
            )
        if not record.set_aside[1]:
            problems.append(f"{where}: grading set none of its edits aside (result.json signals.protected_files)")
        return problems
    if "build" in checks and patch.build_success is not True:
        problems.append(f"{where}: build failed without any change")
    if "function_test" in checks and patch.func_test_success is not True:
        problems.append(f"{where}: function_test fails without any change")
    if "poc" in checks and patch.pov_passed != 0:
        problems.append(
            f"{where}: poc: {patch.pov_passed} of {patch.pov_total} PoCs pass without any change, expected none"
        )
    # A variant reaches the bug: on the tree without a fix, each must still trigger it.
    variants = task.config.files.variants
    if variants and "poc" in checks and (patch.variants_total != len(variants) or patch.variants_passed != 0):
        ran = "none ran" if patch.variants_total is None else f"{patch.variants_passed} of {patch.variants_total} pass"
        problems.append(
            f"{where}: variants: {ran} without any change, expected {len(variants)} that each trigger the bug "
            "on the original tree"
        )
    return problems


def verify(
    settings: Settings,
    tasks: list[Task],
    results: Path,
    *,
    jobs: int = 1,
    say: Callable[[str], None] = lambda message: print(for_terminal(message)),
) -> list[TaskVerdict]:
    """Build every image, run reference and dummy on every task, judge each run."""
    # The session's checks (the results directory among them) before an hour of building, not after.
    lifecycle = RunSession(settings, Plan(results=results))
    verdicts = {t.id: TaskVerdict(t) for t in tasks}
    agents = {name: load_agent(settings.agents_dir, name) for name in AGENTS}
    for name, agent in agents.items():
        started = time.monotonic()
        outcome = build_images(settings, tasks, agent, jobs=max(jobs, settings.build_jobs), say=say)
        for task_id, failure in outcome.failures.items():
            verdicts[task_id].problems.append(
                f"{task_id}: images do not build ({failure.layer} layer): see {failure.log_path}"
            )
        say(
            f"images for {name}: {len(outcome.report.built)} built, {len(outcome.report.reused)} reused "
            f"({time.monotonic() - started:.0f} s)"
        )
    lock = threading.Lock()

    def hidden(task: Task) -> None:
        # The leak scan (ssebench.leak): names of the fix, its hunks, the hidden tests, PoCs and variants.
        found = task_leaks(image_names(settings, task)["tool"], task, lifecycle.session)
        pieces = answer_pieces(task)
        blind = [p.where for p in pieces if not searchable(p)]
        with lock:
            if found:
                verdicts[task.id].problems.append(
                    f"{task.id}: the agent (uid 1000) can read what names the fix or holds its answer: "
                    + "; ".join(map(str, found[:10]))
                    + (f" and {len(found) - 10} more" if len(found) > 10 else "")
                )
            say(
                f"{task.id} hidden: {len(found)} agent-readable files name the fix ({', '.join(leak_terms(task))}) "
                f"or hold one of its {len(pieces)} hunks, tests and inputs"
                + (f" ({', '.join(blind)}: too small or too common to search for)" if blind else "")
            )

    def one(task: Task, agent: str) -> None:
        config = RunConfig(task=task, agent=agents[agent], limits=limits_for(settings, task))
        record = lifecycle.run(config, build=False)
        problems = judge(task, agent, record)
        with lock:
            verdicts[task.id].records[agent] = record
            verdicts[task.id].problems.extend(problems)
            say(f"{task.id} {agent}: {record.grade}" + (f" — {problems[0]}" if problems else " — as expected"))

    runnable = [t for t in tasks if not verdicts[t.id].problems]
    with lifecycle, ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(hidden, t) for t in runnable]
        futures += [pool.submit(one, t, a) for t in runnable for a in AGENTS]
        for future in futures:
            future.result()
    return [verdicts[t.id] for t in tasks]


def record_images(settings: Settings, verdicts: list[TaskVerdict]) -> list[Path]:
    """Beside each dataset's manifest, the engine's ids of the case and tool images of the tasks just found
    valid (`images.json`, ssebench.manifest); the tasks found invalid lose theirs."""
    from ssebench.engine import images

    by_dataset: dict[Path, list[TaskVerdict]] = {}
    for v in verdicts:
        if v.task.dataset_version is not None:  # in a dataset (a task folder on its own has no manifest)
            by_dataset.setdefault(v.task.path.resolve().parent, []).append(v)
    written = []
    for folder, found in sorted(by_dataset.items()):
        ids: dict[str, dict[str, str]] = {}
        for v in found:
            if v.valid:
                names = image_names(settings, v.task)
                ids[v.task.id] = {layer: images().id(names[layer]) or "missing" for layer in ("case", "tool")}
        version = found[0].task.dataset_version
        assert version is not None
        invalid = [v.task.id for v in found if not v.valid]
        written.append(manifest.record_images(folder, version, ids, invalid))
    return written


def summary(verdicts: list[TaskVerdict], dataset: str, version: str | None, seconds: float) -> dict[str, Any]:
    rows = []
    for v in verdicts:
        row: dict[str, Any] = {
            "task": v.task.id,
            "language": v.task.language,
            "project": v.task.config.project,
            "advisories": v.task.advisories(),
            "checks": v.task.checks(),
            "valid": v.valid,
            "problems": v.problems,
        }
        for agent, record in v.records.items():
            # The record's one-line form (ssebench.record: grade, checks, times), as the report's properties.
            row[agent] = dict(record.properties()) | {"seconds": record.durations.get("total")}
        rows.append(row)
    return {
        "dataset": dataset,
        "version": version,
        "verified_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "valid": all(v.valid for v in verdicts),
        "tasks": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    """The summary as markdown, as often read with cat as rendered: what the runs said, written out."""
    lines = [
        f"# Verification of {report['dataset']} ({report['version']})",
        "",
        f"{report['verified_at']}, {report['seconds']:.0f} s: "
        f"{sum(r['valid'] for r in report['tasks'])} of {len(report['tasks'])} tasks valid.",
        "",
        "| task | language | advisories | " + " | ".join(AGENTS) + " | valid |",
        "|---|---|---|" + "---|" * len(AGENTS) + "---|",
    ]
    for row in report["tasks"]:
        grades = " | ".join((row.get(agent) or {}).get("grade", "-") for agent in AGENTS)
        lines.append(
            f"| {row['task']} | {row['language']} | {', '.join(row['advisories']) or '-'} | {grades} | "
            f"{'yes' if row['valid'] else 'NO'} |"
        )
    problems = [p for row in report["tasks"] for p in row["problems"]]
    if problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in problems]
    return for_terminal("\n".join(lines) + "\n")


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"verify-{report['dataset']}-{report['verified_at'].replace(':', '').replace('+0000', 'Z')}"
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown(report), encoding="utf-8")
    js.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return md, js
