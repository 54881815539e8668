"""What a run adds to pytest's reports: junit-xml properties, pytest-html extras, the score table.

`ReportHooks` is the plugin's reporting half: it attaches each run's grade
to its report, feeds the score table from reports (so it works under xdist,
on the controller) and prints the table in the terminal and in report.html.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sse.dialog import parse
from sse.result import PatchResult, RuntimeResult, Signals, typed

from pytest_ssebench.transcript import render_transcript
from ssebench.logs import columns, for_terminal
from ssebench.record import RunRecord
from ssebench.result import read_safely
from ssebench.runspec import RunConfig

# The most of a dialog the report reads to render it (the file itself is attached, tail first).
DIALOG_BYTES = 8 << 20

PREFIX = "ssebench."
# Where a run item keeps its record (set by the item, read here for the HTML report).
RECORD = pytest.StashKey[RunRecord]()


def _prefixed(props: list[tuple[str, object]]) -> list[tuple[str, object]]:
    return [(PREFIX + key, "" if value is None else value) for key, value in props]


def _identity(config: RunConfig) -> list[tuple[str, object]]:
    task = config.task
    return [
        ("task", task.id),
        ("project", task.config.project),
        ("language", task.language),
        ("advisories", ", ".join(task.advisories())),
        ("dataset_version", task.dataset_version),
        ("agent", config.agent.name),
        ("model", config.model),
        ("difficulty", config.difficulty),
        ("mode", config.mode),
        ("trial", config.trial),
    ]


def identity(config: RunConfig) -> list[tuple[str, object]]:
    """Who a run is, as junit-xml properties: known before it runs."""
    return _prefixed(_identity(config))


def properties(record: RunRecord) -> list[tuple[str, object]]:
    """The run's identity and result.json's fields as junit-xml properties."""
    return identity(record.config) + outcome(record)


def outcome(record: RunRecord) -> list[tuple[str, object]]:
    """What a run produced (grade, checks, times, usage, limits) as junit-xml properties: the record's own
    (`RunRecord.properties`), then what is rendered here of its lists and mappings."""
    props = record.properties()
    if record.usage:  # the gateway's account of the run's model calls, never the agent's own
        props += [
            (f"usage_{name}", value) for name, value in record.usage.items() if not isinstance(value, dict | list)
        ]
    if record.limits_hit:
        props.append(("limits_hit", "; ".join(record.limits_hit)))
    set_aside, count = record.set_aside
    if count:  # a signal, never a grade: the patch changed files that decide a check
        props += [("signal.protected_files", ", ".join(set_aside)), ("signal.protected_files_count", count)]
    hiding, hidden = record.hiding_code
    if hidden:  # a signal, never a grade: graded lines that can hide a bug from the checks
        props += [
            ("signal.hiding_code", "; ".join(f"{h['path']}: {h['line'].strip()}" for h in hiding[:10])),
            ("signal.hiding_code_count", hidden),
        ]
    return _prefixed(props + signal_properties(record.signals))


def _refusals(entries: list[dict[str, str]]) -> str:
    return "; ".join(f"{e['kind']} {e['route']}: {e['reason']}" for e in entries[:10])


def signal_properties(signals: Signals) -> list[tuple[str, object]]:
    """The shortcut signals beyond the set-aside files and hiding lines, as (name, one-line value) pairs: the
    names of those that fire (`signal.fired`, what the score table counts; left out when none does), and each
    one's detail."""
    fired = signals.fired()
    props: list[tuple[str, object]] = [("signal.fired", ", ".join(fired))] if fired else []
    for name in ("refused_calls", "refused_requests"):
        count = getattr(signals, f"{name}_count")
        if count:
            props += [(f"signal.{name}", _refusals(getattr(signals, name))), (f"signal.{name}_count", count)]
    for group in ("tests", "harness", "build"):
        paths = getattr(signals, f"changed_{group}")
        if paths:
            props.append((f"signal.changed_{group}", ", ".join(paths)))
    if signals.reference_similarity is not None:
        props.append(("signal.reference_similarity", signals.reference_similarity))
    if signals.outside_reference_files is not None:
        props.append(("signal.outside_reference_files", signals.outside_reference_files))
    return props


# The grade card's words for the signals `signal_rows` shows.
_CHANGED = {
    "tests": "the task's tests (the hidden tests' files, test files)",
    "harness": "PoC harnesses (the task's protected files, fuzzers, hidden directories)",
    "build": "build logic (Makefiles, CMake, autotools, Cargo, go.mod)",
}


