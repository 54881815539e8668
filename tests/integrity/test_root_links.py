"""Root never follows a link or writes into a place that model or sse-runner could prepare.

At every name root has used, or might use, inside the agent's tree and the
copies the checks make of it, the agent plants a link to a trap directory,
a link to /ssebench, or a directory of its own (code among the names, which
grading applies to its copies); and the agent's code a check runs (as
sse-runner) plants links beside its copy in the session directory.
Then every check the level allows runs, and the run is graded with the
plants carried by the final patch. Nothing may land in a trap, /ssebench
and grading's original (contract.REPO) keep their owners and modes, and every
check still runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from ssebench.runtime.contract import REPO
from tests.helpers import in_the_checks
from tests.integrity.harness import LEVELS, HeldRun, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# Names root has used (staging, copies, sessions) or a careless change might:
# the hidden files' names, the scripts', the PoC's, capture's, the results'.
NAMES = [
    ".ssebench-stage",
    ".ssebench",
    "stage",
    "run.sh",
    "build.sh",
    "test.sh",
    "hidden.diff",
    "long_value.tlv",
    "home",
    "tmp",
    "objects",
    "index",
    "base.git",
    "results",
    "archive",
    "final.patch",
    "result.json",
]
NAMES += [f"{kind}-{n}" for kind in ("build", "test", "intent", "stage", "session") for n in range(1, 13)]
# And under names of code, which grading applies to its copies (the others it sets aside).
NAMES += [f"{name}.c" for name in ("stage", "hidden.diff", "run.sh", "result.json", "graded", "change.diff")]

PLANT = r"""
set -e
mkdir -p /tmp/sse-archive/trap
i=0
for name in {names}; do
  case $((i % 3)) in
    0) mkdir -p "/tmp/sse-archive/trap/$name"; ln -sfn "/tmp/sse-archive/trap/$name" "$name" ;;
    1) ln -sfn /ssebench "$name" ;;
    2) mkdir -p "$name"; echo "the agent's own $name" > "$name/own.txt" ;;
  esac
  i=$((i + 1))
done
"""

# The agent's code in every program of the checks, as sse-runner: links planted beside its copy, in the session.
RUNNER_PLANT = """
for name in {names}; do
  ln -sfn /ssebench "../$name" 2>/dev/null
  ln -sfn {repo} "../$name.repo" 2>/dev/null
done
echo "RUNNER-PLANT ran as $(id -un) in $(pwd)"
"""

CHECKS = {0: ["build", "run_poc", "function_test", "intent_test"], 2: ["build", "function_test"], 4: []}

RUN_CHECK = """
import json
from sse.daemon import _default
action = {action!r}
body = {{"poc": "/ssebench/pocs/long_value.tlv"}} if action == "run_poc" else {{}}
try:
    r = _default().tool("bencher", action, body)
    print(json.dumps({{"code": r["code"], "stdout": r["stdout"][-2000:], "stderr": r["stderr"][-400:]}}))
except Exception as exc:
    print(json.dumps({{"error": str(exc)}}))
"""

STATE = r"""
stat -c '%n %U %G %a' /ssebench /ssebench/diffs /ssebench/diffs/patch.diff /ssebench/pocs/long_value.tlv {repo}
echo trapped: $(find /tmp/sse-archive/trap -mindepth 1 -not -type d 2>/dev/null | wc -l)
echo runner links beside copies: $(find /var/lib/ssebench-runner -mindepth 2 -maxdepth 2 -type l | wc -l)
""".replace("{repo}", REPO)
PROTECTED = {
    "ssebench": (0, 0o710),
    "ssebench/diffs": (0, 0o700),
    "ssebench/diffs/patch.diff": (0, 0o600),
    REPO.lstrip("/"): (0, 0o700),
}


def _state(run: HeldRun) -> str:
    return run.sh("root", STATE, task=True)


def _untouched(run: HeldRun, before: str, when: str) -> None:
    after = _state(run)
    assert after == before, f"{when}: root wrote through a planted link:\nbefore:\n{before}\nafter:\n{after}"
    assert "trapped: 0" in after and "runner links beside copies: 0" in after


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_links_planted_at_every_name_lead_root_nowhere(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    before = _state(run)
    assert "trapped: 0" in before and "/ssebench root sse-runner 710" in before
    run.sh("1000", PLANT.format(names=" ".join(NAMES)))
    run.sh("1000", in_the_checks(RUNNER_PLANT.format(names=" ".join(NAMES), repo=REPO)))
    outcomes: dict[str, Any] = {}
    for action in CHECKS[level]:
        outcomes[action] = run.py("1000", RUN_CHECK.format(action=action))
        _untouched(run, before, f"after the agent's {action}")
    assert all("error" not in o for o in outcomes.values()), outcomes
    if level == 0:
        assert outcomes["build"]["code"] == 0 and outcomes["function_test"]["code"] == 0
        assert outcomes["run_poc"]["code"] not in (0, -1)  # it ran, and the bug still triggers
    if "function_test" in outcomes:  # the control: the agent's code did run in the check, as sse-runner
        assert "RUNNER-PLANT ran as sse-runner in /var/lib/ssebench-runner/" in outcomes["function_test"]["stdout"]
    # The plants go into the final patch: grading applies them to the graded copy and copies it.
    run.sh("1000", "git add -A && git -c user.name=a -c user.email=a@x commit -qm plants")
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed", grade  # graded, not an error: the PoC still crashes
    assert grade["build_success"] is True and grade["func_test_success"] is True
    assert grade["pov_total"] == 1 and grade["pov_passed"] == 0
    logs = [p.read_text(errors="replace") for p in run.run_dir.glob("scriptrunner-*.log")]
    assert any("RUNNER-PLANT ran as sse-runner" in log for log in logs)  # and in grading's checks
    trapped = [p for p in (run.run_dir / "archive" / "trap").rglob("*") if not p.is_dir()]
    assert trapped == [], f"grading wrote through planted links: {trapped}"
    for path, (uid, mode) in PROTECTED.items():
        assert run.owner_and_mode("/" + path) == (uid, mode), path
