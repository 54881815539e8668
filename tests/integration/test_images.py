"""The image pipeline against a real engine: reuse, rebuild, protections, failures."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.engine import client, images
from ssebench.image import image_names, log_path
from ssebench.settings import Settings
from ssebench.simplelayer import AGENT
from ssebench.task import Task, load_task
from tests.helpers import DEMO, interruptible, runtime_of, write_dataset

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
    done = subprocess.run(
        [sys.executable, "-m", "ssebench.cli", "images", "build", str(DEMO), "--agent", "dummy"],
        capture_output=True,
        text=True,
        check=False,
    )
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
echo "gitdirs=$(find . -name .git | wc -l)"
echo "commits=$(git --git-dir=/var/lib/ssebench-capture/base.git log --oneline | wc -l) $(git --git-dir=/var/lib/ssebench-capture/base.git log --format=%s)"
echo "id=$(id)"
for p in /ssebench /var/lib/ssebench; do
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
echo "runner_id=$(id)"
"""


def _as(user: str, image: str, script: str, *args: str, runtime: dict[str, dict[str, str]]) -> str:
    out = client().containers.run(
        image,
        ["-c", script, "check", *args],
        entrypoint="bash",
        user=user,
        remove=True,
        network_disabled=True,
        volumes=runtime,
    )
    return str(out.decode())


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_tool_image_keeps_the_answer_from_model(settings: Settings, demo_images: list[Task], task_id: str) -> None:
    task = next(t for t in demo_images if t.id == task_id)
    tool = image_names(settings, task)["tool"]
    runtime = runtime_of(settings, task)
    out = _as("1000", tool, PROTECTION_CHECKS, task.config.source, runtime=runtime)
    # The image keeps the case's tree once, with no history; its one commit is capture's base, which each run
    # gives the agent as its tree's .git (a run's tree is tested in tests/integrity).
    assert "gitdirs=0" in out
    assert "commits=1 buggy commit" in out
    assert "id=uid=1000(model) gid=1000(model) groups=1000(model)" in out
    assert "listable=" not in out and "readable=" not in out
    assert "worldwritable=0" in out
    assert "venvwritable=0" in out
    assert int(out.split("venvfiles=")[1].split()[0]) > 1000  # the runtime is there, as in a run
    assert "source_owner=root" in out  # the case's, as it made it: a run gives its copy to model

    runner = _as("sse-runner", tool, RUNNER_CHECKS, runtime=runtime)
    assert "runner_venvwritable=0" in runner
    assert "runner_reads_build=yes" in runner  # it must run the build script in place
    assert "runner_reads_config" not in runner and "runner_reads_patch" not in runner
    assert "groups=" in runner and "model" not in runner


