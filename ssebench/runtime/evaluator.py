"""The evaluator: grade the agent's patch over the admin socket and write result.json.

Run by the entrypoint as root after the agent phase, with SSE_DAEMON_SOCKET
pointing at the admin socket. Grading has a time limit; a timeout or an
exception gives status `error` with the reason. result.json is written
atomically (temp file and rename) into the root-only results directory.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ssebench.runtime.files import write_atomic
from ssebench.runtime.settings import SettingsError, load_settings


def runtime_result(environ: dict[str, str] | os._Environ[str], evaluator_timeout: bool) -> dict[str, Any]:
    def number(name: str) -> float | None:
        try:
            return float(environ[name])
        except (KeyError, ValueError):
            return None

    exit_code = number("AGENT_EXIT_STATUS")
    return {
        "agent_duration": number("AGENT_DURATION"),
        "agent_timeout": environ.get("SSE_METRIC_AGENT_TIMEOUT", "").lower() in ("1", "true", "yes"),
        "evaluator_timeout": evaluator_timeout,
        "agent_exit_code": None if exit_code is None else int(exit_code),
    }


def error_result(message: str, log: str | None = None) -> dict[str, Any]:
    return {"status": "error", "build_success": None, "pov_passed": None, "pov_total": None,
            "func_test_success": None, "intent_test_success": None, "error_msg": message, "error_log": log}


def grade_with_limit(limit: float, results: Path | None = None) -> tuple[dict[str, Any], bool]:
    """(patch_result, timed_out). Grading runs in a thread so the limit can end the wait.

    Once the patch is applied (final.patch written), what runs is the
    agent's code: checks that do not finish in time are the patch's failure,
    not an ungraded error that would drop the run from the score.
    """
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            from sse.grading import grade

            graded = grade()
            outcome["result"] = {"status": graded.status(), **asdict(graded)}
        except BaseException as exc:  # everything here is an infrastructure error
            outcome["result"] = error_result(f"grading raised {type(exc).__name__}: {exc}",
                                             traceback.format_exc()[-8000:])

    thread = threading.Thread(target=work, name="grading", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        message = f"grading did not finish within its time limit of {limit:.0f} s"
        if results is not None and (results / "final.patch").is_file():
            failed = error_result("Grading time limit: the checks of the patched tree did not finish within "
                                  f"{limit:.0f} s")
            return {**failed, "status": "failed"}, True
        return error_result(message), True
    return outcome["result"], False


def main() -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"ssebench-evaluator: {exc}", file=sys.stderr)
        return 2
    patch_result, timed_out = grade_with_limit(settings.grading_timeout, Path(settings.results))
    result = {"patch_result": patch_result, "runtime_result": runtime_result(os.environ, timed_out)}
    path = write_atomic(Path(settings.results), "result.json", json.dumps(result, indent=2) + "\n")
    print(f"ssebench-evaluator: {patch_result['status']}"
          + (f": {patch_result['error_msg']}" if patch_result.get("error_msg") else "") + f" ({path})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # a timed-out grading thread must not keep the process alive
