"""The reference agent: applies the upstream fix and commits it.

The harness mounts the fix read-only at /reference/patch.diff for this agent
only. A valid task graded after this agent ends passed. Its runs check the
task, never a model, and are labelled as reference runs.
"""

import os
import subprocess
import sys
from pathlib import Path

from sse.dialog import Dialog
from sse.prompt import task_prompt

PATCH = Path("/reference/patch.diff")
dialog = Dialog()


def git(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "reference",
        "GIT_AUTHOR_EMAIL": "reference@localhost",
        "GIT_COMMITTER_NAME": "reference",
        "GIT_COMMITTER_EMAIL": "reference@localhost",
    }
    tool_id = f"git-{dialog.seq}"
    dialog.tool_call(tool_id, "git", " ".join(args))
    done = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
    dialog.tool_result(tool_id, (done.stdout + done.stderr)[-2000:], code=done.returncode)
    return done


dialog.init(agent="reference", model="none")
dialog.prompt(task_prompt())
if not PATCH.is_file():
    dialog.complete("error", reason=f"{PATCH} is not mounted")
    sys.exit(f"reference agent: {PATCH} is not mounted")
applied = git("apply", "--binary", "--whitespace=nowarn", str(PATCH))
if applied.returncode != 0:
    dialog.complete("error", reason="the reference patch does not apply")
    sys.exit(1)
git("add", "--all")
git("commit", "--quiet", "--no-verify", "-m", "Apply the upstream fix")
dialog.complete("done")
