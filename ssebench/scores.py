"""The score table: outcomes per agent x model x difficulty x mode, with pass rates, intervals and pass@k.

One home for the numbers every place shows: the plugin's terminal summary
and report.html (fed from each run's junit-xml properties, so it works under
xdist), `ssebench view` and `ssebench results export` (fed from the runs of a
results directory, `ssebench.runs`). A run counts the same from either side.
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sse.result import SIGNALS, PatchResult, RuntimeResult, typed

from ssebench.logs import columns, for_terminal

# The prefix of the run's junit-xml properties (`pytest_ssebench.report`), which the plugin's table is fed from.
PREFIX = "ssebench."

# A row's key: agent, model, difficulty, mode.
RowKey = tuple[str, str, int, str]


@dataclass(frozen=True)
class Scored:
    """One run as the score table counts it: who ran, its outcome (passed, failed, error), its checks, its use."""

    agent: str
    model: str
    difficulty: int
    mode: str
    task: str
    outcome: str
    patch: PatchResult = field(default_factory=PatchResult)
    agent_time: float | None = None
    # The gateway's tokens (in + out) and cost; None for a run without a model.
    tokens: int | None = None
    cost: float | None = None
    # The shortcut signals that fired in the run (`sse.result.Signals.fired`): counted, never a grade.
    signals: tuple[str, ...] = ()
    # Its task is quarantined in dataset.yaml (its results are noise): the table leaves it out and says so.
    quarantined: bool = False

    @property
    def key(self) -> RowKey:
        return (self.agent, self.model, self.difficulty, self.mode)

    @classmethod
    def from_properties(cls, outcome: str, props: Mapping[str, object]) -> Scored | None:
        """A run from its junit-xml properties (`PREFIX`ed); None for a test that is not a run."""
        if PREFIX + "agent" not in props:
            return None
        # The run's properties read back as the record's models: a field renamed there is renamed here.
        given = {key.removeprefix(PREFIX): value for key, value in props.items() if key.startswith(PREFIX)}
        runtime = RuntimeResult.of(given)
        tokens = [props.get(PREFIX + k) for k in ("usage_prompt_tokens", "usage_completion_tokens")]
        counted = [t for t in tokens if isinstance(t, int) and not isinstance(t, bool)]
        cost = props.get(PREFIX + "usage_cost")
        difficulty = props[PREFIX + "difficulty"]
        return cls(
            agent=str(props[PREFIX + "agent"]),
            model=str(props[PREFIX + "model"]),
            difficulty=int(difficulty) if isinstance(difficulty, int | str) else 0,
            mode=str(props.get(PREFIX + "mode", "sandbox")),
            task=str(props.get(PREFIX + "task")),
            outcome=outcome,
            patch=typed(PatchResult, given),
            agent_time=None if runtime.agent_duration is None else float(runtime.agent_duration),
            tokens=sum(counted) if counted else None,
            cost=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
            signals=_fired(props.get(PREFIX + "signal.fired")),
            quarantined=bool(props.get(PREFIX + "quarantined")),
        )


def _fired(value: object) -> tuple[str, ...]:
    """The signals a run's `signal.fired` property names (known names only)."""
    named = {name.strip() for name in value.split(",")} if isinstance(value, str) else set()
    return tuple(name for name in SIGNALS if name in named)


