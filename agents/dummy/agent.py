"""The dummy agent: reads the task, changes nothing, calls no model.

It is the floor of the benchmark: on a valid task its (empty) patch fails
every PoC, while the build and the function test pass.
"""

import json
import os
import time
from pathlib import Path

from sse.prompt import task_prompt

archive = Path(os.environ.get("SSE_ARCHIVE", "/tmp/sse-archive"))
seq = 0


def record(kind: str, **fields: object) -> None:
    global seq
    with (archive / "dialog.jsonl").open("a") as out:
        out.write(json.dumps({"seq": seq, "ts": time.time(), "type": kind, **fields}) + "\n")
    seq += 1


record("init", agent="dummy", model=os.environ.get("SSE_MODEL_NAME") or "none")
record("prompt", text=task_prompt())
record("message", text="I change nothing.")
record("complete", status="done")
