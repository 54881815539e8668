"""Where grading builds: a volume of the run's own, which root takes only empty and reached through no link.

Grading's copies of the tree live under /var/lib/ssebench-runner (the
runner's area), which each run mounts as a volume of its own in the
container that grades (sandbox mode's one container, sidecar mode's task
container), so the task's scripts write to the host's file system rather
than through the image's storage driver. Root makes session directories and
stages hidden files there, so nothing may be there before it: the
entrypoint refuses an area that holds anything, whatever its name or kind,
and makes the area root's; the tool layer refuses a case image whose area,
or a directory above it, is a link or another user's. The volume goes with
the run. Grading's original of the tree is copied there when a run starts
(ssebench.runtime.tree), from the tree's own volume, before anything of
model's or sse-runner's runs; the tool layer refuses a case image whose
tree is a link or reached through another user's directory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sse.result import RunResult

from ssebench.engine import DockerBackend, client
from ssebench.image import image_names
from ssebench.live import ContainerDied
from ssebench.result import read_result
from ssebench.run import collect
from ssebench.runtime.contract import REPO, RUNNER_DIR
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import Launcher, launching, leftovers

pytestmark = [pytest.mark.docker, pytest.mark.integrity]

MOUNT = f'awk \'$5 == "{RUNNER_DIR}" {{ for (i = 6; $i != "-"; i++); print $(i + 1) }}\' /proc/self/mountinfo'


def test_grading_builds_on_a_volume_of_the_runs_own_that_model_cannot_enter(launcher: Launcher) -> None:
    """And the tree the agent works on is one, prepared when the run starts: model's, with one commit, and
    grading's original kept where only root reaches."""
    run = launcher.start()
    volume = f"{run.live.network.name}-runner"
    try:
        # Where the task is, the area is its own mount, on the host's file system, not the image's overlay.
        assert run.sh("root", MOUNT, task=True).split() == ["ext4"]
        assert run.sh("root", "stat -f -c %T /", task=True).strip() != "ext2/ext3"
        assert run.sh("root", f"stat -c '%U %G %a' {RUNNER_DIR}", task=True).split() == ["root", "sse-runner", "710"]
        # Model can neither list nor add to it; sse-runner may traverse only. Root can (the positive control).
        for user in ("model", "sse-runner"):
            assert run.status(user, f"touch {RUNNER_DIR}/planted", task=True) != 0, user
            assert run.status(user, f"ln -s /ssebench {RUNNER_DIR}/session-9-planted", task=True) != 0, user
        assert run.status("model", f"ls {RUNNER_DIR}", task=True) != 0
        assert run.status("root", f"touch {RUNNER_DIR}/probe && rm {RUNNER_DIR}/probe", task=True) == 0
        if run.mode == "sidecar":  # the agent's container has no area, and never this volume
            assert run.sh("root", MOUNT).split() == []
        # Grading's original, copied there when the run started: root's alone. Root reads it (the control).
        assert run.sh("root", f"stat -c '%U %G %a' {REPO}", task=True).split() == ["root", "root", "700"]
        for user in ("model", "sse-runner"):
            assert run.status(user, f"ls {REPO} || cat {REPO}/tlv.c", task=True) != 0, user
        assert "TLV_VALUE_MAX" in run.sh("root", f"cat {REPO}/tlv.c", task=True)
        # The agent's tree: a volume of the run's own too, model's, its history the one commit.
        tree = MOUNT.replace(RUNNER_DIR, run.source)
        assert run.sh("root", tree, task=True).split() == ["ext4"] == run.sh("root", tree).split()
        assert run.sh("root", f"find {run.source} ! -user model | wc -l", task=True).split() == ["0"]
        assert run.sh("1000", "git log --format=%s").split() == ["buggy", "commit"]
        assert volume in leftovers(f"ssebench.run={run.live.run_id}")
        result = run.finish()
        assert result["patch_result"]["status"] == "failed", result  # graded there: the dummy's patch fails
    finally:
        run.close()
    assert volume not in leftovers(f"ssebench.run={run.live.run_id}")