# The signals table's column of each signal (`sse.result.SIGNALS`; docs/signals.md).
SIGNAL_COLUMNS = {
    "refused_calls": "refused calls",
    "refused_requests": "refused requests",
    "changed_tests": "tests",
    "changed_harness": "harness",
    "changed_build": "build files",
    "protected_files": "set aside",
    "hiding_code": "hiding code",
    "near_reference": "near ref",
    "outside_reference_files": "outside ref",
}


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
    # How many runs fired each shortcut signal.
    signals: Counter[str] = field(default_factory=Counter)

    def add(self, run: Scored) -> None:
        self.runs += 1
        self.outcomes[run.outcome] += 1
        self.signals.update(set(run.signals))
        if run.outcome in ("passed", "failed"):
            counts = self.per_task[f"{run.task}/{run.mode}"]
            counts[0] += 1
            counts[1] += run.outcome == "passed"
        patch = run.patch
        for check, value in (
            ("build", patch.build_success),
            ("function", patch.func_test_success),
            ("intent", patch.intent_test_success),
        ):
            if value is not None:
                self.checks[check].append(value)
        if patch.pov_total and patch.pov_passed is not None:
            self.checks["poc"].append(patch.pov_passed == patch.pov_total)
        if patch.variants_total and patch.variants_passed is not None:
            self.checks["variants"].append(patch.variants_passed == patch.variants_total)
        if run.agent_time is not None:
            self.agent_times.append(run.agent_time)
        if run.tokens is not None:
            self.tokens += run.tokens
            self.metered = True
        if run.cost is not None:
            self.cost += run.cost

    @property
    def graded(self) -> int:
        """Runs with a grade (errors are infrastructure, not grades)."""
        return self.outcomes["passed"] + self.outcomes["failed"]

    def check_rate(self, check: str) -> float | None:
        values = self.checks.get(check) or []
        return sum(values) / len(values) if values else None

    def rate(self, check: str) -> str:
        value = self.check_rate(check)
        return "-" if value is None else f"{100 * value:.0f}%"

    def pass_rate_of(self) -> tuple[float, float, float] | None:
        """Passed over graded runs, with its 95 % Wilson interval (low, high); None when nothing was graded."""
        if not self.graded:
            return None
        low, high = wilson_interval(self.outcomes["passed"], self.graded)
        return (self.outcomes["passed"] / self.graded, low, high)

    def pass_rate(self) -> str:
        """Passed over graded runs (errors are not graded), with its 95 % Wilson interval."""
        rate = self.pass_rate_of()
        if rate is None:
            return "-"
        value, low, high = rate
        return f"{100 * value:.0f}% [{100 * low:.0f}-{100 * high:.0f}]"

    def pass_at_of(self, k: int) -> tuple[float, int, int] | None:
        """pass@k averaged over the tasks graded at least k times, how many those are, and how many tasks
        there are; None when none was graded k times."""
        values = [pass_at_k(n, c, k) for n, c in self.per_task.values() if n >= k]
        if not values:
            return None
        return (sum(values) / len(values), len(values), len(self.per_task))

    def pass_at(self, k: int) -> str:
        """pass@k averaged over the tasks graded at least k times; '-' when none was.

        Tasks with fewer graded runs (an infrastructure error took one) are
        left out, and the cell says how many tasks it stands for.
        """
        got = self.pass_at_of(k)
        if got is None:
            return "-"
        value, counted, tasks = got
        short = f" ({counted} of {tasks} tasks)" if counted < tasks else ""
        return f"{100 * value:.0f}%{short}"

    def mean_agent_time(self) -> float | None:
        return sum(self.agent_times) / len(self.agent_times) if self.agent_times else None


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


# The columns of ScoreTable.records() (`ssebench results export --table scores`), described; docs/viewer.md has
# this table (tested). Rates are fractions from 0 to 1, empty (null) when nothing counted.
SCORE_COLUMNS: dict[str, str] = {
    "agent": "The agent.",
    "model": "The model.",
    "difficulty": "The difficulty level.",
    "mode": "sandbox or sidecar.",
    "runs": "Runs counted.",
    "passed": "Runs graded passed.",
    "failed": "Runs graded failed.",
    "error": "Runs that ended in an error (nothing graded; left out of the rates).",
    "pass_rate": "passed / (passed + failed).",
    "pass_rate_low": "The low end of the pass rate's 95 % Wilson interval.",
    "pass_rate_high": "The high end of the pass rate's 95 % Wilson interval.",
    "pass_at_1": "pass@1 averaged over tasks (the unbiased estimate from each task's graded trials).",
    "pass_at_K": "With K trials (the most any run had, when above 1): pass@K over the tasks graded K times.",
    "build_rate": "Share of runs whose patched tree built, of those where the build ran.",
    "poc_rate": "Share of runs that fixed every proof of concept, of those where they ran.",
    "variants_rate": "Share of runs that fixed every hidden variant input, of those where variants ran.",
    "function_rate": "Share of runs whose function tests passed, of those where they ran.",
    "intent_rate": "Share of runs whose intent test passed, of those where it ran.",
    "mean_agent_seconds": "The agent's mean time.",
    "tokens": "Input and output tokens, the gateway's count; empty for runs without a model.",
    "cost_usd": "What the calls cost in US dollars; empty for runs without a model.",
    **{
        f"signal_{name}": f"Runs in which the shortcut signal {name} fired (docs/signals.md); never a grade."
        for name in SIGNALS
    },
}


