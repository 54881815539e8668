"""How the harness's cost grows with the work: 3 tasks, 12, the pilot's; one worker and two.

    python benchmarks/scaling.py [--sizes demo,demo-x4,pilot] [--json scaling.json]

For each dataset (`demo`: datasets/demo; `demo-x4`: twelve tasks, four
copies of each demo task under ids of their own, made in a scratch folder;
`pilot`: datasets/pilot) it builds the dummy agent's images (timed: what the
tasks not built yet cost), decides again that nothing needs rebuilding
(timed, per task), reads the disk each task adds beyond the layers every task
shares (its case, tool and agent layers: the agent image's size less its
base's) and what of it the harness adds (its tool and agent layers, beyond
its case image), runs each task's floor once (a plain `docker run` of its
tool image doing its build, PoCs, tests and hidden tests, as
benchmarks/overhead.py does; a floor of 30 s or more also as sse-runner, the
user a run's scripts run as), then sweeps every task with the dummy agent through pytest at -n 1
and at -n 2, with the CPUs the machine kept busy. A run's overhead is the
sweep's wall time less the sum of the floors, over the runs (at -n 1); the
speedup is -n 1's wall over -n 2's. For each task whose floor is 30 s or
more it also sets the task's run at -n 1 (its pytest item's time, from the
sweep's junit XML) against its floor. It prints the tables and writes the
figures as JSON.

Needs the OS and base images (`ssebench images bootstrap`); the pilot's
images take about 20 minutes to build cold (4 with the bases built), its
floors about 14 and its sweeps about 40.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from overhead import cpu_busy, floor, image_size  # this folder is on the path when the script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COPIES = 4
LONG_FLOOR_S = 30.0  # the performance issue's long tasks, whose run should cost at most 1.1x the floor


def copied_demo(scratch: Path, copies: int) -> Path:
    """A dataset of `copies` copies of each demo task, each under an id of its own."""
    folder = scratch / f"demox{copies}"
    folder.mkdir()
    (folder / "dataset.yaml").write_text(f"version: demo-x{copies}-v1\n")
    for task in sorted(p for p in (ROOT / "datasets" / "demo").iterdir() if (p / "sse").is_dir()):
        for n in range(1, copies + 1):
            copy = folder / f"{task.name}-{n}"
            shutil.copytree(task, copy)
            config = copy / "sse" / "config.yaml"
            config.write_text(config.read_text().replace(f"id: {task.name}", f"id: {copy.name}", 1))
    return folder


def sweep(dataset: Path, workers: int, results: Path) -> dict[str, Any]:
    """The dataset's dummy runs through pytest at `-n workers`: the wall time, the CPUs kept busy, and each
    task's item time (setup, call and teardown, from the junit XML: pytest's start and collection apart)."""
    junit = results.with_suffix(".xml")
    started, cpu = time.monotonic(), cpu_busy()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(dataset),
            "--agent",
            "dummy",
            "-q",
            "-p",
            "no:cacheprovider",
            "--results",
            str(results),
            "-n",
            str(workers),
            f"--junitxml={junit}",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"the sweep of {dataset} at -n {workers} failed:\n{done.stdout[-3000:]}")
    return {"wall_s": wall, "cpus_busy": (cpu_busy() - cpu) / wall, "item_s": item_times(junit)}


def item_times(junit: Path) -> dict[str, float]:
    """Each task's item time in a junit XML report, by the `ssebench.task` property of its test case."""
    times = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "ssebench.task" in props:  # an item that never became a run (a collection error) names no task
            times[str(props["ssebench.task"])] = float(case.get("time", "nan"))
    return times


