"""The image pipeline against a real engine: reuse, rebuild, protections, failures."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.engine import client, image_id, list_containers
from ssebench.image import image_names, log_path
from ssebench.settings import Settings
from ssebench.task import Task, load_task
from tests.helpers import DEMO, runtime_of, write_dataset

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _remove_dataset_images(dataset: str) -> None:
    for img in client().images.list(filters={"label": f"ssebench.dataset={dataset}"}):
        client().images.remove(img.id, force=True)


@pytest.fixture
def scratch_dataset(tmp_path: Path) -> Iterator[Path]:
    """An empty dataset whose images are removed afterwards."""
    name = f"itest{tmp_path.name[-12:].replace('_', '').lower()}"
    folder = write_dataset(tmp_path, name=name, tasks=())
    yield folder
    _remove_dataset_images(name)


def test_second_build_reuses_every_layer(settings: Settings, demo_images: list[Task]) -> None:
    outcome = build_images(settings, demo_images, load_agent(settings.agents_dir, "dummy"))
    assert outcome.report.built == []
    # 3 bases, 3 runtimes, and case, tool, agent of each task.
    assert len(outcome.report.reused) == 3 + 3 + 3 * 3


def test_cli_says_nothing_to_build(demo_images: list[Task]) -> None:
    done = subprocess.run([sys.executable, "-m", "ssebench.cli", "images", "build", str(DEMO), "--agent", "dummy"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "nothing to build: all 15 images are current" in done.stdout


def test_changing_run_sh_rebuilds_that_tasks_case_tool_agent_only(
    settings: Settings, demo_images: list[Task], scratch_dataset: Path
) -> None:
    shutil.copytree(DEMO / "c-demo", scratch_dataset / "c-demo")
    dummy = load_agent(settings.agents_dir, "dummy")
    other = next(t for t in demo_images if t.id == "go-demo")
    first = build_images(settings, [load_task(scratch_dataset / "c-demo"), other], dummy)
    assert not first.failures
    run = scratch_dataset / "c-demo" / "sse" / "run.sh"
    run.write_text(run.read_text() + "\n# an edit\n")
    task = load_task(scratch_dataset / "c-demo")
    second = build_images(settings, [task, other], dummy)
    names = image_names(settings, task, "dummy")
    assert sorted(second.report.built) == sorted([names["case"], names["tool"], names["agent"]])


PROTECTION_CHECKS = r"""
cd "$1"
echo "commits=$(git log --oneline | wc -l) $(git log --format=%s)"
echo "id=$(id)"
for p in /ssebench /ssebench-repo /var/lib/ssebench; do
  ls "$p" >/dev/null 2>&1 && echo "listable=$p"
  cat "$p"/* >/dev/null 2>&1 && echo "readable=$p"
done
cat /ssebench/config.yaml /ssebench/diffs/patch.diff /ssebench/scripts/run.sh >/dev/null 2>&1 && echo "readable=secret"
echo "worldwritable=$(find / -xdev -perm -o+w ! -type l ! -perm -1000 2>/dev/null | wc -l)"
echo "venvwritable=$(find /opt/ssebench -writable 2>/dev/null | wc -l)"
echo "venvfiles=$(find /opt/ssebench -type f 2>/dev/null | wc -l)"
echo "source_owner=$(stat -c %U "$1")"
"""

RUNNER_CHECKS = r"""
echo "runner_venvwritable=$(find /opt/ssebench -writable 2>/dev/null | wc -l)"
cat /ssebench/scripts/build.sh >/dev/null 2>&1 && echo "runner_reads_build=yes"
cat /ssebench/config.yaml >/dev/null 2>&1 && echo "runner_reads_config=yes"
cat /ssebench/diffs/patch.diff >/dev/null 2>&1 && echo "runner_reads_patch=yes"
ls /ssebench-repo >/dev/null 2>&1 && echo "runner_lists_repo=yes"
echo "runner_id=$(id)"
"""


def _as(user: str, image: str, script: str, *args: str, runtime: dict[str, dict[str, str]]) -> str:
    out = client().containers.run(image, ["-c", script, "check", *args], entrypoint="bash", user=user,
                                  remove=True, network_disabled=True, volumes=runtime)
    return out.decode()


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_tool_image_keeps_the_answer_from_model(settings: Settings, demo_images: list[Task], task_id: str) -> None:
    task = next(t for t in demo_images if t.id == task_id)
    tool = image_names(settings, task)["tool"]
    runtime = runtime_of(settings, task)
    out = _as("1000", tool, PROTECTION_CHECKS, task.config.source, runtime=runtime)
    assert "commits=1 buggy commit" in out
    assert "id=uid=1000(model) gid=1000(model) groups=1000(model)" in out
    assert "listable=" not in out and "readable=" not in out
    assert "worldwritable=0" in out
    assert "venvwritable=0" in out
    assert int(out.split("venvfiles=")[1].split()[0]) > 1000  # the runtime is there, as in a run
    assert "source_owner=model" in out

    runner = _as("sse-runner", tool, RUNNER_CHECKS, runtime=runtime)
    assert "runner_venvwritable=0" in runner
    assert "runner_reads_build=yes" in runner  # it must run the build script in place
    assert "runner_reads_config" not in runner and "runner_reads_patch" not in runner
    assert "runner_lists_repo" not in runner
    assert "groups=" in runner and "model" not in runner


def test_failing_dockerfile_is_one_line_and_leaves_nothing(scratch_dataset: Path) -> None:
    shutil.copytree(DEMO / "c-demo", scratch_dataset / "c-demo")
    dockerfile = scratch_dataset / "c-demo" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo the-build-breaks && false\n")
    before = {c["Id"] for c in list_containers()}
    done = subprocess.run([sys.executable, "-m", "ssebench.cli", "dataset", "validate", str(scratch_dataset)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("c-demo:")]
    assert "the case layer does not build" in line and "full log:" in line
    assert {c["Id"] for c in list_containers()} == before
    name = scratch_dataset.name
    assert image_id(f"ssebench/case/{name}/c-demo:latest") is None
    assert image_id(f"ssebench/tool/{name}/c-demo:0.1.0") is None


def test_ctrl_c_stops_parallel_builds_and_leaves_nothing(demo_images: list[Task], scratch_dataset: Path) -> None:
    marker = f"slow-step-{uuid.uuid4().hex[:12]}"  # unique per run: no other session's containers count
    for task_id in ("slow-one", "slow-two"):
        shutil.copytree(DEMO / "c-demo", scratch_dataset / task_id)
        config = scratch_dataset / task_id / "sse" / "config.yaml"
        config.write_text(config.read_text().replace("id: c-demo", f"id: {task_id}"))
        dockerfile = scratch_dataset / task_id / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + f"RUN echo {marker} && sleep 300\n")
    build = subprocess.Popen([sys.executable, "-m", "ssebench.cli", "images", "build", str(scratch_dataset),
                              "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def slow_steps(all: bool) -> int:
        # Containers come and go meanwhile: list them in one call, never inspect each.
        return sum(marker in (c.get("Command") or "") for c in list_containers(all=all))

    try:
        deadline = time.monotonic() + 300
        while slow_steps(all=False) < 2:  # both slow steps under way at once
            assert build.poll() is None and time.monotonic() < deadline, build.communicate()
            time.sleep(1)
        interrupted = time.monotonic()
        build.send_signal(signal.SIGINT)
        out, err = build.communicate(timeout=30)
        assert time.monotonic() - interrupted < 15 and build.returncode == 130, (out, err)
        assert err.strip().endswith("interrupted")
        while slow_steps(all=True):
            assert time.monotonic() - interrupted < 60, "the engine kept the interrupted builds' containers"
            time.sleep(1)
    finally:
        build.kill()
        build.wait()
    for task_id in ("slow-one", "slow-two"):
        assert image_id(f"ssebench/case/{scratch_dataset.name}/{task_id}:latest") is None


def test_an_agent_layer_made_in_one_commit_matches_dockers_build_of_its_dockerfile(
        settings: Settings, demo_images: list[Task]) -> None:
    """The dummy agent's layer on c-demo is made without a Dockerfile build (ssebench.agentlayer); Docker's
    own build of the same Dockerfile on the same tool image gives the same file and configuration."""
    import io
    import tarfile

    task = next(t for t in demo_images if t.id == "c-demo")
    names = image_names(settings, task, "dummy")
    agent_dir = settings.agents_dir / "dummy"
    ours = names["agent"]
    assert "copies" in log_path(settings, ours).read_text()  # it was made by the one-commit path
    theirs = "ssebench-tests/agent-layer-by-docker:latest"
    client().images.build(path=str(agent_dir), buildargs={"SSEBENCH_TOOL": names["tool"]}, tag=theirs, rm=True,
                          forcerm=True, pull=False)
    try:
        def seen(image: str) -> tuple[object, ...]:
            config = client().api.inspect_image(image)["Config"]
            made = client().api.create_container(image, network_disabled=True)["Id"]
            try:
                stream, _ = client().api.get_archive(made, "/opt/agent")
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                    files = {}
                    for m in archive.getmembers():
                        data = archive.extractfile(m).read() if m.isfile() else b""  # type: ignore[union-attr]
                        files[m.name] = (m.uid, m.gid, m.mode & 0o7777, m.type, data)
            finally:
                client().api.remove_container(made, force=True)
            return (files, config["Cmd"], config["Entrypoint"], config["User"], config["WorkingDir"],
                    sorted(config["Env"] or []))
        assert seen(ours) == seen(theirs)
        assert client().api.inspect_image(ours)["Config"]["Labels"]["ssebench.layer"] == "agent"
    finally:
        client().images.remove(theirs, force=True)
