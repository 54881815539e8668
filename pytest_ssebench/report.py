"""What a run adds to pytest's reports: junit-xml properties, pytest-html extras, the score table.

`ReportHooks` is the plugin's reporting half: it attaches each run's grade
to its report, feeds the score table from reports (so it works under xdist,
on the controller) and prints the table in the terminal and in report.html;
the table itself is `ssebench.scores`' (the viewer and the export count runs with it too).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from sse.dialog import parse
from sse.result import PatchResult, Signals

from ssebench.record import RunRecord
from ssebench.result import read_safely
from ssebench.runspec import RunConfig
from ssebench.scores import PREFIX, ScoreTable
from ssebench.transcript import render_transcript

# The most of a dialog the report reads to render it (the file itself is attached, tail first).
DIALOG_BYTES = 8 << 20

# Where a run item keeps its record (set by the item, read here for the HTML report).
RECORD = pytest.StashKey[RunRecord]()


def _prefixed(props: list[tuple[str, object]]) -> list[tuple[str, object]]:
    return [(PREFIX + key, "" if value is None else value) for key, value in props]


def _identity(config: RunConfig) -> list[tuple[str, object]]:
    task = config.task
    # Only a quarantined task's runs say it: the score table leaves them out (ssebench.scores).
    quarantined = [("quarantined", task.quarantined)] if task.quarantined else []
    return [
        *quarantined,
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


def variants_text(patch: PatchResult) -> str:
    """The variants check in words: how many of the task's hidden variant inputs the patch fixed, and
    whether they decide the grade."""
    if patch.variants_total is None:
        return "— not run"
    return f"{patch.variants_passed}/{patch.variants_total} fixed" + (
        "" if patch.variants_decide else " (reported only)"
    )


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
        ("variants", html.escape(variants_text(patch))),
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
        if not self.show_table or not (self.table.rows or self.table.left_out):
            return
        terminalreporter.section("SSEBench scores")
        for line in self.table.lines():
            terminalreporter.line(line)
        if note := self.table.left_out_line():
            terminalreporter.line(note)
        terminalreporter.line("shortcut signals (runs in which each fired; never a grade, docs/signals.md):")
        for line in self.table.signal_lines():
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
    def pytest_html_results_table_row(self, report: pytest.TestReport | pytest.CollectReport, cells: list[str]) -> None:
        # A collection that failed is a row too, with no properties: an empty cell.
        cells.insert(2, f"<td>{vulnerability_cell(getattr(report, 'user_properties', []))}</td>")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.show_table and (self.table.rows or self.table.left_out):
            postfix.append(self.table.html())