def signal_rows(signals: Signals) -> list[tuple[str, str]]:
    """The grade card's rows (name, escaped HTML) of the shortcut signals beyond the set-aside files and
    hiding lines: refusals, changed tests, harnesses and build logic, and the comparison with the reference."""
    rows: list[tuple[str, str]] = []
    for name, what in (("refused_calls", "calls the daemon refused"), ("refused_requests", "requests refused")):
        count, entries = getattr(signals, f"{name}_count"), getattr(signals, name)
        if count:
            rows.append(
                (
                    what,
                    html.escape(f"{count}: ")
                    + "<br>".join(html.escape(f"{e['kind']} {e['route']}: {e['reason']}") for e in entries[:10]),
                )
            )
    for group, what in _CHANGED.items():
        paths = getattr(signals, f"changed_{group}")
        if paths:
            rows.append((f"changed {group}", html.escape(f"{len(paths)} file(s) of {what}: " + ", ".join(paths[:50]))))
    if signals.reference_similarity is not None:
        near = " (near it)" if "near_reference" in signals.fired() else ""
        rows.append(("like the reference", html.escape(f"{signals.reference_similarity:.3f} of 1{near}")))
    if signals.outside_reference_files:
        rows.append(("reference's files", "the patch touches none of the files the reference fix touches"))
    fired = signals.fired()
    rows.append(("signals", html.escape(", ".join(fired) + " (never a grade)" if fired else "none")))
    return rows


def vulnerability_cell(user_properties: list[tuple[str, object]]) -> str:
    """The advisory ids and project of a run, escaped, for the report's results table ("" for other tests)."""
    props = dict(user_properties)
    project = str(props.get(PREFIX + "project") or "")
    advisories = str(props.get(PREFIX + "advisories") or "")
    if not project:
        return ""
    return html.escape(f"{advisories or 'no advisory'} · {project}")


def _cell(value: Any) -> str:
    return {True: "✔ passed", False: "✘ failed", None: "— not run"}.get(value, html.escape(str(value)))


def grade_card(record: RunRecord) -> str:
    patch = record.patch_result
    colour = {"passed": "#1a7f37", "failed": "#cf222e"}.get(record.grade, "#9a6700")
    pocs = "— not run" if patch.pov_total is None else f"{patch.pov_passed} / {patch.pov_total} fixed"
    task = record.config.task
    what = f"{task.id}: {task.config.project} ({task.language})"
    rows = [
        ("task", html.escape(what)),
        ("advisories", html.escape(", ".join(task.advisories()) or "—")),
        (
            "ran",
            html.escape(
                f"difficulty {record.config.difficulty}, {record.config.mode} mode, egress {record.config.egress}"
            ),
        ),
        ("grade", f'<b style="color:{colour}">{html.escape(record.grade)}</b>'),
        ("build", _cell(patch.build_success)),
        ("PoCs", html.escape(pocs)),
        ("function test", _cell(patch.func_test_success)),
        ("intent test", _cell(patch.intent_test_success)),
        ("first failure", html.escape(str(patch.error_msg or record.infra_error or "—"))),
        ("agent time", f"{record.durations.get('agent', 0):.1f} s"),
    ]
    if record.usage:
        u = record.usage
        stopped = f"; stopped: {html.escape(str(u['stopped']))}" if u.get("stopped") else ""
        rows.append(
            (
                "model use",
                f"{u.get('calls', 0)} calls, {u.get('prompt_tokens', 0)} in + "
                f"{u.get('completion_tokens', 0)} out tokens, ${float(u.get('cost') or 0):.4f}"
                f"{stopped}",
            )
        )
    if record.limits_hit:
        rows.append(("limits hit", html.escape("; ".join(record.limits_hit))))
    set_aside, count = record.set_aside
    if count:
        rows.append(
            (
                "set aside",
                html.escape(
                    f"the patch's changes to {count} file(s) outside the code under "
                    f"repair, which grading took from the original: " + ", ".join(set_aside[:50])
                ),
            )
        )
    hiding, hidden = record.hiding_code
    if hidden:
        rows.append(
            (
                "can hide the bug",
                html.escape(f"{hidden} added line(s) that can hide a bug from the checks rather than fix it: ")
                + "<br>".join(html.escape(f"{h['path']}: {h['line'].strip()}") for h in hiding[:10]),
            )
        )
    rows += signal_rows(record.signals)
    rows.append(("run", html.escape(str(record.run_dir))))
    body = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<div><table>{body}</table></div>"


