"""Nothing the agent leaves behind turns its grade into an error: what it did is graded.

An "error" means the run was not graded; it is retried and kept apart from
the score, so an agent able to cause one could choose its outcome. A byte
that is not UTF-8 in the change, a fifo where git reads, a patch whose
checks never finish: each must be graded "failed" (with the cause named),
and the graded patch must be the change, byte for byte. Grading's checks
share one tree, so what the agent's code leaves there during one check must
not reach the next: a repository planted for the hidden tests' `git apply`.
"""

from __future__ import annotations

import base64

import pytest

from tests.integrity.harness import LEVELS, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_a_change_that_is_not_utf8_is_graded_byte_for_byte(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    run.sh("1000", r"printf '/* caf\xe9 */\n' >> tlv.c && printf 'x\xff\n' > 'na\xefve.txt'")
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["build_success"] is True, grade
    patch = (run.run_dir / "final.patch").read_bytes()
    assert b"/* caf\xe9 */" in patch and b"x\xff" in patch


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_a_fifo_where_git_reads_is_a_failed_capture(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level, env={"SSE_CAPTURE_TIMEOUT": "10"})
    run.sh("1000", "mkfifo .gitignore && echo '/* changed */' >> tlv.c")
    result = run.finish(timeout=300)
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["error_msg"] == "Patch capture failed", grade
    assert "limit: capture time" in grade["error_log"]


def test_checks_that_never_finish_are_the_patchs_failure(launcher: Launcher) -> None:
    run = launcher.start(level=2, grading_timeout=30)
    run.sh("1000", "sed -i 's/^int main(int argc, char \\*\\*argv)$/&\\n{ sleep(100000); }\\nint unused(int argc, char **argv)/' "
                   "tlvdump.c && sed -i '1i #include <unistd.h>' tlvdump.c && grep -q 'sleep(100000)' tlvdump.c")
    result = run.finish(timeout=600)
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["error_msg"].startswith("Grading time limit"), grade


# Run by the agent's Makefile at every make, as sse-runner in the graded tree: a repository whose configuration
# defines a required filter for every file, which fails and writes a byte that is not UTF-8.
PLANT_REPOSITORY = r"""
mkdir -p .git/objects .git/refs
echo 'ref: refs/heads/main' > .git/HEAD
printf '#!/bin/sh\nprintf "\\377\\376" >&2\nexit 1\n' > .filter && chmod +x .filter
printf '[core]\n\trepositoryformatversion = 0\n' > .git/config
printf '[filter "x"]\n\tclean = ./.filter\n\tsmudge = ./.filter\n\trequired = true\n' >> .git/config
echo '* filter=x' > .gitattributes
"""


def test_a_repository_the_checks_plant_does_not_configure_the_hidden_tests(launcher: Launcher) -> None:
    """The reference fix, with a Makefile that plants a repository whose filter fails on every file: the hidden
    tests apply as if it were not there, and the fix passes (before, their `git apply` ran the filter and the
    run was an ungraded error)."""
    run = launcher.start(level=2)
    task = launcher.task("c-demo")
    fix = base64.b64encode((task.path / "sse" / task.config.files.patch).read_bytes()).decode()
    plant = base64.b64encode(PLANT_REPOSITORY.encode()).decode()
    run.sh("1000", f"echo {fix} | base64 -d | git apply -p1 && echo {plant} | base64 -d > plant.sh && "
                   "sed -i '1i $(shell sh plant.sh)' Makefile")
    # The positive control: where the plant stands, `git apply` runs its filter and fails.
    control = run.sh("1000", "mkdir /tmp/control && cd /tmp/control && sh \"$OLDPWD/plant.sh\" && echo a > f && "
                             "printf -- '--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-a\\n+b\\n' > p.diff && "
                             "git apply -p1 p.diff 2>&1; echo \"apply exit $?\"; rm -rf /tmp/control")
    assert "apply exit 0" not in control and "filter" in control, control
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "passed", grade
    assert grade["intent_test_success"] is True and grade["func_test_success"] is True, grade
