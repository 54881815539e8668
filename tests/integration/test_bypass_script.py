"""The bypass suite run as a script (tests/integrity/test_bypass.py): the images it is told to attack, the task it
reads from them, and the one line it gives for images it cannot attack.

The attacks themselves are the integrity suite's; a full run of the script against named images is in
docs/integrity.md (about a minute per mode here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssebench.errors import SSEBenchError
from ssebench.image import image_names
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import ImagesNotNamed, target_from_environment
from tests.integrity.test_bypass import hidden, the_fix

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "integrity" / "test_bypass.py"
SANDBOX = "SSEBENCH_INTEGRITY_IMAGE"
TASK_IMAGE, AGENT_IMAGE = "SSEBENCH_INTEGRITY_SIDECAR_ENV_IMAGE", "SSEBENCH_INTEGRITY_SIDECAR_AGENT_IMAGE"


def test_without_named_images_the_demo_is_attacked(tmp_path: Path) -> None:
    assert target_from_environment("sandbox", tmp_path, {}) is None
    assert target_from_environment("sidecar", tmp_path, {"SSEBENCH_INTEGRITY_IMAGE": " "}) is None


def test_a_mode_whose_images_are_not_named_is_not_attacked(tmp_path: Path) -> None:
    with pytest.raises(ImagesNotNamed, match=f"sidecar mode's images are not named: set {TASK_IMAGE} and"):
        target_from_environment("sidecar", tmp_path, {SANDBOX: "any"})
    with pytest.raises(ImagesNotNamed, match=f"set {SANDBOX} to attack them"):
        target_from_environment("sandbox", tmp_path, {TASK_IMAGE: "a", AGENT_IMAGE: "b"})


def test_half_named_sidecar_images_and_a_lone_source_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SSEBenchError, match=f"^{AGENT_IMAGE} is not set: sidecar mode attacks two images"):
        target_from_environment("sidecar", tmp_path, {TASK_IMAGE: "a"})
    with pytest.raises(SSEBenchError, match=r"^SSEBENCH_INTEGRITY_SOURCE is the source tree's path in the images"):
        target_from_environment("sandbox", tmp_path, {"SSEBENCH_INTEGRITY_SOURCE": "/src/x"})


def test_what_the_attacks_look_for_is_the_tasks_own(demo_tasks: list[Task]) -> None:
    """c-demo's names, which the suite once spelled out, and go-demo's, from the same task files."""
    c, go = (next(t for t in demo_tasks if t.id == name) for name in ("c-demo", "go-demo"))
    assert hidden(c) == [
        "/ssebench/diffs/patch.diff",
        "/ssebench/diffs/test.diff",
        "/ssebench/pocs/long_value.tlv",
        "/ssebench/config.yaml",
        "/ssebench/scripts/run.sh",
        "/var/lib/ssebench-runner/repo/tlv.c",
    ]
    assert the_fix(c) == (["tlv.c", "tlv.h"], "TLV_ERR_TOO_LONG = -5,  /* a value longer than TLV_VALUE_MAX */")
    assert hidden(go)[2] == "/ssebench/pocs/missing_value_length.kv" and hidden(go)[-1].endswith("/repo/kvrec.go")


@pytest.mark.docker
@pytest.mark.slow
def test_the_task_is_read_from_the_image_the_variables_name(
    settings: Settings, demo_images: list[Task], tmp_path: Path
) -> None:
    go = next(t for t in demo_images if t.id == "go-demo")
    names = image_names(settings, go, "dummy")
    target = target_from_environment(
        "sandbox", tmp_path, {SANDBOX: names["agent"], "SSEBENCH_INTEGRITY_SOURCE": "/src/elsewhere"}
    )
    assert target is not None and (target.agent, target.tool) == (names["agent"], names["agent"])
    assert target.task.id == "go-demo" and target.task.dataset == "demo"
    assert target.task.config.source == "/src/elsewhere"  # the variable's, over config.yaml's
    # The files the image holds, as the task folder has them: what the attacks look for is the same.
    assert hidden(target.task) == hidden(go) and the_fix(target.task) == the_fix(go)
    assert (target.task.path / "sse" / "diffs" / "patch.diff").stat().st_mode & 0o004  # model reads it (reference)


@pytest.mark.docker
@pytest.mark.slow
def test_the_script_refuses_images_it_cannot_attack_in_one_line(
    settings: Settings, demo_images: list[Task], tmp_path: Path
) -> None:
    runtime = image_names(settings, demo_images[0])["runtime"]  # an image that holds no task
    cases = {
        f"ssebench-no-such-image-{tmp_path.name.lower()}:1": f"{SANDBOX}: there is no image ssebench-no-such-image",
        runtime: f"{SANDBOX}: {runtime} holds no /ssebench: name a task's image",
    }
    for image, expected in cases.items():
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "2"],
            env={**_environment(), SANDBOX: image},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"error: {expected}") and done.stderr.count("\n") == 1, done.stderr
        assert done.stdout == ""


def test_the_script_refuses_a_level_the_suite_does_not_attack() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "3"], env=_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "LEVEL '3': the suite attacks levels 0, 2, 4" in done.stderr


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SSEBENCH_INTEGRITY_")}
