"""The evaluator: grade the agent's patch over the admin socket and write result.json.

Started by the entrypoint as root with the agent, with SSE_DAEMON_SOCKET
pointing at the admin socket: it loads what grading needs, then waits for
the agent phase's figures, one JSON line on its stdin (a pipe of root's),
and grades; a pipe closed with nothing means no grading. Grading has a time limit; what a timeout or an
exception makes of the grade is `sse.result.grade`'s to say. result.json (`sse.result.RunResult`) is
written atomically (temp file and rename) into the root-only results directory.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import traceback
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from sse.result import EXCEPTION_TEXT, PatchResult, RunResult, RuntimeResult, Signals

from ssebench.runtime.contract import PREDICTION_NOT_MOUNTED, AgentEnd, RuntimeSettings, SettingsError, load_settings
from ssebench.runtime.files import read_no_follow, write_atomic
from ssebench.runtime.signals import patch_paths, similarity


def grade_with_limit(limit: float, results: Path | None = None) -> tuple[RunResult, bool]:
    """(the container's result, its agent phase and signals apart; timed_out). Grading runs in a thread so
    the limit can end the wait; `sse.result.grade` decides what a timeout or an exception makes of it."""
    from sse.result import grade

    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            from sse.grading import grade as run_checks

            outcome["checks"] = run_checks()
        except BaseException as exc:  # everything here is an infrastructure error
            outcome["raised"] = f"{EXCEPTION_TEXT}{type(exc).__name__}: {exc}"
            outcome["log"] = traceback.format_exc()[-8000:]

    thread = threading.Thread(target=work, name="grading", daemon=True)
    thread.start()
    thread.join(limit)
    timed_out = thread.is_alive()
    # Once the patch is applied (final.patch written), what runs is the agent's code.
    applied = results is not None and (results / "final.patch").is_file()
    checks: PatchResult | None = None if timed_out else outcome.get("checks")
    verdict = grade(
        checks,
        grading_raised=None if timed_out else outcome.get("raised"),
        grading_time_limit=limit if timed_out else None,
        patch_applied=applied,
    )
    if checks is None:  # an override graded: its words are the first failure
        checks = PatchResult(error_msg=verdict.reason, error_log=None if timed_out else outcome.get("log"))
    return RunResult(status=verdict.status, patch_result=checks), timed_out


# The most paths a signal names (the count says how many there were).
SIGNAL_PATHS = 200


# Lines a patch adds that can hide a bug from every check rather than fix it: code that runs before main (a
# constructor, an .init_array entry, a Go init), that ends the process or takes its crash (an exit in an init,
# a panic hook, a signal handler, the sanitizer's own hooks), or a macro that renames main. Signals for a
# reader, never a grade: each also has honest uses.
HIDING = re.compile(
    rb"#\s*define\s+main\b|__attribute__\s*\(\(\s*constructor|init_array|link_section|"
    rb"__(?:asan|ubsan|sanitizer|lsan|msan)_\w+|\bsignal\s*\(\s*SIG(?:SEGV|ABRT|BUS|ILL|FPE)|"
    rb"\bsigaction\s*\(|\bset_hook\s*\(|\bprocess::exit\b|\bfunc\s+init\s*\(|\bos\.Exit\s*\(|"
    rb"\bdebug\.SetPanicOnFault|\bsetrlimit\s*\(|\bprctl\s*\("
)


def hiding_lines(patch: bytes, limit: int = 50) -> tuple[list[dict[str, str]], int]:
    """The added lines of `patch` that match HIDING, as {path, line} (the first `limit`), and how many."""
    found: list[dict[str, str]] = []
    count, path = 0, ""
    for raw in patch.splitlines():
        if raw.startswith(b"+++ "):
            path = raw[4:].decode("utf-8", errors="replace").removeprefix("b/")
        elif raw.startswith(b"+") and HIDING.search(raw):
            count += 1
            if len(found) < limit:
                found.append({"path": path, "line": raw[1:201].decode("utf-8", errors="replace")})
    return found, count


def grading_signals(results: Path | None = None) -> Signals:
    """What grading noticed of the run beyond the checks, under result.json's `signals` (`ssebench.runtime.
    signals`), all read over the admin socket or from the root-only results: the changed files it set aside
    and which of them are tests, harnesses or build logic (the daemon's kept preparation of grading), the lines
    of the graded change that can hide a bug (graded.patch), the calls and peers' requests the daemon refused,
    and how the whole change (final.patch) compares with the reference fix. Empty when grading was never
    prepared; the grade never reads it."""
    from sse import daemon

    try:
        admin = daemon._default()
        prepared = admin.prepare_grading()
    except Exception:  # the grade stands without its signals
        return Signals()
    set_aside = [str(path) for path in prepared.get("set_aside") or []]
    classified = prepared.get("classified") if isinstance(prepared.get("classified"), dict) else {}
    graded = read_no_follow(results, "graded.patch", 256 << 20) if results is not None else None
    hiding, count = hiding_lines(graded) if graded is not None else ([], 0)
    try:
        refused = admin.get("/admin/refusals")
    except Exception:  # a daemon without the route (or gone): no refusals known
        refused = {}
    calls, peers = (refused.get(name) if isinstance(refused.get(name), dict) else {} for name in ("calls", "peers"))
    likeness, outside = _against_reference(admin, results)
    # Read as result.json is read back (`Signals.of`): what the daemon answered is typed and bounded the same way.
    return Signals.of(
        {
            "protected_files": set_aside[:SIGNAL_PATHS],
            "protected_files_count": len(set_aside),
            "hiding_code": hiding,
            "hiding_code_count": count,
            "refused_calls": calls.get("kept"),
            "refused_calls_count": calls.get("count"),
            "refused_requests": peers.get("kept"),
            "refused_requests_count": peers.get("count"),
            **{f"changed_{group}": _paths(classified, group) for group in ("tests", "harness", "build")},
            "reference_similarity": likeness,
            "outside_reference_files": outside,
        }
    )


def _paths(classified: dict[str, Any], group: str) -> list[str]:
    found = classified.get(group)
    return [str(path) for path in found][:SIGNAL_PATHS] if isinstance(found, list) else []


def _against_reference(admin: Any, results: Path | None) -> tuple[float | None, bool | None]:
    """(the change's similarity to the reference fix, whether it touches none of the reference's files);
    unknown (None) without a reference or a change."""
    patch = read_no_follow(results, "final.patch", 256 << 20) if results is not None else None
    try:
        reference = str(admin.get("/reference/patch").get("diff") or "")
    except Exception:
        return None, None
    if patch is None or not reference.strip():
        return None, None
    text = patch.decode("utf-8", errors="replace")
    touched, theirs = patch_paths(text), patch_paths(reference)
    return similarity(text, reference), (not touched & theirs) if touched and theirs else None


def runtime_result(end: AgentEnd | None, evaluator_timeout: bool) -> RuntimeResult:
    """result.json's account of the agent phase: how the agent ended (unknown when `end` is None) and whether
    grading ran out of time."""
    if end is None:
        return RuntimeResult(agent_timeout=False, evaluator_timeout=evaluator_timeout)
    return RuntimeResult(
        agent_duration=end.duration,
        agent_timeout=end.timed_out,
        evaluator_timeout=evaluator_timeout,
        agent_exit_code=end.status,
    )


# What of the predictions agent's output (agent.log) a failed apply's grade keeps: git's words.
APPLY_LOG_CAP = 8192


def prediction_not_applied(settings: RuntimeSettings, end: AgentEnd | None) -> PatchResult | None:
    """A predictions run whose agent did not apply its patch: the failed grade that says so, with the tail of
    what the agent said (git's words; in sidecar mode the agent's output is in the agent container's log
    instead). None for any other run, and for a prediction that applied: that one is graded as any run is.

    The predictions agent does nothing but apply the patch, so its non-zero exit means the patch did not
    apply. It runs as model, as any agent: trusting its exit can only fail its own run, never pass one.
    """
    if not settings.prediction or end is None or end.status == 0:
        return None
    from sse.grading import NOT_APPLIED, not_applied

    if end.status == PREDICTION_NOT_MOUNTED and not end.timed_out:  # no check ran: an error, not a grade
        return PatchResult(error_msg="the predictions agent found no patch at /prediction/patch.diff")

    said = b""
    with suppress(OSError):  # a missing or odd agent.log leaves the grade without its log, never ungraded
        said = read_no_follow(Path(settings.results), "agent.log", 1 << 20) or b""
    why = "its time limit ended the apply" if end.timed_out else f"git apply exited {end.status}"
    return not_applied(
        f"{NOT_APPLIED}: the predicted patch does not apply to the task's source ({why})",
        said[-APPLY_LOG_CAP:].decode("utf-8", errors="replace"),
    )


def agent_figures(stream: IO[bytes]) -> dict[str, str] | None:
    """The agent phase's figures (AGENT_DURATION, AGENT_EXIT_STATUS, SSE_METRIC_AGENT_TIMEOUT), one JSON
    line the entrypoint writes once the phase is over; None when it closes the pipe with nothing (no
    grading: the run failed before it)."""
    line = stream.readline(1 << 16)
    if not line.strip():
        return None
    figures = json.loads(line)
    if not isinstance(figures, dict):
        raise ValueError(f"the agent phase's figures are not an object: {line[:200]!r}")
    return {str(k): str(v) for k, v in figures.items()}


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"ssebench-evaluator: {exc}", file=sys.stderr)
        return 2
    # Started with the agent: what grading needs is loaded while the agent works, not after it.
    import httpx  # noqa: F401
    from sse import grading  # noqa: F401

    figures = agent_figures(sys.stdin.buffer)
    if figures is None:
        print("ssebench-evaluator: not graded (the entrypoint gave no agent figures)", file=sys.stderr)
        return 0
    end = AgentEnd.read(figures)
    unapplied = prediction_not_applied(settings, end)
    if unapplied is not None:
        graded, timed_out = RunResult(status=unapplied.status(), patch_result=unapplied), False
    else:
        graded, timed_out = grade_with_limit(settings.grading_timeout, Path(settings.results))
    result = replace(
        graded,
        runtime_result=runtime_result(end, timed_out),
        signals=grading_signals(Path(settings.results)) if not timed_out else Signals(),
    )
    path = write_atomic(Path(settings.results), "result.json", json.dumps(result.to_json(), indent=2) + "\n")
    print(
        f"ssebench-evaluator: {result.status}"
        + (f": {result.patch_result.error_msg}" if result.patch_result.error_msg else "")
        + f" ({path})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # a timed-out grading thread must not keep the process alive
