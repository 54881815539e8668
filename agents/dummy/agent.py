"""The dummy agent: reads the task, changes nothing, calls no model.

It is the floor of the benchmark: on a valid task its (empty) patch fails
every PoC, while the build and the function test pass.
"""

import os

from sse.dialog import Dialog
from sse.prompt import task_prompt

dialog = Dialog()
dialog.init(agent="dummy", model=os.environ.get("SSE_MODEL_NAME") or "none")
dialog.prompt(task_prompt())
dialog.message("I change nothing.")
dialog.complete("done")