def test_failing_dockerfile_is_one_line_and_leaves_nothing(scratch_dataset: Path) -> None:
    shutil.copytree(DEMO / "c-demo", scratch_dataset / "c-demo")
    dockerfile = scratch_dataset / "c-demo" / "Dockerfile"
    marker = f"the-build-breaks-{uuid.uuid4().hex[:12]}"  # unique: no other test's containers count
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo {marker} && false\n")
    done = subprocess.run(
        [sys.executable, "-m", "ssebench.cli", "dataset", "validate", str(scratch_dataset), "--build"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("c-demo:")]
    assert "the case layer does not build" in line and "full log:" in line
    assert not [c for c in client().api.containers(all=True) if marker in (c.get("Command") or "")]
    name = scratch_dataset.name
    assert images().id(f"ssebench/case/{name}/c-demo:latest") is None
    assert images().id(f"ssebench/tool/{name}/c-demo:0.1.0") is None


def test_ctrl_c_stops_parallel_builds_and_leaves_nothing(demo_images: list[Task], scratch_dataset: Path) -> None:
    marker = f"slow-step-{uuid.uuid4().hex[:12]}"  # unique per run: no other session's containers count
    for task_id in ("slow-one", "slow-two"):
        shutil.copytree(DEMO / "c-demo", scratch_dataset / task_id)
        config = scratch_dataset / task_id / "sse" / "config.yaml"
        config.write_text(config.read_text().replace("id: c-demo", f"id: {task_id}"))
        dockerfile = scratch_dataset / task_id / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + f"RUN echo {marker} && sleep 300\n")
    build = subprocess.Popen(
        [sys.executable, "-m", "ssebench.cli", "images", "build", str(scratch_dataset), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )

    def slow_steps(all: bool) -> int:
        # Containers come and go meanwhile: list them in one call, never inspect each.
        return sum(marker in (c.get("Command") or "") for c in client().api.containers(all=all))

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
        assert images().id(f"ssebench/case/{scratch_dataset.name}/{task_id}:latest") is None


def _seen(image: str, paths: tuple[str, ...], mask: int = 0) -> tuple[object, ...]:
    """What an image holds under `paths` (owner, mode less `mask`, kind, link, content and a file's time of
    each entry) and its configuration, as the engine gives them."""
    import io
    import tarfile

    config = client().api.inspect_image(image)["Config"]
    made = client().api.create_container(image, entrypoint=[], command=["/nonexistent"], network_disabled=True)["Id"]
    files: dict[str, object] = {}
    try:
        for path in paths:
            stream, _ = client().api.get_archive(made, path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                for m in archive.getmembers():
                    data = archive.extractfile(m).read() if m.isfile() else b""  # type: ignore[union-attr]
                    files[f"{path}:{m.name}"] = (
                        m.uid,
                        m.gid,
                        m.mode & 0o7777 & ~mask,
                        m.type,
                        m.linkname,
                        data,
                        m.mtime if m.isfile() else None,
                    )
    finally:
        client().api.remove_container(made, force=True)
    labels = {k: v for k, v in (config.get("Labels") or {}).items() if not k.startswith("ssebench.")}
    return (
        files,
        config["Cmd"],
        config["Entrypoint"],
        config["User"],
        config["WorkingDir"],
        sorted(config["Env"] or []),
        labels,
        config.get("Volumes"),
        config.get("ExposedPorts"),
        config.get("Shell"),
        config.get("Healthcheck"),
        config.get("StopSignal"),
    )


def _remove_prefixed(prefix: str) -> None:
    """Removes the tags under `prefix`, by tag: an image of the same id may carry other names too (a build
    wholly from the builder's cache gives an image that exists already)."""
    for img in client().images.list():
        for tag in img.tags:
            if tag.startswith(prefix + "/"):
                client().images.remove(tag, force=True)


def _dockers_build(context: Path, buildargs: dict[str, str], tag: str, cache: bool = False) -> None:
    """Docker's build of `context`, every step run afresh unless `cache`: the builder's cache keys a COPY by
    its files' contents, not their times, so a cached step would give the times of an earlier checkout's."""
    client().images.build(
        path=str(context), buildargs=buildargs, tag=tag, rm=True, forcerm=True, pull=False, nocache=not cache
    )


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_a_demo_tasks_assembled_case_and_agent_layers_match_dockers_build_of_their_dockerfiles(
    settings: Settings, demo_images: list[Task], task_id: str
) -> None:
    """The demo's case layers and the dummy agent's layers are assembled without Docker's builder
    (ssebench.simplelayer); Docker's own build of the same Dockerfiles on the same parents gives the same
    files and configuration.

    Both sides are made here, from the same files: the session's own images may have been made from an
    earlier checkout of the same content (an image is reused by the digest of its content), whose files
    carry other times."""
    from ssebench.image import plan
    from ssebench.layers import build_layer

    task = next(t for t in demo_images if t.id == task_id)
    names = image_names(settings, task, "dummy")
    os_id = images().id(settings.os_image)
    assert os_id is not None
    layers = {layer.kind: layer for layer in plan(settings, task, os_id, load_agent(settings.agents_dir, "dummy"))}
    prefix = f"ssebench-tests-{uuid.uuid4().hex[:8]}"
    made = {kind: replace(layers[kind], image=f"{prefix}/ours:{kind}") for kind in ("case", "agent")}
    try:
        for layer in made.values():
            build_layer(settings, layer)
            assert "# assembled on" in log_path(settings, layer.image).read_text()
        _dockers_build(task.path, {"SSEBENCH_REGISTRY": settings.prefix}, f"{prefix}/docker:case")
        assert _seen(made["case"].image, ("/src", "/ssebench")) == _seen(f"{prefix}/docker:case", ("/src", "/ssebench"))
        _dockers_build(settings.agents_dir / "dummy", {"SSEBENCH_TOOL": names["tool"]}, f"{prefix}/docker:agent")
        # The agent's files lose what the agent form takes from every mode (the checkout's umask may leave it).
        assert _seen(made["agent"].image, ("/opt",)) == _seen(f"{prefix}/docker:agent", ("/opt",), AGENT.mask)
        for kind, layer in made.items():
            assert client().api.inspect_image(layer.image)["Config"]["Labels"]["ssebench.layer"] == kind
    finally:
        _remove_prefixed(prefix)


# A parent that holds what COPY must leave as it is: folders of other owners and modes on the way, a
# destination folder with files of its own, a file to replace (of another size: the engine's diff on
# fuse-overlayfs misses a file replaced within the same second by one of the same size); or a link on the
# way, which only Docker's build follows as Docker does.
_HOSTILE_PARENT = """\
FROM {os}
RUN mkdir -p /srv/tree/keep /opt/deep /data && echo older > /srv/tree/over.txt && echo kept > /srv/tree/keep/k.txt \\
 && chown 1234:4321 /srv /srv/tree && chmod 0750 /srv && chmod 0775 /srv/tree && chmod 0700 /opt/deep \\
 && chown 77:77 /opt/deep{extra}
ENV FROM_PARENT=1
WORKDIR /tmp
USER 1234
SHELL ["/bin/bash", "-c"]
ENTRYPOINT ["/bin/true"]
CMD ["bash"]
STOPSIGNAL SIGINT
VOLUME /vol
EXPOSE 8080
HEALTHCHECK --interval=5m CMD true
"""
_HOSTILE_CASE = """\
ARG SSEBENCH_REGISTRY
FROM ${{SSEBENCH_REGISTRY}}/base-generic-c:hostile{head}
COPY tree /srv/tree
COPY one.txt /opt/deep/x/
COPY one.txt /var/new/renamed.txt{extra}
WORKDIR /srv/tree/made
WORKDIR /var/new/work
"""
# What the parent or the case adds in each variant, and what the case layer's log then says.
_VARIANTS = {
    "folders-of-others": ("", "", "# assembled on"),
    # A step only Docker makes first: Docker builds it, and the copies after it are assembled on its image.
    "head-and-tail": ("", "head:\nRUN echo made > /tmp/by-run \\\n && chmod 600 /tmp/by-run", "# the head: "),
    "link-on-the-way": (
        " && mv /srv /data/srv && ln -s /data/srv /srv",
        "",
        "# built by Docker: the parent image has a link at /srv",
    ),
    "file-onto-a-folder": ("", "\nCOPY one.txt /data", "# built by Docker: the parent image has a folder at /data"),
    "onbuild": ("\nONBUILD ENV TRIGGERED=1", "", "has ONBUILD steps"),
}


@pytest.mark.parametrize("variant", list(_VARIANTS))
def test_an_assembled_case_layer_on_a_hostile_parent_matches_dockers_build(
    settings: Settings, tmp_path: Path, variant: str
) -> None:
    from ssebench.image import Layer
    from ssebench.layers import build_layer

    parent_extra, case_extra, said = _VARIANTS[variant]
    prefix = f"ssebench-tests-{uuid.uuid4().hex[:8]}"
    parent_dir = tmp_path / "parent"
    parent_dir.mkdir()
    (parent_dir / "Dockerfile").write_text(_HOSTILE_PARENT.format(os=settings.os_image, extra=parent_extra))
    context = tmp_path / "case"
    (context / "tree" / "sub").mkdir(parents=True)
    (context / "tree" / "over.txt").write_text("new\n")
    (context / "tree" / "sub" / "secret").write_text("s\n")
    (context / "tree" / "sub" / "secret").chmod(0o600)
    (context / "tree" / "sub").chmod(0o700)
    (context / "tree" / "run.sh").write_text("#!/bin/sh\n")
    (context / "tree" / "run.sh").chmod(0o750)
    (context / "tree" / "link").symlink_to("over.txt")
    (context / "one.txt").write_text("one\n")
    head = case_extra.removeprefix("head:") if case_extra.startswith("head:") else ""
    (context / "Dockerfile").write_text(_HOSTILE_CASE.format(extra="" if head else case_extra, head=head))
    ours, theirs = f"{prefix}/case:ours", f"{prefix}/case:docker"
    # The parent's VOLUME gives each of Docker's build steps on it an anonymous volume, which the build leaves.
    volumes_before = {v.name for v in client().volumes.list()}
    try:
        _dockers_build(parent_dir, {}, f"{prefix}/base-generic-c:hostile")
        layer = Layer(
            kind="case",
            image=ours,
            dockerfile=context / "Dockerfile",
            context=context,
            buildargs={"SSEBENCH_REGISTRY": prefix},
            digest="test-" + variant,
        )
        build_layer(settings, layer)
        log = log_path(settings, ours).read_text()
        assert said in log, log
        # With the builder's cache: the head's RUN, which our split build had Docker make just now, is then the
        # same layer on both sides (the times of the files it made); its parent was built afresh just now, so
        # nothing older can be cached on it.
        _dockers_build(context, {"SSEBENCH_REGISTRY": prefix}, theirs, cache=True)
        paths = ("/data" if variant == "link-on-the-way" else "/srv", "/opt/deep", "/var/new", "/tmp")
        assert _seen(ours, paths) == _seen(theirs, paths)
        files, *config = _seen(ours, paths)
        assert isinstance(files, dict)
        if variant == "head-and-tail":
            assert files["/tmp:tmp/by-run"][:3] == (1234, 0, 0o600) and files["/tmp:tmp/by-run"][5] == b"made\n"
        if variant in ("folders-of-others", "head-and-tail"):  # what the parent and the copies made
            assert files["/srv:srv"][:3] == (1234, 4321, 0o750) and files["/srv:srv/tree"][:3] == (1234, 4321, 0o775)
            assert files["/srv:srv/tree/keep/k.txt"][5] == b"kept\n" and files["/srv:srv/tree/over.txt"][5] == b"new\n"
            assert files["/srv:srv/tree/run.sh"][:3] == (0, 0, 0o750)
            assert files["/srv:srv/tree/sub/secret"][:3] == (0, 0, 0o600)
            assert files["/opt/deep:deep"][:3] == (77, 77, 0o700)
            assert config[:4] == [["bash"], ["/bin/true"], "1234", "/var/new/work"] and config[-1] == "SIGINT"
    finally:
        _remove_prefixed(prefix)
        for volume in client().volumes.list(filters={"dangling": True}):
            if volume.name not in volumes_before and not (volume.attrs.get("Labels") or {}):
                volume.remove(force=True)