def measure(name: str, dataset: Path, scratch: Path) -> dict[str, Any]:
    from ssebench.agent import load_agent
    from ssebench.build import build_images
    from ssebench.dataset import load_dataset
    from ssebench.image import image_names
    from ssebench.settings import get_settings

    settings = get_settings()
    tasks = load_dataset(dataset).tasks
    dummy = load_agent(settings.agents_dir, "dummy")
    started = time.monotonic()
    outcome = build_images(settings, tasks, dummy, say=lambda message: None)
    if outcome.failures:
        raise SystemExit(f"{name}: {next(iter(outcome.failures.values()))}")
    built_s, built = time.monotonic() - started, len(outcome.report.built)
    started = time.monotonic()
    build_images(settings, tasks, dummy, say=lambda message: None)
    current_s = time.monotonic() - started
    names = {t.id: image_names(settings, t, "dummy") for t in tasks}
    disk = {t: image_size(n["agent"]) - image_size(n["base"]) for t, n in names.items()}
    # What the harness adds to a task (its tool and agent layers), beyond the task's own case image.
    harness_disk = {t: image_size(n["agent"]) - image_size(n["case"]) for t, n in names.items()}
    floors, runner_floors = {}, {}
    for task in tasks:
        floors[task.id] = floor(task, names[task.id]["tool"])
        if floors[task.id] >= LONG_FLOOR_S:  # the same work as the user a run's scripts run as
            runner_floors[task.id] = floor(task, names[task.id]["tool"], as_runner=True)
        print(
            f"{name}: floor of {task.id} {floors[task.id]:.1f} s"
            + (f", as sse-runner {runner_floors[task.id]:.1f} s" if task.id in runner_floors else ""),
            file=sys.stderr,
        )
    sweeps = {f"n{w}": sweep(dataset, w, scratch / f"{name}-n{w}") for w in (1, 2)}
    total_floor = sum(floors.values())
    return {
        "tasks": len(tasks),
        "images_built": built,
        "images_build_s": built_s,
        "nothing_to_build_s_per_task": current_s / len(tasks),
        "disk_per_task_bytes": sum(disk.values()) / len(tasks),
        "disk_bytes": disk,
        "harness_disk_per_task_bytes": sum(harness_disk.values()) / len(tasks),
        "harness_disk_bytes": harness_disk,
        "floor_s": floors,
        "floor_total_s": total_floor,
        "floor_as_runner_s": runner_floors,
        "sweeps": sweeps,
        "overhead_per_run_s": (sweeps["n1"]["wall_s"] - total_floor) / len(tasks),
        "speedup": sweeps["n1"]["wall_s"] / sweeps["n2"]["wall_s"],
        # Each task's run at -n 1 against its floor: the ratio the performance issue sets for long tasks.
        "run_over_floor": {
            t: sweeps["n1"]["item_s"][t] / f for t, f in floors.items() if f > 0 and t in sweeps["n1"]["item_s"]
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="demo,demo-x4,pilot", help="comma-separated: demo, demo-x4, pilot")
    parser.add_argument("--json", type=Path, default=Path("scaling.json"))
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="ssebench-scaling-") as tmp:
        scratch = Path(tmp)
        for name in args.sizes.split(","):
            dataset = {"demo": ROOT / "datasets" / "demo", "pilot": ROOT / "datasets" / "pilot"}.get(name)
            if name == "demo-x4":
                dataset = copied_demo(scratch, COPIES)
            if dataset is None:
                raise SystemExit(f"--sizes: unknown {name!r}; give demo, demo-x4 or pilot")
            report["datasets"][name] = measure(name, dataset, scratch)
            args.json.write_text(json.dumps(report, indent=2) + "\n")  # what is measured is never lost
        if "demo-x4" in args.sizes.split(","):
            remove_copies(f"demox{COPIES}")
    print_table(report)
    print(f"\nwritten: {args.json}")
    return 0


def remove_copies(dataset: str) -> None:
    from ssebench.engine import client

    for img in client().images.list(filters={"label": f"ssebench.dataset={dataset}"}):
        client().images.remove(img.id, force=True)


def print_table(report: dict[str, Any]) -> None:
    print(f"SSEBench scaling, dummy agent, {report['machine']['cpus']} CPUs")
    print(
        f"{'dataset':9} {'tasks':>5} {'built':>12} {'current':>9} {'disk/task':>9} {'harness':>8} {'floors':>8} "
        f"{'-n 1':>8} {'over/run':>8} {'-n 2':>8} {'speedup':>7} {'CPUs busy 1/2':>14}"
    )
    for name, d in report["datasets"].items():
        s = d["sweeps"]
        harness = (
            f"{d['harness_disk_per_task_bytes'] / 1e6:6.1f}MB" if "harness_disk_per_task_bytes" in d else "       -"
        )
        print(
            f"{name:9} {d['tasks']:5} {d['images_built']:3} in {d['images_build_s']:4.0f}s "
            f"{d['nothing_to_build_s_per_task']:7.3f}s {d['disk_per_task_bytes'] / 1e6:7.1f}MB {harness} "
            f"{d['floor_total_s']:7.1f}s {s['n1']['wall_s']:7.1f}s {d['overhead_per_run_s']:+7.2f}s "
            f"{s['n2']['wall_s']:7.1f}s {d['speedup']:6.2f}x {s['n1']['cpus_busy']:6.2f} / {s['n2']['cpus_busy']:.2f}"
        )
    long = [
        (name, task, f, d["sweeps"]["n1"]["item_s"][task], ratio)
        for name, d in report["datasets"].items()
        for task, ratio in d["run_over_floor"].items()
        if (f := d["floor_s"][task]) >= LONG_FLOOR_S
    ]
    if long:
        print(
            f"\ntasks whose floor is at least {LONG_FLOOR_S:.0f} s: the run at -n 1 (its item) against the floor, "
            "and against the floor's work done as sse-runner"
        )
        print(f"{'dataset':9} {'task':36} {'floor':>8} {'run':>8} {'ratio':>6} {'as runner':>10} {'ratio':>6}")
        for name, task, f, run, ratio in sorted(long, key=lambda row: -row[2]):
            runner = report["datasets"][name].get("floor_as_runner_s", {}).get(task)
            tail = f" {runner:9.1f}s {run / runner:5.2f}x" if runner else ""
            print(f"{name:9} {task:36} {f:7.1f}s {run:7.1f}s {ratio:5.2f}x{tail}")


if __name__ == "__main__":
    sys.exit(main())
