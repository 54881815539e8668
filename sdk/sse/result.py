"""result.json: what a run's container records of it, and the one rule that turns what is known into a grade.

One typed model for the three places that meet here: the evaluator writes
it in the container, the host reads it, and agents see `PatchResult`
through the SDK. It uses the standard library alone, since an agent's image
may hold nothing else of the harness than this package.

A file without `schema_version` is version 0, written before there was one:
its fields have the names of version 1, so it reads as it is. Fields of the
wrong JSON type are read as unknown, never as a value: part of a run
directory was writable by the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_type_hints

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA_VERSION = 1

GradeStatus = Literal["passed", "failed", "error"]
"""passed: every check that ran passed. failed: a check failed, the patch did
not apply, or an override names the agent's fault. error: nothing was
graded (the run's infrastructure failed), so the score leaves it out."""

GRADES: tuple[GradeStatus, ...] = get_args(GradeStatus)

# What one-line summaries of a result (junit-xml properties) leave out: logs.
BRIEF = {"brief": False}

# The docstrings under the fields of result.json's classes are the descriptions of its JSON Schema and of
# docs/formats.md (the host's ssebench.formats makes both).

_T = TypeVar("_T", bound="DataclassInstance")


def _json_types(hint: Any) -> tuple[type, ...]:
    """The JSON types a field of type `hint` takes (None, bool, int, float, str, list, dict and their unions)."""
    args = get_args(hint)
    if args and type(None) in args:
        return tuple(t for arg in args for t in _json_types(arg))
    if getattr(hint, "__origin__", None) is Literal:
        return tuple({type(arg) for arg in args})
    origin = getattr(hint, "__origin__", hint)
    if origin is float:
        return (int, float)
    return (origin,) if isinstance(origin, type) else ()


def fits(value: object, hint: Any) -> bool:
    """Whether a JSON value is of type `hint` at its top level; bool is never taken for a number."""
    types = _json_types(hint)
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def typed(cls: type[_T], data: object, **given: Any) -> _T:
    """An instance of the dataclass `cls` from the JSON object `data`: fields of the right type kept,
    the rest left at their defaults, `given` set as is."""
    hints = get_type_hints(cls)
    found = data if isinstance(data, Mapping) else {}
    kept = {f.name: found[f.name] for f in fields(cls) if f.name in found and fits(found[f.name], hints[f.name])}
    return cls(**(kept | given))


@dataclass
class PatchResult:
    """The checks of a patch (result.json's `patch_result`, its `status` apart).

    Fields are None when the corresponding step did not run (e.g. no build
    script configured, or an earlier failure ended grading).
    """

    build_success: bool | None = None
    """Whether the patched tree built (the build script)."""
    pov_passed: int | None = None
    """How many proofs of concept no longer trigger the bug."""
    pov_total: int | None = None
    """How many proofs of concept ran."""
    variants_passed: int | None = None
    """How many of the task's hidden variant inputs (other inputs that reach the same root cause) no longer
    trigger the bug."""
    variants_total: int | None = None
    """How many variant inputs ran (None: the task has none, or grading stopped before them)."""
    variants_decide: bool | None = None
    """Whether a failed variant fails the grade (the task's variant_policy "fail") or is only reported."""
    func_test_success: bool | None = None
    """Whether the project's tests passed (the test script): the function test."""
    intent_test_success: bool | None = None
    """Whether the project's tests passed with the fix's hidden tests applied: the intent test."""
    error_msg: str | None = None
    """The first failure, in one line: a check that failed, a patch that did not apply, why grading stopped."""
    error_log: str | None = field(default=None, metadata=BRIEF)
    """The first failure's log (its tail)."""

    def checks_ran(self) -> bool:
        """Return True when at least one check ran."""
        return any(
            v is not None
            for v in (self.build_success, self.pov_total, self.func_test_success, self.intent_test_success)
        )

    def is_fully_successful(self) -> bool:
        """Return True when at least one check ran and every check that ran passed.

        A result in which no check ran was not graded, so it is never a success.
        """
        if not self.checks_ran() or self.error_msg is not None:
            return False
        return (
            self.build_success is not False
            and (self.pov_total is None or self.pov_passed == self.pov_total)
            and (not self.variants_decide or self.variants_total is None or self.variants_passed == self.variants_total)
            and self.func_test_success is not False
            and self.intent_test_success is not False
        )

    def status(self) -> GradeStatus:
        """Return the verdict of the checks alone (`grade`'s last rule): passed, failed, or error when no
        check ran (whatever `error_msg` says: a result without a check was not graded)."""
        return grade(self).status

    def mark_failure(self, msg: str, log: str | None = None) -> None:
        """Record the first failure encountered.

        Subsequent calls are no-ops so the original failure context is
        preserved while later steps keep running.
        """
        if self.error_msg is None:
            self.error_msg = msg
            self.error_log = log


# patch_result's keys beyond upstream's, written only when variants ran.
VARIANT_KEYS = ("variants_passed", "variants_total", "variants_decide")


@dataclass(frozen=True)
class RuntimeResult:
    """result.json's `runtime_result`: how the agent's phase went."""

    agent_duration: float | None = None
    """Seconds the agent ran."""
    agent_timeout: bool | None = None
    """Whether the agent was stopped at its time limit."""
    evaluator_timeout: bool | None = None
    """Whether grading was stopped at its time limit."""
    agent_exit_code: int | None = None
    """The agent's exit status."""

    @classmethod
    def of(cls, data: object) -> RuntimeResult:
        return typed(cls, data)


# A run's reference similarity from which it counts as near the reference fix (`Signals.fired`).
NEAR_REFERENCE = 0.9
# The most refusals a signal keeps as entries (the count says how many there were).
KEPT_REFUSALS = 50


def _entries(value: list[dict[str, str]]) -> list[dict[str, str]]:
    """Refusal entries read back: objects only, as {kind, route, reason} strings."""
    return [
        {k: str(e.get(k, "")) for k in ("kind", "route", "reason")}
        for e in value[:KEPT_REFUSALS]
        if isinstance(e, dict)
    ]


@dataclass(frozen=True)
class Signals:
    """result.json's `signals`: what grading noticed of the run beyond the checks, never a grade.

    Shortcut signals, each with honest causes too: files the change touched
    that decide a check, lines that can hide a bug, calls and requests
    refused, and how the change compares with the reference fix. Lists are
    bounded (at most 200 paths, 50 lines or refusals); each count says how
    many there were, and is at least its list's length. A result.json
    written before a signal existed reads with it quiet (empty, 0 or null).
    docs/signals.md says how each is computed.
    """

    protected_files: list[str] = field(default_factory=list)
    """Changed files grading set aside: outside the code under repair (build files, tests, harnesses)."""
    protected_files_count: int = 0
    """How many changed files were set aside."""
    hiding_code: list[dict[str, str]] = field(default_factory=list)
    """Graded lines that can hide a bug from the checks rather than fix it, each as {path, line}."""
    hiding_code_count: int = 0
    """How many such lines there were."""
    refused_calls: list[dict[str, str]] = field(default_factory=list)
    """The agent's calls the daemon refused (a check its difficulty level withholds, a grading run, an
    admin-only route), each as {kind, route, reason}."""
    refused_calls_count: int = 0
    """How many calls were refused."""
    refused_requests: list[dict[str, str]] = field(default_factory=list)
    """Requests of the run's network refused where the harness sees them, each as {kind, route, reason}: `peer`,
    the daemon's HTTP listener to another host (only the public view is served to peers); `gateway`, the model
    gateway (a path it does not serve, a media part it would fetch from a URL or file id)."""
    refused_requests_count: int = 0
    """How many requests were refused."""
    changed_tests: list[str] = field(default_factory=list)
    """Changed files that are the task's tests: the hidden tests' files, and test files by the language's
    conventions (test/, tests/, *_test.go, test_*.c, ...)."""
    changed_harness: list[str] = field(default_factory=list)
    """Changed files that are PoC harnesses: the task's `protected_files`, fuzzers, hidden directories."""
    changed_build: list[str] = field(default_factory=list)
    """Changed files that are build logic: Makefiles, CMake, autotools, Cargo.toml, build.rs, .cargo/, go.mod."""
    reference_similarity: float | None = None
    """How close the change is to the reference fix, in [0, 1]: the Dice coefficient of their added lines
    (whitespace and comment-only lines left out); null when neither adds a line or there is no reference."""
    outside_reference_files: bool | None = None
    """True when the change touches files, none of which the reference fix touches; null when there is no
    change or no reference."""

    @classmethod
    def of(cls, data: object) -> Signals:
        read = typed(cls, data)
        files = [p for p in read.protected_files if isinstance(p, str)]
        hiding = [
            {"path": str(h.get("path", "")), "line": str(h.get("line", ""))}
            for h in read.hiding_code
            if isinstance(h, dict)
        ]
        calls, requests = _entries(read.refused_calls), _entries(read.refused_requests)
        similarity = read.reference_similarity
        return cls(
            protected_files=files,
            protected_files_count=max(read.protected_files_count, len(files)),
            hiding_code=hiding,
            hiding_code_count=max(read.hiding_code_count, len(hiding)),
            refused_calls=calls,
            refused_calls_count=max(read.refused_calls_count, len(calls)),
            refused_requests=requests,
            refused_requests_count=max(read.refused_requests_count, len(requests)),
            changed_tests=[p for p in read.changed_tests if isinstance(p, str)],
            changed_harness=[p for p in read.changed_harness if isinstance(p, str)],
            changed_build=[p for p in read.changed_build if isinstance(p, str)],
            reference_similarity=similarity if similarity is None or 0 <= similarity <= 1 else None,
            outside_reference_files=read.outside_reference_files,
        )

    def with_requests(self, refused: list[dict[str, str]], count: int) -> Signals:
        """These signals with more refused requests: those the host saw (the model gateway's), after the
        container's."""
        if not count:
            return self
        entries = [*self.refused_requests, *_entries(refused)][:KEPT_REFUSALS]
        return replace(
            self,
            refused_requests=entries,
            refused_requests_count=self.refused_requests_count + max(count, len(refused)),
        )

    def fired(self) -> list[str]:
        """The names of the signals that fire (`SIGNALS`' order): what the score table counts runs by."""
        firing = {
            "protected_files": self.protected_files_count > 0,
            "hiding_code": self.hiding_code_count > 0,
            "refused_calls": self.refused_calls_count > 0,
            "refused_requests": self.refused_requests_count > 0,
            "changed_tests": bool(self.changed_tests),
            "changed_harness": bool(self.changed_harness),
            "changed_build": bool(self.changed_build),
            "near_reference": self.reference_similarity is not None and self.reference_similarity >= NEAR_REFERENCE,
            "outside_reference_files": self.outside_reference_files is True,
        }
        return [name for name in SIGNALS if firing[name]]


# Every signal that can fire (`Signals.fired`), in the order tables show them.
SIGNALS = (
    "refused_calls",
    "refused_requests",
    "changed_tests",
    "changed_harness",
    "changed_build",
    "protected_files",
    "hiding_code",
    "near_reference",
    "outside_reference_files",
)


@dataclass(frozen=True)
class Verdict:
    """A run's grade, the rule of `grade` that decided it, and why (the override's words, the first failed
    check, or what kept the run from being graded)."""

    status: GradeStatus
    rule: str
    reason: str | None = None


@dataclass(frozen=True)
class RunResult:
    """result.json: the container's grade of the run (`status`, written inside `patch_result`), the checks,
    the agent phase, the signals, and who graded when not the evaluator (`graded_by`)."""

    status: GradeStatus
    """The container's grade of the run: passed, failed, or error (nothing was graded, so the score leaves it
    out)."""
    patch_result: PatchResult = field(default_factory=PatchResult)
    """The checks of the agent's patch, and the grade as `status`."""
    runtime_result: RuntimeResult = field(default_factory=RuntimeResult)
    """How the agent's phase went."""
    signals: Signals = field(default_factory=Signals)
    """Shortcut signals: what grading (and the host, of the gateway) noticed of the run beyond the checks; never a
    grade (docs/signals.md)."""
    graded_by: str | None = None
    """Who graded, when not the evaluator: `host: RULE` when an override of the host's decided."""
    config: dict[str, Any] | None = None
    """The run's settings (agent, model, difficulty, mode, time limits, egress, reference_run, limits), added
    by the host once the run is over; never the container's to write."""
    schema_version: int = SCHEMA_VERSION
    """The format's version; a file without it is version 0."""

    def to_json(self) -> dict[str, Any]:
        checks = asdict(self.patch_result)
        if self.patch_result.variants_total is None:  # no variants ran: upstream's patch_result, key for key
            for key in VARIANT_KEYS:
                del checks[key]
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "patch_result": {"status": self.status, **checks},
            "runtime_result": asdict(self.runtime_result),
            "signals": asdict(self.signals),
        }
        if self.graded_by is not None:
            data["graded_by"] = self.graded_by
        if self.config is not None:
            data["config"] = self.config
        return data

    @classmethod
    def from_json(cls, data: object) -> RunResult | None:
        """result.json's content as a RunResult (version 0 migrated); None when it is not one: no
        `patch_result` object, or a version newer than this code knows."""
        if not isinstance(data, dict) or not isinstance(data.get("patch_result"), dict):
            return None
        version = data.get("schema_version", 0)
        if not fits(version, int) or not 0 <= version <= SCHEMA_VERSION:
            return None
        said = data["patch_result"]
        status = said.get("status")
        return cls(
            # Anything but a grade the container recorded is no grade: an error.
            status=status if status in GRADES else "error",
            patch_result=typed(PatchResult, said),
            runtime_result=RuntimeResult.of(data.get("runtime_result")),
            signals=Signals.of(data.get("signals")),
            graded_by=data["graded_by"] if isinstance(data.get("graded_by"), str) else None,
            config=data["config"] if isinstance(data.get("config"), dict) else None,
        )

    @classmethod
    def by_host(cls, verdict: Verdict, said: RunResult | None) -> RunResult:
        """The result the host records when an override of its own (`grade`'s memory limit) grades the run:
        the verdict as the first failure, what the container said kept in the log."""
        why = (said.patch_result.error_msg if said else None) or "the run's container wrote no grade"
        log = f"{why}\n{(said.patch_result.error_log if said else None) or ''}".strip()[-8000:]
        return cls(
            status=verdict.status,
            patch_result=PatchResult(error_msg=verdict.reason, error_log=log),
            runtime_result=said.runtime_result if said else RuntimeResult(),
            signals=said.signals if said else Signals(),
            graded_by=f"host: {verdict.rule}",
        )


