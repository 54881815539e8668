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

With `repeat` above 1 the reference and dummy agents run that many times
each (the hollow agent once), as trials of the same run, and `flakes` counts
per task and check the runs that disagree with the others or with what a
valid task gives: a task whose runs disagree among themselves is noise, and
dataset.yaml quarantines it (`quarantine:`). With `resume`, runs already
graded in the results directory for the same task files, agent, difficulty
and trial are read back, not run again (`ssebench.record.resumable`, as the
plugin's --resume).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
# A task's cost ceiling, in seconds: its case image builds, and a reference run's container ends, within it on a
# 2-core machine. A task over it is listed under `long:` in dataset.yaml, so that `-m "not long"` leaves it out.
CEILING = 300.0


@dataclass
class TaskVerdict:
    task: Task
    # Each agent's runs, by trial (one each without repeats).
    runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # How long its case image took to build in this verify; None when it was there already.
    build_seconds: float | None = None
    # Its images did not build (the problem says which layer, and its log).
    images_failed: bool = False

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def records(self) -> dict[str, RunRecord]:
        """Each agent's first run."""
        return {agent: runs[0] for agent, runs in self.runs.items() if runs}

    def run_seconds(self, agent: str) -> float | None:
        """How long the agent's first run took, start to end."""
        record = self.records.get(agent)
        return record.durations.get("total") if record else None

    def over_ceiling(self) -> list[str]:
        """What of the task went over the cost ceiling (CEILING), each with its seconds."""
        over = []
        if self.build_seconds is not None and self.build_seconds > CEILING:
            over.append(f"case image build {self.build_seconds:.0f} s")
        seconds = self.run_seconds("reference")
        if seconds is not None and seconds > CEILING:
            over.append(f"reference run {seconds:.0f} s")
        return over


def judge(task: Task, agent: str, record: RunRecord, *, trials: int = 1) -> list[str]:
    """What is wrong with one run for a valid task, each naming the task and the check (and which of `trials`
    runs it was, when there are several); empty when right."""
    checks = task.checks()
    patch = record.patch_result
    where = f"{task.id} ({agent}" + (f", run {record.config.trial} of {trials})" if trials > 1 else ")")
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
    repeat: int = 1,
    resume: bool = False,
    say: Callable[[str], None] = lambda message: print(for_terminal(message)),
) -> list[TaskVerdict]:
    """Build every image, run reference and dummy (`repeat` times each) and hollow on every task, judge each
    run; with `resume`, read back the runs already graded in `results` instead of running them."""
    # The session's checks (the results directory among them) before an hour of building, not after.
    lifecycle = RunSession(settings, Plan(results=results, resume=resume))
    verdicts = {t.id: TaskVerdict(t) for t in tasks}
    agents = {name: load_agent(settings.agents_dir, name) for name in AGENTS}
    build_seconds: dict[str, float] = {}
    for name, agent in agents.items():
        started = time.monotonic()
        outcome = build_images(settings, tasks, agent, jobs=max(jobs, settings.build_jobs), say=say)
        build_seconds |= outcome.report.seconds
        for task_id, failure in outcome.failures.items():
            said = f"{task_id}: images do not build ({failure.layer} layer): see {failure.log_path}"
            if said not in verdicts[task_id].problems:  # each agent's build meets the same failed layer
                verdicts[task_id].problems.append(said)
            verdicts[task_id].images_failed = True
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

    def one(task: Task, agent: str, trial: int) -> None:
        config = RunConfig(task=task, agent=agents[agent], limits=limits_for(settings, task), trial=trial)
        record = lifecycle.run(config, build=False)
        trials = trials_of(agent, repeat)
        problems = judge(task, agent, record, trials=trials)
        with lock:
            verdicts[task.id].runs.setdefault(agent, []).append(record)
            verdicts[task.id].problems.extend(problems)
            which = f" {trial}/{trials}" if trials > 1 else ""
            said = f" — {problems[0]}" if problems else " — as expected"
            say(f"{task.id} {agent}{which}: {record.grade}{' (resumed)' if record.resumed else ''}{said}")

    runnable = [t for t in tasks if not verdicts[t.id].problems]
    with lifecycle:
        pool = ThreadPoolExecutor(max_workers=jobs)
        futures: list[Future[None]] = []
        try:
            futures += [pool.submit(hidden, t) for t in runnable]
            futures += [
                pool.submit(one, t, a, trial)
                for trial in range(1, repeat + 1)  # every task's first runs before any task's second
                for t in runnable
                for a in AGENTS
                if trial <= trials_of(a, repeat)
            ]
            for future in futures:
                future.result()
        except BaseException:
            # Stopped (Ctrl-C) or broken: no run starts any more, and those under way end and are recorded, so
            # that --resume reads them back; a second Ctrl-C stops them too (the session removes their containers).
            under_way = sum(f.running() for f in futures)
            say(f"stopping: {under_way} run(s) under way end first (Ctrl-C again stops them); then --resume goes on")
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown()
    for verdict in verdicts.values():
        # In AGENTS' order, each agent's by trial, however the runs ended.
        verdict.runs = {
            agent: sorted(verdict.runs[agent], key=lambda r: r.config.trial)
            for agent in AGENTS
            if agent in verdict.runs
        }
        verdict.build_seconds = build_seconds.get(image_names(settings, verdict.task)["case"])
        over = verdict.over_ceiling()
        if over and not verdict.task.long:
            say(
                f"{verdict.task.id} is over the cost ceiling of {CEILING:.0f} s ({', '.join(over)}): "
                "list it under long: in dataset.yaml with the reason"
            )
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


