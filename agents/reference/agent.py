"""The reference agent: applies the upstream fix and commits it.

The harness mounts the fix read-only at /reference/patch.diff for this agent
only. A valid task graded after this agent ends passed. Its runs check the
task, never a model, and are labelled as reference runs.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sse.prompt import task_prompt

PATCH = Path("/reference/patch.diff")
archive = Path(os.environ.get("SSE_ARCHIVE", "/tmp/sse-archive"))
seq = 0


def record(kind: str, **fields: object) -> None:
    global seq
    with (archive / "dialog.jsonl").open("a") as out:
        out.write(json.dumps({"seq": seq, "ts": time.time(), "type": kind, **fields}) + "\n")
    seq += 1


def git(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "reference", "GIT_AUTHOR_EMAIL": "reference@localhost",
           "GIT_COMMITTER_NAME": "reference", "GIT_COMMITTER_EMAIL": "reference@localhost"}
    done = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
    record("tool", name="git", input=" ".join(args), code=done.returncode, output=(done.stdout + done.stderr)[-2000:])
    return done


record("init", agent="reference", model="none")
record("prompt", text=task_prompt())
if not PATCH.is_file():
    record("complete", status="error", reason=f"{PATCH} is not mounted")
    sys.exit(f"reference agent: {PATCH} is not mounted")
applied = git("apply", "--binary", "--whitespace=nowarn", str(PATCH))
if applied.returncode != 0:
    record("complete", status="error", reason="the reference patch does not apply")
    sys.exit(1)
git("add", "--all")
git("commit", "--quiet", "--no-verify", "-m", "Apply the upstream fix")
record("complete", status="done")
