"""Building the images a set of tasks needs: the OS image, then each task's plan, each layer reused, pulled
or made (`ssebench.layers`) under a per-image lock."""

from __future__ import annotations

import contextlib
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

from ssebench.agent import Agent
from ssebench.bootstrap import ensure_os_image
from ssebench.engine import containers, images
from ssebench.errors import ImageBuildError, SSEBenchError
from ssebench.image import LABEL_HASH, RUNTIME_SOURCES, Layer, lock_path, log_path, plan
from ssebench.layers import build_layer
from ssebench.registry import fetch, publish
from ssebench.settings import Settings
from ssebench.task import Task
from ssebench.wheelhouse import ensure_wheelhouse

Say = Callable[[str], None]
T = TypeVar("T")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def probe_python(image: str) -> tuple[str, str]:
    """(major.minor, machine) of the python3 in `image`."""
    code = "import platform,sys; print('%d.%d' % sys.version_info[:2], platform.machine())"
    out = containers().run(image, ["python3", "-c", code])
    python, machine = out.decode().split()
    return python, machine


def runtime_stager(settings: Settings, base_image: str) -> Callable[[Path], None]:
    """Fill the runtime layer's build context: wheels for the base's Python, and the sources."""

    def stage(context: Path) -> None:
        python, machine = probe_python(base_image)
        wheels = ensure_wheelhouse(settings, python, machine)
        shutil.copytree(wheels, context / "wheels", copy_function=_link_or_copy)
        runtime, sdk = RUNTIME_SOURCES
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(runtime, context / "lib" / "ssebench" / "runtime", ignore=ignore)
        shutil.copytree(sdk, context / "lib" / "sse", ignore=ignore)
        shutil.copy(settings.images_dir / "runtime" / "Dockerfile", context / "Dockerfile")

    return stage


def _link_or_copy(src: str, dst: str) -> None:
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)


@dataclass
class BuildReport:
    """What `ensure` did with each layer."""

    built: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    # From the registry (--registry) instead of built here, and pushed to it.
    pulled: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    # How long each image built here took, in seconds.
    seconds: dict[str, float] = field(default_factory=dict)


def ensure_layers(
    settings: Settings,
    layers: Iterable[Layer],
    *,
    force: bool = False,
    report: BuildReport | None = None,
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    cancel: threading.Event | None = None,
    push: bool = False,
) -> BuildReport:
    """Reuse each layer whose image carries its digest; pull or build the others, parents first.

    With a registry (the `image_registry` setting), a layer this engine lacks
    is pulled from it when it holds the plan's digest, and what is built here
    is pushed to it; `push` pushes the reused layers too.

    A per-image file lock makes concurrent builders (threads of one call,
    xdist workers, several pytest processes) wait for each other instead of
    building twice. A shared `report` carries what was already built across
    calls and threads, so a `force` rebuilds each image once.
    """
    report = report if report is not None else BuildReport()
    for layer in layers:
        if (
            layer.image in report.built
            or (layer.image in report.reused and not force)
            or (layer.image in report.pulled)
        ):
            if push:
                _push_once(settings, layer, report)
            continue
        if not force and is_current(layer):
            report.reused.append(layer.image)
        else:
            with FileLock(str(lock_path(settings, layer.image))):
                if layer.image in report.built:
                    pass  # another thread of this call built it while this one waited
                elif not force and is_current(layer):
                    report.reused.append(layer.image)
                elif not force and fetch(settings, layer.image, _carries(layer.digest)):
                    say(f"pulled   {layer.kind:7} {layer.image} from {settings.image_registry}")
                    report.pulled.append(layer.image)
                else:
                    started = time.monotonic()
                    say(f"building {layer.kind:7} {layer.image} (log: {log_path(settings, layer.image)})")
                    build_layer(settings, layer, nocache=force, cancel=cancel)
                    report.seconds[layer.image] = time.monotonic() - started
                    say(f"built    {layer.kind:7} {layer.image} in {report.seconds[layer.image]:.0f}s")
                    report.built.append(layer.image)
        for alias in layer.aliases:
            if images().id(alias) != images().id(layer.image):
                images().tag(layer.image, alias)
        if push:
            _push_once(settings, layer, report)
        elif settings.image_registry and layer.image in report.built:
            # A machine's own build is shared if it can be; a refused push does not fail its run.
            try:
                _push_once(settings, layer, report)
            except SSEBenchError as exc:
                say(f"ssebench: {exc}")
    return report