def trials_of(agent: str, repeat: int) -> int:
    """How many times verify runs `agent`: the hollow agent once (its edits are set aside or not, whatever the
    runs' noise), the others `repeat` times."""
    return 1 if agent == "hollow" else repeat


# The checks the flake table counts, in its order.
FLAKE_CHECKS = ("build", "poc", "variants", "function", "intent", "grade")


def observed(task: Task, agent: str, record: RunRecord) -> dict[str, tuple[object, bool | None]]:
    """Each check of the task in one run of reference or dummy: what it gave, and whether that is what a valid
    task gives (None where verify expects nothing, as of the dummy's intent test). The same expectations as
    `judge`, one value per check, so that runs can be compared."""
    checks = task.checks()
    patch = record.patch_result
    fixed = agent == "reference"
    variants = len(task.config.files.variants)

    def counted(passed: int | None, total: int | None) -> str | None:
        return None if total is None else f"{passed}/{total}"

    out: dict[str, tuple[object, bool | None]] = {}
    if "build" in checks:
        out["build"] = (patch.build_success, patch.build_success is True)
    if "poc" in checks:
        pocs = patch.pov_total is not None and patch.pov_passed == (patch.pov_total if fixed else 0)
        out["poc"] = (counted(patch.pov_passed, patch.pov_total), pocs)
        if variants:
            ran = patch.variants_total == variants
            good = ran and patch.variants_passed == (variants if fixed else 0)
            out["variants"] = (counted(patch.variants_passed, patch.variants_total), good)
    if "function_test" in checks:
        out["function"] = (patch.func_test_success, patch.func_test_success is True)
    if "intent_test" in checks:
        out["intent"] = (patch.intent_test_success, patch.intent_test_success is True if fixed else None)
    out["grade"] = (record.grade, record.grade == ("passed" if fixed else "failed"))
    return out


def flakes(task: Task, agent: str, runs: list[RunRecord]) -> dict[str, dict[str, int]]:
    """Per check of the task, over `runs` of one agent: `runs`; `flaky`, the runs that disagree with the
    majority's value (with a tie, all but one of the largest groups); `wrong`, those not giving what a valid
    task gives; `disagree`, those that do either."""
    seen = [observed(task, agent, record) for record in runs]
    out: dict[str, dict[str, int]] = {}
    for check in FLAKE_CHECKS:
        values = [run[check] for run in seen if check in run]
        if not values:
            continue
        counts = Counter(repr(value) for value, _ in values)
        top = max(counts.values())
        # Of the largest groups, an expected one stands as the majority, so a tie is not counted twice.
        tied = [key for key, n in counts.items() if n == top]
        good = [repr(value) for value, ok in values if ok is not False]
        majority = next((key for key in tied if key in good), tied[0])
        off = [repr(value) != majority for value, _ in values]
        wrong = [ok is False for _, ok in values]
        out[check] = {
            "runs": len(values),
            "flaky": sum(off),
            "wrong": sum(wrong),
            "disagree": sum(a or b for a, b in zip(off, wrong, strict=True)),
        }
    return out


def summary(
    verdicts: list[TaskVerdict], dataset: str, version: str | None, seconds: float, *, repeat: int = 1
) -> dict[str, Any]:
    rows = []
    for v in verdicts:
        row: dict[str, Any] = {
            "task": v.task.id,
            "language": v.task.language,
            "project": v.task.config.project,
            "advisories": v.task.advisories(),
            "checks": v.task.checks(),
            "valid": v.valid,
            "quarantined": v.task.quarantined,
            "long": v.task.long,
            "problems": v.problems,
            "case_build_seconds": v.build_seconds,
            "images_failed": v.images_failed,
            "over_ceiling": v.over_ceiling(),
        }
        for agent, record in v.records.items():
            # The record's one-line form (ssebench.record: grade, checks, times), as the report's properties.
            row[agent] = dict(record.properties()) | {"seconds": record.durations.get("total")}
        row["grades"] = {agent: [r.grade for r in runs] for agent, runs in v.runs.items()}
        row["flakes"] = {
            agent: flakes(v.task, agent, runs) for agent, runs in v.runs.items() if trials_of(agent, repeat) > 1
        }
        row["flaky"] = any(c["flaky"] for checks in row["flakes"].values() for c in checks.values())
        rows.append(row)
    return {
        "dataset": dataset,
        "version": version,
        "verified_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "repeat": repeat,
        "resumed": sum(r.resumed for v in verdicts for runs in v.runs.values() for r in runs),
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
        grades = " | ".join(_grades(_runs_of(row, agent)) for agent in AGENTS)
        valid = "yes" if row["valid"] else "NO"
        if row.get("quarantined"):
            valid += " (quarantined)"
        lines.append(
            f"| {row['task']} | {row['language']} | {', '.join(row['advisories']) or '-'} | {grades} | {valid} |"
        )
    lines += ["", *cost_table(report)]
    if report.get("resumed"):
        lines += ["", f"{report['resumed']} run(s) read back from an earlier verify (--resume), not run again."]
    if report.get("repeat", 1) > 1:
        lines += ["", *flake_table(report)]
    problems = [p for row in report["tasks"] for p in row["problems"]]
    if problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in problems]
    return for_terminal("\n".join(lines) + "\n")


