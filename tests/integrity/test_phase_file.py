"""The phase the host reads (`ssebench ps`) is root's: the agent can neither write it nor put anything in its
place, in either mode, and what it tries leaves the phase as the entrypoint wrote it.

The phase is printed and acted on by nothing else (the grade is result.json's), but a run that could say it
had finished, or point the host's read at another file, would be a lie told to the operator.
"""

from __future__ import annotations

from ssebench.inflight import phase_archive, phase_of
from ssebench.runtime.contract import PHASE_FILE
from tests.integrity.harness import Launcher

# Each as model: write the file, replace it (by a link, by a rename), fill its directory, take the directory's
# place, and plant a phase file where the agent could write (its own /run, in sidecar mode's agent container).
ATTACKS = {
    "write": f"""printf '{{"phase": "finishing"}}\\n' > {PHASE_FILE}""",
    "link": f"ln -sf /etc/hostname {PHASE_FILE}",
    "rename": f"""printf '{{"phase": "finishing"}}\\n' > /tmp/p && mv -f /tmp/p {PHASE_FILE}""",
    "list": "ls /run/ssebench",
    "replace the directory": "mv /run/ssebench /tmp/gone",
    "a directory of its own": "mkdir -p /run/ssebench",
}


def test_the_agent_cannot_write_or_replace_the_phase_the_host_reads(launcher: Launcher) -> None:
    run = launcher.start()
    try:
        grader = run.task_container.id
        assert phase_of(phase_archive(grader)) == "agent"  # control: the entrypoint wrote it, the host reads it
        refused = {name: run.status("model", script) for name, script in ATTACKS.items()}
        if run.mode == "sandbox":  # the one container holds the phase: every attack fails there
            assert all(refused[name] != 0 for name in ATTACKS if name != "a directory of its own"), refused
        # Sidecar mode's agent container has a /run of its own, which the host never reads (`ps` reads the task
        # container, which stands for the run): whatever the agent made there changes nothing.
        assert phase_of(phase_archive(grader)) == "agent", refused
        assert run.owner_and_mode("/run/ssebench") == (0, 0o700)
        result = run.finish()
        assert result["patch_result"]["status"] in ("failed", "passed"), result  # graded, as any run
    finally:
        run.close()