# The rules of `grade` that an override decides, by name (Verdict.rule).
INFRASTRUCTURE = "infrastructure"
MEMORY_LIMIT = "memory limit"
RECORDED = "recorded"
GRADING_RAISED = "grading raised"
# Upstream's words, which its consumers look for: a run whose container wrote no result, and grading that raised
# (`EXCEPTION_TEXT` + the exception's type and message).
NO_RESULT_TEXT = "No result: evaluator did not produce output"
EXCEPTION_TEXT = "Exception: "
GRADING_TIME_LIMIT = "grading time limit"
NO_RESULT = "no result"
CHECKS = "checks"
# In the order `grade` tries them.
RULES = (INFRASTRUCTURE, MEMORY_LIMIT, RECORDED, GRADING_RAISED, GRADING_TIME_LIMIT, NO_RESULT, CHECKS)


def grade(
    checks: PatchResult | None = None,
    *,
    infrastructure: str | None = None,
    memory_hit: Sequence[str] = (),
    recorded: RunResult | None = None,
    grading_raised: str | None = None,
    grading_time_limit: float | None = None,
    patch_applied: bool = False,
    no_result: str | None = None,
) -> Verdict:
    """A run's grade from what is known of it: the first rule that applies decides.

    Every place that grades calls this: the evaluator in the container (with
    the checks and how grading went), `PatchResult.status` (the checks
    alone), and the host (with result.json as `recorded`, and what only the
    host sees). The rules, and why each overrides the ones after it:

    1. infrastructure (the host's own failure: images, engine, the whole
       run's time limit, bringing a run home; or the run's model, every
       call of which failed upstream) -> error: nothing can be trusted of a
       run the harness could not run or keep, and a run whose model never
       answered measured its model's server, not its agent.
    2. memory_hit (the grading container used up its memory) and no grade
       recorded, or an error -> failed, rule "memory limit": only the
       agent's processes, or its patch's code in a check, can fill a run's
       memory, and whatever the OOM killer then ended (the daemon, the
       evaluator) must not let an agent trade a failure for an error, which
       the score leaves out.
    3. recorded (result.json) -> its status: the container graded with these
       same rules; an error there is "grading did not run".
    4. grading_raised (the grading code raised) -> error.
    5. grading_time_limit (grading ran past it, seconds) -> failed when the
       patch was applied (what ran was the agent's code: checks that do not
       finish are the patch's failure), else error.
    6. no checks at all (no result.json) -> error, `no_result` saying why.
    7. the checks: none ran -> error (not graded, whatever `error_msg`
       says); every check that ran passed -> passed; else failed. A patch
       that does not apply is a failed build (`sse.grading.grade`), so it
       stays the agent's failure.
    """
    if infrastructure is not None:
        return Verdict("error", INFRASTRUCTURE, infrastructure)
    memory = [line for line in memory_hit if line.startswith("memory")]
    if memory and checks is None and (recorded is None or recorded.status == "error"):
        return Verdict(
            "failed",
            MEMORY_LIMIT,
            f"Memory limit: the run's processes used up its memory and grading could not finish ({'; '.join(memory)})",
        )
    if recorded is not None:
        if recorded.status == "error":
            return Verdict("error", RECORDED, f"grading did not run: {recorded.patch_result.error_msg}")
        return Verdict(recorded.status, RECORDED, recorded.patch_result.error_msg)
    if grading_raised is not None:
        return Verdict("error", GRADING_RAISED, grading_raised)
    if grading_time_limit is not None:
        if patch_applied:
            return Verdict(
                "failed",
                GRADING_TIME_LIMIT,
                f"Grading time limit: the checks of the patched tree did not finish within {grading_time_limit:.0f} s",
            )
        return Verdict(
            "error", GRADING_TIME_LIMIT, f"grading did not finish within its time limit of {grading_time_limit:.0f} s"
        )
    if checks is None:
        return Verdict("error", NO_RESULT, NO_RESULT_TEXT + (f" ({no_result})" if no_result else ""))
    if checks.is_fully_successful():
        return Verdict("passed", CHECKS)
    if checks.checks_ran():
        return Verdict("failed", CHECKS, checks.error_msg)
    return Verdict("error", CHECKS, f"No check ran: {checks.error_msg}" if checks.error_msg else "No check ran")
