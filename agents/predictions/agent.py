"""The predictions agent: applies a patch made elsewhere, and nothing else.

`pytest DATASET --predictions FILE` makes one run of this agent per
prediction; the harness mounts the prediction's patch read-only at
/prediction/patch.diff for this agent only. The patch is applied as any
agent's change would be made, and grading captures and grades it as any
run's. A patch that does not apply leaves the tree as it was and ends this
agent with git's exit status: the evaluator then grades the run failed,
saying the patch did not apply (`ssebench.runtime.evaluator`). An empty
patch changes nothing, and is graded so.
"""

import os
import subprocess
import sys
from pathlib import Path

from sse.dialog import Dialog
from sse.prompt import task_prompt

PATCH = Path("/prediction/patch.diff")
# contract.PREDICTION_NOT_MOUNTED: the harness's fault, which the evaluator does not count as the patch's.
NOT_MOUNTED = 70
dialog = Dialog()
dialog.init(agent="predictions", model=os.environ.get("SSE_MODEL_NAME") or "none")
dialog.prompt(task_prompt())
if not PATCH.is_file():
    dialog.complete("error", reason=f"{PATCH} is not mounted")
    print(f"predictions agent: {PATCH} is not mounted: give the patches with --predictions FILE", file=sys.stderr)
    sys.exit(NOT_MOUNTED)
if not PATCH.read_bytes().strip():
    dialog.message("The prediction's patch is empty: nothing to apply.")
    dialog.complete("done")
    sys.exit(0)
# git apply, as grading applies a change: the whole patch or nothing, binary hunks included.
argv = ["git", "apply", "--binary", "--whitespace=nowarn", "--verbose", str(PATCH)]
dialog.tool_call("apply", "git", " ".join(argv[1:]))
done = subprocess.run(argv, capture_output=True, text=True, errors="replace")
said = (done.stdout + done.stderr)[-4000:]
dialog.tool_result("apply", said, code=done.returncode)
if done.returncode != 0:
    print(f"the predicted patch does not apply (git apply exited {done.returncode}):\n{said}", file=sys.stderr)
    dialog.complete("error", reason="the predicted patch does not apply")
    sys.exit(done.returncode)
print(said, file=sys.stderr)
dialog.complete("done")