# What an area might hold before the entrypoint: each name and kind root could meet there.
PLANTS = {
    "link at a session's name": "ln -s /ssebench session-1-00000000",
    "link at the original's name": "ln -s /src/tlvkit repo",
    "directory of uid 1000 at the original's name": "mkdir repo && chown 1000:1000 repo",
    "directory of uid 1000": "mkdir session-1-planted && chown 1000:1000 session-1-planted",
    "fifo": "mkfifo build-000000000000",
    "hidden file": "echo x > .keep",
    "file of root's": "echo x > home",
}


class PlantingBackend(DockerBackend):
    """Plants `script` (as root, in the area's volume) as soon as the run's runner volume exists."""

    def __init__(self, image: str, script: str) -> None:
        super().__init__()
        self.image, self.script = image, script

    def create_volume(self, name: str, *, labels: dict[str, str]) -> None:
        super().create_volume(name, labels=labels)
        if name.endswith("-runner"):
            client().containers.run(
                self.image,
                ["-c", f"set -e; cd /area; {self.script}"],
                entrypoint="bash",
                user="root",
                network_mode="none",
                remove=True,
                volumes={name: {"bind": "/area", "mode": "rw"}},
            )


def _run_with(launcher: Launcher, settings: Settings, script: str) -> tuple[int, str, RunResult | None]:
    task = launcher.task("c-demo")
    backend = PlantingBackend(image_names(settings, task, "dummy", launcher.mode)["tool"], script)
    run = launcher.start(command=["true"], hold=False, backend=backend)
    try:
        try:
            status = run.live.wait(300)
        except ContainerDied as exc:  # sidecar mode: the task container refused, the host sees it at once
            status, died = -1, str(exc)
        else:
            died = ""
        collect(run.live.grader, run.run_dir)
        return status, died + run.logs(), read_result(run.run_dir)
    finally:
        run.close()


@pytest.mark.parametrize("plant", PLANTS)
def test_the_entrypoint_takes_the_runners_area_only_empty(
    fresh_launcher: Launcher, settings: Settings, plant: str
) -> None:
    status, logs, result = _run_with(fresh_launcher, settings, PLANTS[plant])
    assert "refusing to start: the runner's area" in logs and "must be empty" in logs, logs[-3000:]
    assert "daemon ready" not in logs
    if fresh_launcher.mode == "sandbox":
        assert status != 0
        assert result is not None and result.status == "error", result


def test_an_empty_area_of_another_users_is_made_roots_and_the_run_grades(
    fresh_launcher: Launcher, settings: Settings
) -> None:
    """The positive control of the test above: the same run, the area empty but uid 1000's and open to all."""
    _, logs, result = _run_with(fresh_launcher, settings, "chown 1000:1000 . && chmod 0777 .")
    assert "the runner's area is a volume (ext4)" in logs, logs[-3000:]
    assert result is not None and result.status == "failed", result


# Sandbox mode's agent image is the agent's own Dockerfile on the tool image, built by Docker (RUN steps
# included): there, not the tool layer's check, the entrypoint's is what guards the paths each run mounts.
AGENT_PLANTS = {
    "area a link to the task's files": f"rm -rf {RUNNER_DIR} && ln -s /ssebench {RUNNER_DIR}",
    "tree a link to the task's files": "mv /src/tlvkit /src/tlvkit.real && ln -s /ssebench /src/tlvkit",
    "directory above the tree uid 1000's": "chown 1000 /src",
    "a .git in the tree": "mkdir /src/tlvkit/.git",
}


@contextmanager
def _agent_image_after(settings: Settings, task: Task, plant: str) -> Iterator[str]:
    """c-demo's dummy agent image with `plant` run in it as root, as an agent's Dockerfile could: its name."""
    agent = image_names(settings, task, "dummy", "sandbox")["agent"]
    config = client().images.get(agent).attrs["Config"]
    container = client().containers.run(
        agent, ["-c", f"set -e; {plant}"], entrypoint="bash", user="root", network_mode="none", detach=True
    )
    name = f"ssebench-test/planted-agent:{uuid.uuid4().hex[:12]}"
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0, container.logs()
        repository, tag = name.split(":")
        container.commit(
            repository=repository,
            tag=tag,
            changes=[f"ENTRYPOINT {json.dumps(config['Entrypoint'])}", f"CMD {json.dumps(config['Cmd'])}"],
        )
    finally:
        container.remove(force=True)
    try:
        yield name
    finally:
        client().images.remove(name, force=True)