def cost_table(report: dict[str, Any]) -> list[str]:
    """What each task cost (markdown lines): its case image build, its reference and dummy runs, the check the
    dummy failed first; and the tasks over the ceiling that dataset.yaml does not list as long."""

    def seconds(value: object) -> str:
        return f"{value:.0f} s" if isinstance(value, int | float) else "-"

    lines = [
        f"## Cost (ceiling {CEILING:.0f} s)",
        "",
        "| task | case build | reference run | dummy run | dummy fails on | long |",
        "|---|---|---|---|---|---|",
    ]
    for row in report["tasks"]:
        dummy = row.get("dummy") if isinstance(row.get("dummy"), dict) else {}
        reference = row.get("reference") if isinstance(row.get("reference"), dict) else {}
        fails_on = str(dummy.get("error_msg") or "-").split(":", 1)[0]
        build = (
            "failed"
            if row.get("images_failed")
            else seconds(row["case_build_seconds"])
            if row.get("case_build_seconds") is not None
            else "reused"
        )
        cells = [build, seconds(reference.get("seconds")), seconds(dummy.get("seconds")), fails_on]
        lines.append(f"| {row['task']} | {' | '.join(cells)} | {'yes' if row.get('long') else '-'} |")
    unlisted = [f"{row['task']} ({', '.join(row['over_ceiling'])})" for row in report["tasks"]
                if row.get("over_ceiling") and not row.get("long")]  # fmt: skip
    lines += [
        "",
        "case build: the task's own image, when this verify built it (reused: it was there already; failed: its "
        "images did not build).",
        f"{len(unlisted)} task(s) over the ceiling and not listed as long"
        + (f": {'; '.join(unlisted)}; list each under long: in dataset.yaml with the reason." if unlisted else "."),
    ]
    return lines


def _runs_of(row: dict[str, Any], agent: str) -> list[str]:
    """An agent's grades in a summary's row: every run's, or (a summary without them) its first run's."""
    grades = row.get("grades", {}).get(agent)
    if grades:
        return list(grades)
    return [row[agent]["grade"]] if isinstance(row.get(agent), dict) and "grade" in row[agent] else []


def _grades(grades: list[str]) -> str:
    """One agent's grades: the grade, or with several runs how many of each (`3 passed`, `2 failed, 1 passed`)."""
    if len(grades) <= 1:
        return grades[0] if grades else "-"
    return ", ".join(f"{n} {grade}" for grade, n in Counter(grades).most_common())


def flake_table(report: dict[str, Any]) -> list[str]:
    """The flake table of a summary (markdown lines): per task and agent run several times, per check, how
    many of the runs disagree with the others or with what a valid task gives."""
    n = report.get("repeat", 1)
    lines = [
        f"## Flakes ({n} runs each of reference and dummy)",
        "",
        "| task | agent | " + " | ".join(FLAKE_CHECKS) + " | flaky |",
        "|---|---|" + "---|" * len(FLAKE_CHECKS) + "---|",
    ]
    for row in report["tasks"]:
        for agent, checks in row.get("flakes", {}).items():
            cells = []
            for check in FLAKE_CHECKS:
                got = checks.get(check)
                cells.append("-" if got is None else f"{got['disagree']}/{got['runs']}")
            noisy = any(c["flaky"] for c in checks.values())
            lines.append(f"| {row['task']} | {agent} | {' | '.join(cells)} | {'YES' if noisy else 'no'} |")
    flaky = [row["task"] for row in report["tasks"] if row.get("flaky")]
    lines += [
        "",
        "A cell counts the runs that disagree with the majority of the runs or with what a valid task gives "
        "(- where the task has no such check). Flaky: the runs disagree among themselves.",
        f"{len(flaky)} flaky task(s)"
        + (f": {', '.join(flaky)}; quarantine each in dataset.yaml with the reason (quarantine:)." if flaky else "."),
    ]
    return lines


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"verify-{report['dataset']}-{report['verified_at'].replace(':', '').replace('+0000', 'Z')}"
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown(report), encoding="utf-8")
    js.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return md, js
