"""No process (or IPC object) of the agent or of a check outlives its time, however it hides.

A "ghost" is a process whose main thread has exited while another thread
runs on: /proc/<pid> then reads as a zombie although the process lives. One
is started by the agent (through its bash tool) and one by code a check runs
(as sse-runner). After the check, the runner's must be gone; after the end
of the agent phase, the agent's must be gone, before grading starts. The
count is taken thread by thread, from /proc/<pid>/task, independently of the
runtime's own way of finding processes.
"""

from __future__ import annotations

import pytest

from tests.integrity.harness import LEVELS, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

GHOST = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *spin(void *arg) { (void)arg; for (;;) sleep(1); return 0; }
int main(void) {
    if (fork() != 0) return 0;          /* leave the caller's process group behind */
    setsid();
    pthread_t t;
    pthread_create(&t, 0, spin, 0);
    syscall(SYS_exit, 0);               /* the leader exits alone: a zombie entry, a live process */
}
"""

# Live threads of a uid, counted from every task of every process (a zombie leader's included); with a
# name, only the threads of that program (the ghost's spinning thread keeps the name "ghost").
THREADS = r"""
n=0
for s in /proc/[0-9]*/task/[0-9]*/status; do
  st=$(awk '/^State:/{print $2}' "$s" 2>/dev/null); uid=$(awk '/^Uid:/{print $2}' "$s" 2>/dev/null)
  name=$(awk '/^Name:/{print $2}' "$s" 2>/dev/null)
  [ "$uid" = "{uid}" ] && [ "$st" != Z ] && [ "$st" != X ] && { [ -z "{name}" ] || [ "$name" = "{name}" ]; } \
    && n=$((n+1))
done
echo $n
"""


def _threads(run: object, uid: int, task: bool = False, name: str = "") -> int:
    script = THREADS.replace("{uid}", str(uid)).replace("{name}", name)
    return int(run.sh("root", script, task=task).strip())  # type: ignore[attr-defined]


# The agent's code in the unit tests' program (tlv.c, linked into it): a ghost of its own, started as sse-runner
# by the check, which leaves a mark in the check's home (root's to read) once its thread runs.
RUNNER_GHOST = r"""cat >> tlv.c <<'EOF'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static int ghost_ready[2];
static void *ghost_spin(void *arg) {
    (void)arg;
    char mark[4096];
    snprintf(mark, sizeof mark, "%s/ghost-started", getenv("HOME") ? getenv("HOME") : "/nonexistent");
    FILE *f = fopen(mark, "w");
    if (f) fclose(f);
    close(ghost_ready[1]);
    for (;;) sleep(1);
    return 0;
}
__attribute__((constructor)) static void start_a_ghost(void) {
    if (pipe(ghost_ready) != 0) return;
    if (fork() != 0) {
        /* The program goes on once the ghost's thread has left its mark (or the ghost is gone): under load,
           the check could otherwise end, and kill the ghost, before its thread first ran. */
        char c;
        close(ghost_ready[1]);
        while (read(ghost_ready[0], &c, 1) < 0) {}
        close(ghost_ready[0]);
        return;
    }
    close(ghost_ready[0]);
    setsid();
    pthread_t t;
    pthread_create(&t, 0, ghost_spin, 0);
    syscall(SYS_exit, 0);
}
EOF
grep -q start_a_ghost tlv.c
"""


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_ghost_processes_are_killed(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    run.sh("1000", f"cat > /tmp/ghost.c <<'EOF'\n{GHOST}\nEOF\ngcc -pthread -o /tmp/ghost /tmp/ghost.c")
    runner = int(run.sh("root", "id -u sse-runner", task=True))
    if level <= 2:
        # The agent's code starts a ghost as sse-runner in the unit tests' program; the check must not leave it
        # behind. The control: it started (its thread left its mark in the check's home).
        run.sh("1000", RUNNER_GHOST)
        assert (
            run.py("1000", "import json; from sse import project; print(json.dumps(project.function_test().code))") == 0
        )
        assert run.sh("root", "ls /var/lib/ssebench-runner/session-*/home/ghost-started", task=True).strip()
        assert _threads(run, runner, task=True) == 0, "a process of a check outlived it"
        run.sh("1000", "git checkout -q tlv.c")
    # The agent starts one through its bash tool, and one of its own.
    # (Sidecar mode: the bash tool's is where the task is, the agent's own where the agent is.)
    sidecar = run.mode == "sidecar"
    if sidecar:
        run.sh("1000", f"cat > /tmp/ghost.c <<'EOF'\n{GHOST}\nEOF\ngcc -pthread -o /tmp/ghost /tmp/ghost.c", task=True)
    run.py("1000", "import json; from sse.tools.bash import execute; print(json.dumps(execute('/tmp/ghost').code))")
    run.sh("1000", "/tmp/ghost")
    # The ghosts live (the control), counted by their own name: the held agent's sleep is not one of them.
    assert _threads(run, 1000, name="ghost") + (_threads(run, 1000, task=True, name="ghost") if sidecar else 0) >= 2
    # IPC objects outlive processes: a channel from the agent to what runs after it.
    run.sh("1000", "ipcmk -M 4096 -p 0666 && ipcmk -Q -p 0666 && ipcmk -S 1 -p 0666", task=True)
    assert run.sh("root", "awk 'NR>1 && $8==1000' /proc/sysvipc/shm | wc -l", task=True).strip() == "1"
    # (Bounded: a ghost holding the shell's pipes once made the end of the phase wait for ever.)
    run.sh(
        "root",
        'timeout 60 /opt/ssebench/venv/bin/python -I -c "from sse.daemon import Daemon; '
        "Daemon('/run/ssebench/admin.sock').post('/admin/agent_exited', {})\"",
        task=True,
    )
    assert _threads(run, 1000, task=True) == 0, "a process of the agent outlived the agent phase"
    left = run.sh(
        "root",
        "cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | awk 'NR>1' | grep -c ' 1000 ' || true",
        task=True,
    ).strip()
    assert left == "0", "IPC objects of the agent outlived the agent phase"
    if sidecar:
        # The agent's own container: its ghost lives until the agent exits (here, until the phase was ended
        # from outside); then the entrypoint ends it before it asks for grading.
        assert _threads(run, 1000, name="ghost") >= 1
    result = run.finish()
    assert result["patch_result"]["status"] == "failed"
    if sidecar:
        ended = [line for line in run.live.handle.logs().splitlines() if "leftover process(es)" in line]
        assert ended and int(ended[0].split("ended ")[1].split()[0]) >= 1, ended  # the ghost