@pytest.mark.parametrize("plant", [None, *AGENT_PLANTS])
def test_an_agent_image_that_links_the_area_or_the_tree_elsewhere_does_not_start(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, plant: str | None
) -> None:
    with launching(settings, integrity_images, tmp_path, "sandbox") as launcher:
        task = launcher.task("c-demo")
        with _agent_image_after(settings, task, AGENT_PLANTS[plant] if plant else "true") as image:
            run = launcher.start(command=["true"], hold=False, image=image)
            try:
                status = run.live.wait(300)
                collect(run.live.grader, run.run_dir)
                logs, result = run.logs(), read_result(run.run_dir)
            finally:
                run.close()
    if plant is None:  # the positive control: the same image, unplanted, is graded
        assert "the agent's tree is a volume (ext4)" in logs, logs[-3000:]
        assert result is not None and result.status == "failed", result
        return
    assert "refusing to start:" in logs and ("must be" in logs or "must not exist" in logs), logs[-3000:]
    assert "daemon ready" not in logs and status != 0
    assert result is not None and result.status == "error", result


TOOL_LAYER = "/opt/ssebench/venv/bin/python -I -c 'from ssebench.runtime import toollayer; toollayer.{step}'"
CASE_PLANTS = {
    "area a link into the tree": f"rm -rf {RUNNER_DIR} && ln -s /src/tlvkit {RUNNER_DIR}",
    "area a file": f"rm -rf {RUNNER_DIR} && touch {RUNNER_DIR}",
    "directory above it uid 1000's": "chown 1000 /var/lib",
    "directory above it writable by all": "chmod 0777 /var",
    "directory above it a link": "mv /var/lib /var/lib.real && ln -s /var/lib.real /var/lib",
}
# Each run mounts the agent's tree as a volume at config.yaml's source: a link on the way would send it elsewhere.
TREE_PLANTS = {
    "tree a link": "mv /src/tlvkit /src/tlvkit.real && ln -s /src/tlvkit.real /src/tlvkit",
    "tree a link to the task's files": "mv /src/tlvkit /src/tlvkit.real && ln -s /ssebench /src/tlvkit",
    "directory above it uid 1000's": "chown 1000 /src",
    "directory above it writable by all": "chmod 0777 /src",
    "directory above it a link": "mv /src /src.real && ln -s /src.real /src",
}


def _tool_layer_after(settings: Settings, images: list[Task], plant: str, step: str) -> tuple[int, str]:
    """Run `plant`, then a step of the tool layer, as root in c-demo's tool image: its status and log."""
    task = next(t for t in images if t.id == "c-demo")
    names = image_names(settings, task, "dummy", "sandbox")
    runtime = DockerBackend().runtime_volume(settings, names["runtime"])
    script = f"set -e; {plant}; {TOOL_LAYER.format(step=step)}"
    container = client().containers.run(
        names["tool"],
        ["-c", script],
        entrypoint="bash",
        user="root",
        network_mode="none",
        detach=True,
        volumes={runtime: {"bind": "/opt/ssebench", "mode": "ro"}},
    )
    try:
        status = container.wait(timeout=120)["StatusCode"]
        return status, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("plant", [None, *CASE_PLANTS])
def test_the_tool_layer_refuses_a_case_image_whose_area_is_a_link_or_another_users(
    settings: Settings, integrity_images: list[Task], plant: str | None
) -> None:
    status, logs = _tool_layer_after(
        settings, integrity_images, CASE_PLANTS[plant] if plant else "true", "make_runtime_dirs()"
    )
    if plant is None:  # the positive control: the image as it is passes
        assert status == 0, logs
    else:
        assert status != 0 and "toollayer:" in logs and "must be" in logs, logs


@pytest.mark.parametrize("plant", [None, *TREE_PLANTS])
def test_the_tool_layer_refuses_a_case_image_whose_tree_is_a_link_or_reached_through_another_users(
    settings: Settings, integrity_images: list[Task], plant: str | None
) -> None:
    step = 'prepare_source(toollayer.load_taskfile(toollayer.Path("/ssebench/config.yaml")))'
    status, logs = _tool_layer_after(settings, integrity_images, TREE_PLANTS[plant] if plant else "true", step)
    if plant is None:  # the positive control: the image as it is passes
        assert status == 0, logs
    else:
        assert status != 0 and "toollayer: config.yaml: source:" in logs and "must be" in logs, logs