class ScoreTable:
    """Outcomes per agent x model x difficulty x mode, fed run by run (from reports, or from a results directory)."""

    def __init__(self, trials: int = 1) -> None:
        self.rows: dict[RowKey, Tally] = defaultdict(Tally)
        self.seen: set[str] = set()
        # With several trials, pass@1 and pass@trials join the table.
        self.trials = trials
        # Runs of quarantined tasks, not counted in any row.
        self.left_out = 0

    def add(self, nodeid: str, outcome: str, user_properties: list[tuple[str, object]]) -> None:
        """Count a test's report once (a run's report may come twice: setup and call)."""
        if nodeid in self.seen:
            return
        run = Scored.from_properties(outcome, dict(user_properties))
        if run is None:
            return
        self.seen.add(nodeid)
        self.add_run(run)

    def add_run(self, run: Scored) -> None:
        if run.quarantined:
            self.left_out += 1
            return
        self.rows[run.key].add(run)

    def left_out_line(self) -> str | None:
        """What the table says under it of the runs it left out (of quarantined tasks); None when none."""
        return (
            f"{self.left_out} run(s) of quarantined tasks left out (dataset.yaml: quarantine)"
            if self.left_out
            else None
        )

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
            "variants",
            "function",
            "intent",
            "agent time",
            "tokens",
            "cost",
        )
        table: list[tuple[str, ...]] = [header]
        for (agent, model, level, mode), t in sorted(self.rows.items()):
            mean = t.mean_agent_time()
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
                    t.rate("variants"),
                    t.rate("function"),
                    t.rate("intent"),
                    "-" if mean is None else f"{mean:.1f}s",
                    tokens,
                    cost,
                )
            )
        return table

    def records(self) -> list[dict[str, Any]]:
        """The table as numbers, one mapping a row (`ssebench results export`'s score table; docs/viewer.md)."""
        out = []
        for (agent, model, level, mode), t in sorted(self.rows.items()):
            rate = t.pass_rate_of()
            row: dict[str, Any] = {
                "agent": agent,
                "model": model,
                "difficulty": level,
                "mode": mode,
                "runs": t.runs,
                "passed": t.outcomes["passed"],
                "failed": t.outcomes["failed"],
                "error": t.outcomes["error"],
                "pass_rate": None if rate is None else round(rate[0], 6),
                "pass_rate_low": None if rate is None else round(rate[1], 6),
                "pass_rate_high": None if rate is None else round(rate[2], 6),
            }
            for k in sorted({1, self.trials}):
                got = t.pass_at_of(k)
                row[f"pass_at_{k}"] = None if got is None else round(got[0], 6)
            for check in ("build", "poc", "variants", "function", "intent"):
                value = t.check_rate(check)
                row[f"{check}_rate"] = None if value is None else round(value, 6)
            mean = t.mean_agent_time()
            row["mean_agent_seconds"] = None if mean is None else round(mean, 3)
            row["tokens"] = t.tokens if t.metered else None
            row["cost_usd"] = round(t.cost, 6) if t.metered else None
            row.update({f"signal_{name}": t.signals[name] for name in SIGNALS})
            out.append(row)
        return out

    def signal_cells(self) -> list[tuple[str, ...]]:
        """The signals table as rows of cells, the header first: per row of the score table, how many runs
        fired each shortcut signal (never a grade; docs/signals.md)."""
        table: list[tuple[str, ...]] = [("agent", "model", "diff", "mode", "runs", *SIGNAL_COLUMNS.values())]
        for (agent, model, level, mode), t in sorted(self.rows.items()):
            table.append((agent, model, str(level), mode, str(t.runs), *(str(t.signals[name]) for name in SIGNALS)))
        return table

    def signal_lines(self) -> list[str]:
        return columns([[for_terminal(cell) for cell in row] for row in self.signal_cells()])

    def lines(self) -> list[str]:
        return columns([[for_terminal(cell) for cell in row] for row in self.cells()])

    def html(self) -> str:
        return (
            f"<h2>SSEBench scores</h2>{_html_table('ssebench-scores', self.cells())}"
            "<p>Pass rates count graded runs (errors are infrastructure, not grades); the interval is Wilson's "
            "95 %. pass@k is averaged over tasks."
            + (f" {html.escape(note)}." if (note := self.left_out_line()) else "")
            + "</p>"
            f"<h3>Shortcut signals</h3>{_html_table('ssebench-signals', self.signal_cells())}"
            "<p>Runs in which each shortcut signal fired; a signal is never a grade (docs/signals.md).</p>"
        )


def _html_table(table_id: str, cells: list[tuple[str, ...]]) -> str:
    header, *rows = cells
    cell = "padding:3px 10px;border:1px solid #d0d7de;text-align:left;white-space:nowrap"
    head = "".join(f'<th style="{cell};background:#f6f8fa">{html.escape(c)}</th>' for c in header)
    body = "".join("<tr>" + "".join(f'<td style="{cell}">{html.escape(c)}</td>' for c in row) + "</tr>" for row in rows)
    return (
        f'<table id="{table_id}" style="border-collapse:collapse"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )
