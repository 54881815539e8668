"""Nothing the agent leaves behind turns its grade into an error: what it did is graded.

An "error" means the run was not graded; it is retried and kept apart from
the score, so an agent able to cause one could choose its outcome. A byte
that is not UTF-8 in the change, a fifo where git reads, a patch whose
checks never finish: each must be graded "failed" (with the cause named),
and the graded patch must be the change, byte for byte.
"""

from __future__ import annotations

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
