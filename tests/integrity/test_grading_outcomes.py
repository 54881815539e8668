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
import json

import pytest

from tests.helpers import in_the_checks
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
    run.sh("1000", in_the_checks("sleep 100000"))  # the agent's code, in every program the checks run
    result = run.finish(timeout=600)
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["error_msg"].startswith("Grading time limit"), grade


# Run by the agent's code in every program of the checks (in_the_checks), as sse-runner in the graded tree: a
# repository whose configuration defines a required filter for every file, which fails and writes a byte that
# is not UTF-8.
PLANT_REPOSITORY = r"""
mkdir -p .git/objects .git/refs
echo 'ref: refs/heads/main' > .git/HEAD
printf '#!/bin/sh\nprintf "\\377\\376" >&2\nexit 1\n' > .filter && chmod +x .filter
printf '[core]\n\trepositoryformatversion = 0\n' > .git/config
printf '[filter "x"]\n\tclean = ./.filter\n\tsmudge = ./.filter\n\trequired = true\n' >> .git/config
echo '* filter=x' > .gitattributes
echo "PLANTED in $(pwd)"
"""


def test_a_repository_the_checks_plant_does_not_configure_the_hidden_tests(launcher: Launcher) -> None:
    """The reference fix, with code that plants a repository whose filter fails on every file in the tree of every
    check it runs in: the hidden tests apply as if it were not there, and the fix passes (before, their `git
    apply` ran the filter and the run was an ungraded error)."""
    run = launcher.start(level=2)
    task = launcher.task("c-demo")
    assert task.config.files.patch is not None
    fix = base64.b64encode((task.path / "sse" / task.config.files.patch).read_bytes()).decode()
    plant = base64.b64encode(PLANT_REPOSITORY.encode()).decode()
    run.sh("1000", f"echo {fix} | base64 -d | git apply -p1 && echo {plant} | base64 -d > /tmp/plant.sh")
    run.sh("1000", in_the_checks(PLANT_REPOSITORY))
    # The positive control: where the plant stands, `git apply` runs its filter and fails.
    control = run.sh(
        "1000",
        "mkdir /tmp/control && cd /tmp/control && sh /tmp/plant.sh && echo a > f && "
        "printf -- '--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-a\\n+b\\n' > p.diff && "
        'git apply -p1 p.diff 2>&1; echo "apply exit $?"; rm -rf /tmp/control',
    )
    assert "apply exit 0" not in control and "filter" in control, control
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "passed", grade
    assert grade["intent_test_success"] is True and grade["func_test_success"] is True, grade
    # And it was planted in the graded tree before the hidden tests applied (the function test ran there).
    logs = [p.read_text(errors="replace") for p in run.run_dir.glob("scriptrunner-*.log")]
    assert any('"check": "function_test"' in log and "PLANTED in /var/lib/ssebench-runner/" in log for log in logs)


# The agent's code (tlv.c, the code under repair, which every check's programs link) leaves a directory 1,100
# levels deep in the tree it runs in, whenever one of them starts: deeper than Python's recursion.
DEEP_IN_THE_CHECKS = r"""cat >> tlv.c <<'EOF'
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
__attribute__((constructor)) static void leave_a_deep_tree(void)
{
    int here = open(".", O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < 1100; i++)
        if ((mkdir("deep", 0755) != 0 && errno != EEXIST) || chdir("deep") != 0)
            break;
    if (here >= 0) {
        fchdir(here);
        close(here);
    }
}
EOF
"""


def test_a_tree_too_deep_for_recursion_left_by_the_checks_leaves_the_failure_a_failure(launcher: Launcher) -> None:
    """Before, root's clean-up of the check's copy raised RecursionError: the daemon answered 500 and the run
    was an ungraded error, which the score leaves out and --infra-retries retries."""
    run = launcher.start(level=2)
    run.sh("1000", DEEP_IN_THE_CHECKS + "grep -q leave_a_deep_tree tlv.c")
    # The positive control: the programs do leave the tree, 1,100 levels deep, where they run.
    depth = run.sh(
        "1000",
        "make -s tlvdump >/dev/null 2>&1 && ./tlvdump /dev/null; "
        "find deep -type d | awk -F/ '{print NF}' | sort -n | tail -1; rm -rf deep *.o *.a tlvdump",
        check=False,
    )
    assert depth.split()[-1] == "1100", depth
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["pov_passed"] == 0, grade
    assert grade["build_success"] is True and grade["func_test_success"] is True, grade


# The agent's archive: a directory 1,100 levels deep and 20,000 files, made in seconds (the run's entry cap is
# lowered to 5,000 here, where it is 100,000 by default, so that the suite need not write 100,000 files).
DEEP_ARCHIVE = r"""
import os
archive = os.environ.get("SSE_ARCHIVE", "/tmp/sse-archive")
fd = os.open(archive, os.O_RDONLY | os.O_DIRECTORY)
top = fd
for _ in range(1100):
    os.mkdir("d", dir_fd=fd)
    child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    if fd != top:
        os.close(fd)
    fd = child
os.mkdir("many", dir_fd=top)
many = os.open("many", os.O_RDONLY | os.O_DIRECTORY, dir_fd=top)
for i in range(20_000):
    os.close(os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=many))
with open(os.path.join(archive, "dialog.jsonl"), "w") as out:
    out.write('{"seq": 0, "ts": 0, "type": "init"}\n')
print("{}")
"""


def test_an_archive_too_deep_and_too_many_is_pruned_and_comes_home_capped(launcher: Launcher) -> None:
    """Before, the entrypoint's prune raised RecursionError (it caught OSError only): archive.json was lost and
    the host then wrote every file of the unpruned archive under results/ (the host's own cap of entries is
    tests/unit/test_archive.py's)."""
    run = launcher.start(level=2, env={"SSE_ARCHIVE_ENTRIES": "5000"})
    run.py("1000", DEEP_ARCHIVE, env={"SSE_ARCHIVE": "/tmp/sse-archive"})
    run.finish()
    pruned = json.loads((run.run_dir / "archive.json").read_text())
    assert pruned["kept_files"] <= 5000 and pruned["dropped_count"] >= 15_000, pruned
    assert any(d["reason"].startswith("deeper than") for d in pruned["dropped"]), pruned["dropped"][:5]
    came = run.summary["files"]["archive"]
    assert came["files"] <= 5000 and (run.run_dir / "archive" / "dialog.jsonl").is_file(), came
    depth = max(
        (len(p.relative_to(run.run_dir / "archive").parts) for p in (run.run_dir / "archive").rglob("*")), default=0
    )
    assert depth <= 65, depth