def html_extras(record: RunRecord) -> list[dict[str, Any]]:
    """pytest-html extras, read from the run directory without following any link.

    The grade card and the patch are inline, so report.html alone shows
    them; the dialog and logs are attachments.
    """
    from pytest_html import extras

    patch = read_safely(record.run_dir, "final.patch")
    card = grade_card(record)
    if patch is not None:
        shown = html.escape(patch) if patch.strip() else "(the agent changed nothing)"
        card += f"<details open><summary>final.patch</summary><pre>{shown}</pre></details>"
    dialog = read_safely(record.run_dir, "archive/dialog.jsonl", limit=DIALOG_BYTES, tail=False)
    if dialog:
        card += (
            "<details open><summary>what the agent did (archive/dialog.jsonl)</summary>"
            f"{render_transcript(parse(dialog))}</details>"
        )
    items = [extras.html(card)]
    for relative, name in (
        ("archive/dialog.jsonl", "dialog.jsonl"),
        ("evaluator.log", "evaluator.log"),
        ("agent.log", "agent.log"),
    ):
        text = read_safely(record.run_dir, relative)
        if text:
            items.append(extras.text(text, name=name))
    return items


@dataclass
class Tally:
    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    checks: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))
    agent_times: list[float] = field(default_factory=list)
    tokens: int = 0
    cost: float = 0.0
    metered: bool = False
    # Per task (and mode): how many graded trials, how many passed (pass@k is per task, then averaged).
    per_task: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, outcome: str, props: dict[str, Any]) -> None:
        self.runs += 1
        self.outcomes[outcome] += 1
        if outcome in ("passed", "failed"):
            counts = self.per_task[f"{props.get(PREFIX + 'task')}/{props.get(PREFIX + 'mode')}"]
            counts[0] += 1
            counts[1] += outcome == "passed"
        # The run's properties read back as the record's models: a field renamed there is renamed here.
        given = {key.removeprefix(PREFIX): value for key, value in props.items() if key.startswith(PREFIX)}
        patch, runtime = typed(PatchResult, given), RuntimeResult.of(given)
        for check, value in (
            ("build", patch.build_success),
            ("function", patch.func_test_success),
            ("intent", patch.intent_test_success),
        ):
            if value is not None:
                self.checks[check].append(value)
        if patch.pov_total and patch.pov_passed is not None:
            self.checks["poc"].append(patch.pov_passed == patch.pov_total)
        if runtime.agent_duration is not None:
            self.agent_times.append(float(runtime.agent_duration))
        for key in ("usage_prompt_tokens", "usage_completion_tokens"):
            value = props.get(PREFIX + key)
            if isinstance(value, int):
                self.tokens += value
                self.metered = True
        cost = props.get(PREFIX + "usage_cost")
        if isinstance(cost, int | float):
            self.cost += float(cost)

    def rate(self, check: str) -> str:
        values = self.checks.get(check) or []
        return f"{100 * sum(values) / len(values):.0f}%" if values else "-"

    def pass_rate(self) -> str:
        """Passed over graded runs (errors are not graded), with its 95 % Wilson interval."""
        graded = self.outcomes["passed"] + self.outcomes["failed"]
        if not graded:
            return "-"
        low, high = wilson_interval(self.outcomes["passed"], graded)
        return f"{100 * self.outcomes['passed'] / graded:.0f}% [{100 * low:.0f}-{100 * high:.0f}]"

    def pass_at(self, k: int) -> str:
        """pass@k averaged over the tasks graded at least k times; '-' when none was.

        Tasks with fewer graded runs (an infrastructure error took one) are
        left out, and the cell says how many tasks it stands for.
        """
        values = [pass_at_k(n, c, k) for n, c in self.per_task.values() if n >= k]
        if not values:
            return "-"
        short = f" ({len(values)} of {len(self.per_task)} tasks)" if len(values) < len(self.per_task) else ""
        return f"{100 * sum(values) / len(values):.0f}%{short}"