def _carries(digest: str) -> Callable[[dict[str, str]], bool]:
    """Whether an image's labels say it is the layer of `digest` (what a pull from the registry must be)."""
    return lambda labels: labels.get(LABEL_HASH) == digest


def _push_once(settings: Settings, layer: Layer, report: BuildReport) -> None:
    if settings.image_registry and layer.image not in report.pushed:
        publish(settings, layer.image)
        report.pushed.append(layer.image)


def is_current(layer: Layer) -> bool:
    """Whether the engine's image of `layer` carries its digest."""
    labels = images().labels(layer.image)
    return labels is not None and labels.get(LABEL_HASH) == layer.digest


@dataclass
class BuildOutcome:
    report: BuildReport = field(default_factory=BuildReport)
    failures: dict[str, ImageBuildError] = field(default_factory=dict)


def task_plan(
    settings: Settings, task: Task, os_id: str, agent: Agent | None = None, modes: tuple[str, ...] = ("sandbox",)
) -> list[Layer]:
    def stager(language: str) -> Callable[[Path], None]:
        return runtime_stager(settings, f"{settings.prefix}/base-{language}:{settings.base_version}")

    return plan(settings, task, os_id, agent, stager, modes)


def build_images(
    settings: Settings,
    tasks: Iterable[Task],
    agent: Agent | None = None,
    *,
    modes: tuple[str, ...] = ("sandbox",),
    force: bool = False,
    jobs: int | None = None,
    say: Say = _stderr,
    push: bool = False,
) -> BuildOutcome:
    """Make every layer of every task current; a task whose build fails does not stop the others.

    With an agent, its images for each of `modes`: one per task in sandbox
    mode, one for all tasks in sidecar mode.

    The bases come first, all at once (unless `jobs` is 1); then up to `jobs`
    tasks (default: the `build_jobs` setting) build their chains at once;
    layers they share wait for each other on the per-image lock.
    An interrupt or an engine failure returns at once and cancels the rest:
    each build in flight stops at its next output without tagging anything,
    or when the process ends, which closes its connection.
    """
    outcome = BuildOutcome()
    os_id = ensure_os_image(settings)
    if push or settings.image_registry:
        try:
            publish(settings, settings.os_image)
        except SSEBenchError as exc:
            if push:
                raise
            say(f"ssebench: {exc}")
    tasks = list(tasks)
    cancel = threading.Event()
    plans = {task.id: task_plan(settings, task, os_id, agent, modes) for task in tasks}

    def base(layer: Layer) -> None:
        with contextlib.suppress(ImageBuildError):  # the chains that need it try again, and say so
            ensure_layers(settings, [layer], force=force, report=outcome.report, say=say, cancel=cancel, push=push)

    def chain(task: Task) -> None:
        try:
            ensure_layers(
                settings, plans[task.id], force=force, report=outcome.report, say=say, cancel=cancel, push=push
            )
        except ImageBuildError as exc:
            outcome.failures[task.id] = exc

    # The bases first, all at once: each is mostly Debian's packages coming over the network, and every
    # chain of its language waits for it.
    bases = list({plan[0].image: plan[0] for plan in plans.values()}.values())
    _each(bases, base, len(bases) if (jobs or settings.build_jobs) > 1 else 1, cancel)
    _each(tasks, chain, min(jobs or settings.build_jobs, len(tasks)), cancel)
    outcome.failures = {t.id: outcome.failures[t.id] for t in tasks if t.id in outcome.failures}
    return outcome


def _each(items: list[T], work: Callable[[T], None], workers: int, cancel: threading.Event) -> None:
    """`work` on each item, in up to `workers` threads; the first error other than what `work` handles
    cancels the rest and is raised."""
    if workers <= 1:
        for item in items:
            work(item)
        return
    # Daemon threads, not a pool that is joined at exit: when the process ends
    # on an interrupt, their connections close and the engine drops the builds
    # at once (and their containers) instead of finishing them first.
    pending: queue.SimpleQueue[T] = queue.SimpleQueue()
    for item in items:
        pending.put(item)
    errors: list[BaseException] = []

    def worker() -> None:
        while not cancel.is_set():
            try:
                item = pending.get_nowait()
            except queue.Empty:
                return
            try:
                work(item)
            except BaseException as exc:  # more than a failed build: the engine, the disk...
                errors.append(exc)
                cancel.set()

    threads = [threading.Thread(target=worker, name=f"ssebench-build-{n}", daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive() and not errors:
                thread.join(0.2)
    except BaseException:
        cancel.set()
        raise
    if errors:
        raise errors[0]
