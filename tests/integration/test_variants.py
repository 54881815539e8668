"""Variant PoCs against real runs: a patch that only rejects the PoC's exact bytes is caught.

The exact-bytes agent makes the patch an overfitting agent makes: it leaves
the bug and, in the code under repair (so grading keeps it), turns away the
one input the PoC holds. The PoC check then passes; the task's hidden
variants, other inputs that reach the same bug, still crash it, so the grade
is failed. The reference fix passes every variant and the dummy (no change)
fails every one, as `ssebench dataset verify` requires of a valid task.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ssebench.task import Task
from tests.helpers import DEMO

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXACT_BYTES_DOCKERFILE = """\
ARG SSEBENCH_TOOL
FROM ${SSEBENCH_TOOL}
COPY agent.py /opt/agent/agent.py
CMD ["/opt/ssebench/venv/bin/python", "/opt/agent/agent.py"]
"""

# For each task, (file, the line after which the check goes, the check): each compares the whole input with
# the PoC's bytes and rejects that one input as its parser rejects a malformed one.
EXACT_BYTES_AGENT = r"""
from pathlib import Path

from sse import project
from sse.dialog import Dialog

GUARDS = {
    "c-demo": (
        "tlv.c",
        "    size_t pos = 4, k = 0;\n",
        '    if (n == 76 && memcmp(buf, "TLV1\\x01\\x00\\x02hi\\x07\\x00\\x40", 12) == 0)\n'
        "        return TLV_ERR_TRUNCATED;\n",
    ),
    "go-demo": (
        "kvrec.go",
        "\tvar recs []Record\n",
        '\tif string(data) == "\\x04name\\x05alice\\x03age" {\n\t\treturn nil, ErrTruncated\n\t}\n',
    ),
}

dialog = Dialog()
dialog.init(agent="exact-bytes", model="none")
name, after, guard = GUARDS[project.metadata.id]
path = Path(project.source) / name
text = path.read_text()
assert after in text, after
path.write_text(text.replace(after, after + guard, 1))
dialog.message(f"I rejected the PoC's exact bytes in {name} and left the bug.")
dialog.complete("done")
"""


@pytest.fixture
def demo(pytester: pytest.Pytester, demo_images: list[Task], monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The demo dataset, with the bundled agents and exact-bytes."""
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    agents = pytester.path / "agents"
    shutil.copytree(Path(__file__).resolve().parents[2] / "agents", agents)
    (agents / "exact-bytes").mkdir()
    (agents / "exact-bytes" / "agent.yaml").write_text("name: exact-bytes\nneeds_model: false\n")
    (agents / "exact-bytes" / "Dockerfile").write_text(EXACT_BYTES_DOCKERFILE)
    (agents / "exact-bytes" / "agent.py").write_text(EXACT_BYTES_AGENT)
    monkeypatch.setenv("SSEBENCH_AGENTS_DIR", str(agents))
    return pytester


def _results(root: Path, agent: str) -> dict[str, dict[str, Any]]:
    """Each task's result.json of `agent`'s runs under `root`."""
    found = {}
    for path in root.glob(f"*/none/{agent}/*/result.json"):
        if not path.parent.is_symlink():
            found[path.parents[3].name] = json.loads(path.read_text())
    return found


def test_a_patch_that_rejects_only_the_pocs_bytes_fixes_the_poc_and_fails_the_variants(
    demo: pytest.Pytester,
) -> None:
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "datasets/demo/go-demo",
        "--agent",
        "exact-bytes",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2, failed=4)
    out = demo.path / "out"
    overfit = _results(out, "exact-bytes")
    assert sorted(overfit) == ["c-demo", "go-demo"]
    for task, said in overfit.items():
        patch = said["patch_result"]
        # The positive control: the guard ran and turned the PoC away.
        assert (patch["pov_passed"], patch["pov_total"]) == (1, 1), (task, patch)
        assert (patch["variants_passed"], patch["variants_total"], patch["variants_decide"]) == (0, 2, True)
        assert patch["status"] == "failed" and patch["error_msg"].startswith("Variant failed: variants/"), patch
    for task, said in _results(out, "reference").items():
        patch = said["patch_result"]
        assert patch["status"] == "passed" and (patch["variants_passed"], patch["variants_total"]) == (2, 2), task
    for task, said in _results(out, "dummy").items():
        patch = said["patch_result"]
        assert (patch["pov_passed"], patch["variants_passed"], patch["variants_total"]) == (0, 0, 2), task
    # The failure says which check the patch missed.
    result.stdout.fnmatch_lines(
        [
            "*c-demo::exact-bytes*",
            "Variant failed: variants/*",
            "Checks: build passed; PoCs 1/1 fixed; variants 0/2 fixed;*",
        ]
    )