def wilson_interval(passed: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95 % by default); sound for small counts and 0 or 100 %."""
    if total <= 0:
        return (0.0, 1.0)
    p = passed / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k trials drawn from n (c of them passed) passed: 1 - C(n-c,k)/C(n,k)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs at least {k} trials, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class ScoreTable:
    """Outcomes per agent x model x difficulty x mode, fed from reports (works under xdist)."""

    def __init__(self, trials: int = 1) -> None:
        self.rows: dict[tuple[str, str, int, str], Tally] = defaultdict(Tally)
        self.seen: set[str] = set()
        # With several trials, pass@1 and pass@trials join the table.
        self.trials = trials

    def add(self, nodeid: str, outcome: str, user_properties: list[tuple[str, object]]) -> None:
        if nodeid in self.seen:
            return
        props = dict(user_properties)
        if PREFIX + "agent" not in props:
            return
        self.seen.add(nodeid)
        key = (
            str(props[PREFIX + "agent"]),
            str(props[PREFIX + "model"]),
            int(props[PREFIX + "difficulty"]),  # type: ignore[call-overload]
            str(props.get(PREFIX + "mode", "sandbox")),
        )
        self.rows[key].add(outcome, props)

    def cells(self) -> list[tuple[str, ...]]:
        """The table as rows of cells, the header first."""
        k = self.trials
        header = (
            "agent",
            "model",
            "diff",
            "mode",
            "runs",
            "passed",
            "failed",
            "error",
            "pass rate [95% CI]",
            *(("pass@1", f"pass@{k}") if k > 1 else ()),
            "build",
            "PoC",
            "function",
            "intent",
            "agent time",
            "tokens",
            "cost",
        )
        table: list[tuple[str, ...]] = [header]
        for (agent, model, level, mode), t in sorted(self.rows.items()):
            mean = f"{sum(t.agent_times) / len(t.agent_times):.1f}s" if t.agent_times else "-"
            tokens, cost = (str(t.tokens), f"${t.cost:.4f}") if t.metered else ("-", "-")
            table.append(
                (
                    agent,
                    model,
                    str(level),
                    mode,
                    str(t.runs),
                    str(t.outcomes["passed"]),
                    str(t.outcomes["failed"]),
                    str(t.outcomes["error"]),
                    t.pass_rate(),
                    *((t.pass_at(1), t.pass_at(k)) if k > 1 else ()),
                    t.rate("build"),
                    t.rate("poc"),
                    t.rate("function"),
                    t.rate("intent"),
                    mean,
                    tokens,
                    cost,
                )
            )
        return table

    def lines(self) -> list[str]:
        return columns([[for_terminal(cell) for cell in row] for row in self.cells()])

    def html(self) -> str:
        header, *rows = self.cells()
        cell = "padding:3px 10px;border:1px solid #d0d7de;text-align:left;white-space:nowrap"
        head = "".join(f'<th style="{cell};background:#f6f8fa">{html.escape(c)}</th>' for c in header)
        body = "".join(
            "<tr>" + "".join(f'<td style="{cell}">{html.escape(c)}</td>' for c in row) + "</tr>" for row in rows
        )
        return (
            f'<h2>SSEBench scores</h2><table id="ssebench-scores" style="border-collapse:collapse">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            "<p>Pass rates count graded runs (errors are infrastructure, not grades); the interval is Wilson's "
            "95 %. pass@k is averaged over tasks.</p>"
        )


# The runs --resume ran again that the summary names, with why.
RERUN_SHOWN = 10


class ReportHooks:
    """The plugin's reporting: properties and extras on each run's report, the score table at the end."""

    def __init__(self, results: Path, *, html: bool, show_table: bool, trials: int = 1) -> None:
        self.results = results
        self.html = html
        self.show_table = show_table
        self.table = ScoreTable(trials)
        # Items reported from finished runs (--resume) rather than run now; those run again, and why.
        self.resumed = 0
        self.rerun: list[tuple[str, str]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if self.html and RECORD in item.stash:
            final = call.when == "call" or (call.when == "setup" and report.failed)
            if final:
                report.extras = [*getattr(report, "extras", []), *html_extras(item.stash[RECORD])]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and report.failed:
            self.table.add(report.nodeid, "error", report.user_properties)
        elif report.when == "call":
            self.table.add(report.nodeid, report.outcome, report.user_properties)
            properties = dict(report.user_properties)
            if properties.get(PREFIX + "resumed") is True:
                self.resumed += 1
            elif isinstance(why := properties.get(PREFIX + "rerun"), str) and why:  # "" stands for None here
                self.rerun.append((report.nodeid, why))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.show_table or not self.table.rows:
            return
        terminalreporter.section("SSEBench scores")
        for line in self.table.lines():
            terminalreporter.line(line)
        if self.resumed or self.rerun:
            terminalreporter.line(
                f"resumed: {self.resumed} item(s) reported from finished runs, not run again; "
                f"{len(self.rerun)} run again"
            )
            for nodeid, why in self.rerun[:RERUN_SHOWN]:
                terminalreporter.line(f"  ran again: {nodeid}: {why}")
            if len(self.rerun) > RERUN_SHOWN:
                terminalreporter.line(f"  ... and {len(self.rerun) - RERUN_SHOWN} more")
        terminalreporter.line(f"results: {self.results}")

    # pytest-html's hooks; pluggy checks only the hooks that exist, so these
    # are validated when pytest-html is installed and unused otherwise.
    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(2, '<th class="sortable" data-column-type="vulnerability">Vulnerability</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        cells.insert(2, f"<td>{vulnerability_cell(report.user_properties)}</td>")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.show_table and self.table.rows:
            postfix.append(self.table.html())
