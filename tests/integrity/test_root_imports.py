"""Root never imports the agent's Python, whatever the name, wherever the image's WORKDIR points.

The demo's Dockerfiles set WORKDIR to the source tree, as upstream tasks do.
The agent (uid 1000) plants a package under the name of every module the
runtime could import (the standard library, the runtime venv's packages,
`ssebench`, `sse`, `sitecustomize`...) in its tree, its home and /tmp. Each
one, if imported, leaves a marker naming itself and the uid that imported
it. The run must then grade normally and no marker may appear.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import MCP_TEST_PATCH
from tests.integrity.harness import LEVELS, PYTHON, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

MARK = "SSEBENCH-PLANTED-IMPORT"

# Every top-level name an isolated runtime Python could resolve: the standard
# library's, every package on the runtime's path, and the usual start-up hooks.
NAMES = """
import json, pkgutil, sys
names = set(sys.stdlib_module_names) | {m.name for m in pkgutil.iter_modules()}
names |= {"ssebench", "sse", "sitecustomize", "usercustomize", "encodings", "site", "__main__"}
print(json.dumps(sorted(n for n in names if n.isidentifier())))
"""

# Run as model: a package per name, whose __init__ leaves a marker when imported.
PLANT = f"""
import json, os, sys
names = json.loads(os.environ["NAMES"])
body = '''
import os, sys
_who = "{{name}} uid=%d cwd=%s argv=%s" % (os.getuid(), os.getcwd(), sys.argv[:2])
sys.stderr.write("{MARK} " + _who + "\\\\n")
for _d in ("/tmp/sse-archive", "/var/lib/ssebench/results", "/tmp"):
    try:
        with open(os.path.join(_d, "{MARK}-{{name}}-%d" % os.getuid()), "w") as _f:
            _f.write(_who)
    except OSError:
        pass
'''
planted = 0
for where in json.loads(os.environ["WHERE"]):
    for name in names:
        folder = os.path.join(where, name)
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "__init__.py"), "w") as f:
                f.write(body.replace("{{name}}", name))
            planted += 1
        except OSError:
            pass
print(json.dumps(planted))
"""


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_modules_planted_at_every_name_are_never_imported(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    code, out = run.container.exec_run([PYTHON, "-I", "-c", NAMES], user="1000")
    assert code == 0, out
    names = json.loads(out.decode())
    assert {
        "signal",
        "os",
        "json",
        "subprocess",
        "ssebench",
        "sse",
        "starlette",
        "uvicorn",
        "httpx",
        "yaml",
        "pydantic",
        "mcp",
    } <= set(names)
    # Sidecar mode: the agent may plant in both containers (root's only processes are in the task's; its
    # agent container's entrypoint imports before the agent starts).
    for task in [False, True] if run.mode == "sidecar" else [False]:
        planted = run.py(
            "1000",
            PLANT,
            env={"NAMES": json.dumps(names), "WHERE": json.dumps([run.source, "/home/model", "/tmp"])},
            task=task,
        )
        assert planted >= 3 * len(names) - 3
    # The daemon's workers start processes as other users while they are planted: a check where the
    # level allows one, and the bash tool.
    if level <= 3:
        assert run.py("1000", "import json; from sse import project; print(json.dumps(project.build().code))") == 0
    assert (
        run.py("1000", "import json; from sse.tools.bash import execute; print(json.dumps(execute('true').code))") == 0
    )
    # The MCP server (root) starts when its first client connects: here, after the plants, and its tool
    # runs the checks the level allows.
    assert "check" in run.py("1000", MCP_TEST_PATCH)
    # The evaluator (root) starts with the agent, before the plants; the one that replaces it when it has
    # died starts after them.
    run.sh("root", "pkill -KILL -f ssebench.runtime.evaluator", task=True)  # where grading is
    result = run.finish()
    assert "the evaluator started with the agent has exited" in run.logs()
    markers = [line for line in run.logs().splitlines() if MARK in line]
    markers += [p.name for p in (run.run_dir / "archive").glob(f"{MARK}-*")]
    markers += [p.name for p in run.run_dir.glob(f"{MARK}-*")]
    assert markers == [], "planted modules were imported:\n" + "\n".join(markers[:40])
    assert result["patch_result"]["status"] == "failed"  # graded as the dummy it is: the PoC still crashes
    assert result["patch_result"]["build_success"] is True
