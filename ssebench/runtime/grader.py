"""Grading as the entrypoint runs it: the evaluator started with the agent, handed the agent phase's
figures, awaited; the error result when it cannot grade.

The evaluator (`ssebench.runtime.evaluator`) loads what grading needs while the agent works, then waits on
its stdin, a pipe of root's, for the figures (`contract.AgentEnd`) before it grades. A run it could not grade
raises `NotGraded`, whose message the entrypoint writes as the run's error result (`write_error`).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import IO

from ssebench.runtime import contract
from ssebench.runtime.console import say, tail
from ssebench.runtime.contract import AgentEnd, RuntimeSettings
from ssebench.runtime.files import write_atomic
from ssebench.runtime.process import NEUTRAL_CWD, python_command, wait
from ssebench.runtime.servers import end

# Beyond grading's time limit, how long the evaluator has to write its grade and exit.
GRADING_SLACK = 120.0


class NotGraded(Exception):
    """The evaluator could not grade the run; the message says why, for the run's error result."""


def start_evaluator(settings: RuntimeSettings, env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The evaluator, started with the agent, talking to the daemon on the admin socket; it waits for the
    agent phase's figures on its stdin."""
    return subprocess.Popen(
        python_command("ssebench.runtime.evaluator"),
        cwd=NEUTRAL_CWD,
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=log,
        env={**env, contract.ENV["agent_socket"]: settings.admin_socket},
    )


def evaluate(
    settings: RuntimeSettings,
    env: dict[str, str],
    evaluator: subprocess.Popen[bytes],
    log: IO[bytes],
    log_path: Path,
    agent: AgentEnd,
) -> None:
    """Have the evaluator grade the agent phase that ended so (`agent`), and wait for it (the grading time
    limit and some slack). One that ended while the agent ran (the OOM killer's choice, say) is replaced by a
    fresh one. Raises NotGraded when no evaluator could be started, or one ends without a grade or does not
    end."""
    if evaluator.poll() is not None:
        say(f"the evaluator started with the agent has exited (status {evaluator.returncode}); starting another")
        if evaluator.stdin is not None:
            evaluator.stdin.close()
        for attempt in range(5):  # the agent's processes are gone: their pids come back as they are reaped
            try:
                evaluator = start_evaluator(settings, env, log)
                break
            except OSError as exc:
                say(f"starting the evaluator failed (attempt {attempt + 1} of 5): {exc}")
                time.sleep(1)
        else:
            raise NotGraded("the evaluator could not be started")
    assert evaluator.stdin is not None
    try:
        evaluator.stdin.write(json.dumps(agent.to_figures()).encode() + b"\n")
        evaluator.stdin.close()
    except OSError:
        pass  # it ended meanwhile: its status says so, below
    try:
        status = wait(evaluator, settings.grading_timeout + GRADING_SLACK)
    except subprocess.TimeoutExpired:
        end(evaluator)
        raise NotGraded("the evaluator did not exit") from None
    if not (Path(settings.results) / "result.json").exists():
        raise NotGraded(f"the evaluator exited with status {status} without a grade:\n{tail(log_path)}")


def write_error(settings: RuntimeSettings, message: str) -> None:
    """The run's result: an error, not a grade, saying why."""
    from sse.result import PatchResult, RunResult, RuntimeResult, grade

    verdict = grade(no_result=message)
    result = RunResult(
        status=verdict.status,
        patch_result=PatchResult(error_msg=verdict.reason),
        runtime_result=RuntimeResult(agent_timeout=False, evaluator_timeout=False),  # no agent phase to tell of
    )
    write_atomic(Path(settings.results), "result.json", json.dumps(result.to_json(), indent=2) + "\n")
