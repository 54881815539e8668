"""What the harness costs beyond a task's own work, measured side by side.

    python benchmarks/overhead.py [--dataset datasets/demo] [--rounds 3] [--json overhead.json]
                                  [--tasks ID,ID] [--workers] [--sidecar]

Needs the dataset's images for the dummy and reference agents
(`ssebench images build DATASET --agent dummy --agent reference`). Per task,
rounds alternate (A B A B ...):

  floor    a plain `docker run` of the task's tool image doing the task's own
           work once: copy the source, build.sh, run.sh on each PoC, test.sh,
           and the hidden tests (applied to the same tree, test.sh again)
  floor as sse-runner
           the same work as the unprivileged user a run's scripts run as (not
           in the overhead: it shows what running them unprivileged costs by
           itself, apart from the harness's code)
  run      one dummy run of the task through pytest (collection, images
           check, network, container, agent, grading, results), wall clock
  sidecar  (with --sidecar) the same run in sidecar mode: two containers and
           the run's four volumes

and from each run's files: where the container's time went (start to the
entrypoint, daemon and MCP server ready, the agent, grading, the end).
Then, once each: the daemon's round trips (bash `echo hi` and `GET
/version`, over the agent socket raw and through the SDK); deciding that no
image needs rebuilding; building one agent layer without cache (the
harness's way, and Docker's build of the same Dockerfile); the disk a task
adds beyond its case image, and the runtime volume every task of a language
shares; and, with --workers, the dataset's runs (reference and dummy) at
-n 1 against -n 2, with how many CPUs each sweep kept busy. It prints one
table and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layer_build import layer_build  # this folder is on the path when the script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Inside a container, as model: the daemon's round trips, raw (HTTP over the
# Unix socket by hand, one connection) and through the SDK, interleaved.
LATENCY = r"""
import http.client, json, socket, statistics, time
from sse.daemon import Daemon
from sse.tools.bash import execute

class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect("/tmp/sse.sock")

raw = Unix("daemon")
def call(method, path, body=None):
    raw.request(method, path, body=body, headers={"Content-Type": "application/json"})
    reply = raw.getresponse(); data = reply.read(); assert reply.status == 200, data
    return data

d = Daemon()
times = {"bash echo hi (raw)": [], "bash echo hi (SDK)": [], "GET /version (raw)": [], "GET /version (SDK)": []}
for _ in range(CALLS):
    t = time.perf_counter(); call("POST", "/tool/bash", json.dumps({"command": "echo hi"}))
    times["bash echo hi (raw)"].append(time.perf_counter() - t)
    t = time.perf_counter(); assert execute("echo hi").stdout == "hi\n"
    times["bash echo hi (SDK)"].append(time.perf_counter() - t)
    t = time.perf_counter(); call("GET", "/version"); times["GET /version (raw)"].append(time.perf_counter() - t)
    t = time.perf_counter(); d.version(); times["GET /version (SDK)"].append(time.perf_counter() - t)
print(json.dumps({name: [1000 * x for x in xs] for name, xs in times.items()}))
"""


def q(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p95": q(values, 0.95), "n": len(values)}


def floor_script(task: Any, as_runner: bool = False) -> str:
    """The task's own work once, as a plain shell in its tool image: copy, build, PoCs, tests, and the
    hidden tests (applied to the same tree, then the tests again), which grading runs too.

    `as_runner`: the same work as sse-runner (the user a run's scripts run as, in a home of its own), with
    the PoCs, the run script and the hidden tests copied where it may read them, as the bencher stages
    them: what running the task's scripts unprivileged costs by itself, apart from the harness's code.
    """
    config = task.config
    stage = "/tmp/floor-stage" if as_runner else "/ssebench"
    pocs = " ".join(f"{stage}/{p}" for p in config.files.poc)
    hidden = (
        f"git apply -p1 {stage}/{config.files.future_test} && bash /ssebench/{config.scripts.test} >/dev/null 2>&1; "
        if config.files.future_test and config.scripts.test
        else ""
    )
    work = (
        f"cd /tmp/floor && bash /ssebench/{config.scripts.build} >/tmp/floor-build.log 2>&1 || "
        f"{{ tail -20 /tmp/floor-build.log; exit 1; }}; "
        f"for p in {pocs}; do bash {stage}/{config.scripts.run} $p >/dev/null 2>&1; done; "
        f"bash /ssebench/{config.scripts.test} >/dev/null 2>&1; {hidden}exit 0"
    )
    copy = f"set -u; rm -rf /tmp/floor && cp -a {config.source} /tmp/floor && rm -rf /tmp/floor/.git && "
    if not as_runner:
        return copy + work
    staged = [config.scripts.run, *config.files.poc, *([config.files.future_test] if config.files.future_test else [])]
    return (
        copy + f"mkdir -p /tmp/floor-home {stage} && (cd /ssebench && cp --parents {' '.join(staged)} {stage}/) && "
        f"chown -R sse-runner: /tmp/floor /tmp/floor-home {stage} && "
        f"exec setpriv --reuid sse-runner --regid sse-runner --clear-groups env HOME=/tmp/floor-home "
        f"TMPDIR=/tmp/floor-home bash -c {shlex.quote(work)}"
    )


def floor(task: Any, image: str, as_runner: bool = False) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "bash",
            image,
            "-c",
            floor_script(task, as_runner),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the floor of {task.id} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def _stamp(near: float, clock: str) -> float:
    """An entrypoint time stamp (HH:MM:SS.mmm, UTC) as epoch seconds: the one within half a day of `near`."""
    date = datetime.fromtimestamp(near, UTC).strftime("%Y-%m-%d")
    at = datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
    return at + 86400 * round((near - at) / 86400)


def phases(run_dir: Path) -> dict[str, float]:
    """Where a run's container time went, from summary.json's timeline and the entrypoint's lines."""
    from ssebench.inflight import entrypoint_lines

    summary = json.loads((run_dir / "summary.json").read_text())
    started, ended = summary["timeline"]["container_started"], summary["timeline"]["container_ended"]
    said = {
        message.split(":")[0].split(" with ")[0].split(" (")[0]: _stamp(started, stamp)
        for stamp, message in entrypoint_lines((run_dir / "container.log").read_text())
    }
    marks = [
        ("to entrypoint", said.get("starting")),
        ("to agent start", said.get("agent")),
        ("agent", said.get("agent exited")),
        ("grading", said.get("graded")),
        ("end", ended),
    ]
    out, last = {}, started
    for name, at in marks:
        if at is None:
            continue
        out[name] = at - last
        last = at
    out["container"] = ended - started
    return out


def pytest_run(task_dir: Path, results: Path, mode: str = "sandbox") -> tuple[float, Path]:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(task_dir),
            "--agent",
            "dummy",
            "-q",
            "-p",
            "no:cacheprovider",
            "--results",
            str(results),
            "--mode",
            mode,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest failed on {task_dir}:\n{done.stdout[-3000:]}")
    run_dir = max((p for p in results.glob(f"*/*/dummy/*-{mode}-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return elapsed, run_dir


def latency(image: str, runtime: str, calls: int) -> dict[str, dict[str, float]]:
    from ssebench.engine import client
    from ssebench.runtimevolume import runtime_binds

    container = client().containers.run(
        image,
        ["sleep", "3600"],
        detach=True,
        init=True,
        network_disabled=True,
        labels={"ssebench.session": "benchmark"},
        volumes=runtime_binds(runtime),
    )
    try:
        deadline = time.monotonic() + 120
        while b"] agent: " not in container.logs():
            if time.monotonic() > deadline:
                raise SystemExit(container.logs().decode()[-3000:])
            time.sleep(0.1)
        code, out = container.exec_run(
            ["/opt/ssebench/venv/bin/python", "-c", LATENCY.replace("CALLS", str(calls))],
            user="1000",
            environment={"SSE_DAEMON_SOCKET": "/tmp/sse.sock"},
        )
        if code != 0:
            raise SystemExit(out.decode()[-3000:])
        times = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        container.remove(force=True)
    return {name: stats(values) for name, values in times.items()}


def cpu_busy() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O) since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def image_size(ref: str) -> int:
    from ssebench.engine import client

    return int(client().api.inspect_image(ref)["Size"])


def volume_size(volume: str, image: str) -> int:
    """Bytes in a volume, counted by `du` in a container of `image` that mounts it read-only."""
    from ssebench.engine import client

    out = client().containers.run(
        image,
        ["du", "-sb", "/v"],
        entrypoint=[],
        remove=True,
        network_disabled=True,
        volumes={volume: {"bind": "/v", "mode": "ro,nocopy"}},
    )
    return int(out.decode().split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=ROOT / "datasets" / "demo")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: every task)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workers", action="store_true", help="also time the dataset's runs at -n 1 and -n 2")
    parser.add_argument("--sidecar", action="store_true", help="also time each run in sidecar mode")
    parser.add_argument("--json", type=Path, default=Path("overhead.json"))
    args = parser.parse_args()

    from ssebench.agent import load_agent
    from ssebench.build import build_images
    from ssebench.dataset import load_dataset
    from ssebench.image import image_names
    from ssebench.runtimevolume import ensure_runtime_volume
    from ssebench.settings import get_settings

    settings = get_settings()
    dataset = load_dataset(args.dataset)
    wanted = set(filter(None, args.tasks.split(",")))
    tasks = [t for t in dataset.tasks if not wanted or t.id in wanted]
    dummy = load_agent(settings.agents_dir, "dummy")
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "version": dataset.version,
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count()},
        "tasks": {},
    }

    modes = ("sandbox", "sidecar") if args.sidecar else ("sandbox",)
    started = time.monotonic()
    outcome = build_images(settings, tasks, dummy, modes=modes)
    if outcome.failures:
        raise SystemExit(f"build the images first: {next(iter(outcome.failures.values()))}")
    report["images_current_s"] = {"first": time.monotonic() - started}
    started = time.monotonic()
    build_images(settings, tasks, dummy, modes=modes)
    report["images_current_s"]["again"] = time.monotonic() - started
    report["images_current_s"]["per_task"] = report["images_current_s"]["again"] / len(tasks)

    with tempfile.TemporaryDirectory(prefix="ssebench-overhead-") as scratch:
        for task in tasks:
            names = image_names(settings, task, "dummy")
            floors, runner_floors, runs, breakdowns = [], [], [], []
            sidecar_runs, sidecar_breakdowns = [], []
            for _ in range(args.rounds):
                floors.append(floor(task, names["tool"]))
                runner_floors.append(floor(task, names["tool"], as_runner=True))
                elapsed, run_dir = pytest_run(task.path, Path(scratch) / "results")
                runs.append(elapsed)
                breakdowns.append(phases(run_dir))
                if args.sidecar:
                    elapsed, run_dir = pytest_run(task.path, Path(scratch) / "results", "sidecar")
                    sidecar_runs.append(elapsed)
                    sidecar_breakdowns.append(phases(run_dir))
            parts = {k: statistics.median(b[k] for b in breakdowns if k in b) for k in breakdowns[0]}
            report["tasks"][task.id] = {
                "floor_s": stats(floors),
                "floor_as_runner_s": stats(runner_floors),
                "run_s": stats(runs),
                "overhead_s": statistics.median(runs) - statistics.median(floors),
                "ratio": statistics.median(runs) / statistics.median(floors),
                "run_phases_s": parts,
                "disk_beyond_case_bytes": image_size(names["agent"]) - image_size(names["case"]),
            }
            if args.sidecar:
                report["tasks"][task.id]["sidecar"] = {
                    "run_s": stats(sidecar_runs),
                    "overhead_s": statistics.median(sidecar_runs) - statistics.median(floors),
                    "run_phases_s": {
                        k: statistics.median(b[k] for b in sidecar_breakdowns if k in b) for k in sidecar_breakdowns[0]
                    },
                    # the task's own image only: the agent image is one for every task
                    "disk_beyond_case_bytes": image_size(names["tool"]) - image_size(names["case"]),
                }
            print(
                f"{task.id}: floor {statistics.median(floors):.1f} s, run {statistics.median(runs):.1f} s",
                file=sys.stderr,
            )
        first = tasks[0]
        names = image_names(settings, first, "dummy")
        runtime = ensure_runtime_volume(settings, names["runtime"])
        report["runtime_volume_bytes"] = volume_size(runtime, names["case"])
        report["latency_ms"] = latency(names["tool"], runtime, args.calls)
        report["agent_layer_build_s"] = layer_build(settings, first, "agent")
        if args.workers:
            walls, busy = {}, {}
            for workers in ("1", "2"):
                started, cpu = time.monotonic(), cpu_busy()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        str(args.dataset),
                        "--agent",
                        "dummy",
                        "--agent",
                        "reference",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        "--results",
                        str(Path(scratch) / f"workers-{workers}"),
                        "-n",
                        workers,
                    ],
                    capture_output=True,
                    check=False,
                    cwd=ROOT,
                )
                walls[workers] = time.monotonic() - started
                busy[workers] = cpu_busy() - cpu
            report["workers_s"] = {
                "n1": walls["1"],
                "n2": walls["2"],
                "speedup": walls["1"] / walls["2"],
                # the machine's CPUs kept busy, on average, over each sweep
                "cpus_busy_n1": busy["1"] / walls["1"],
                "cpus_busy_n2": busy["2"] / walls["2"],
            }

    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"\nwritten: {args.json}")
    return 0


def print_table(report: dict[str, Any]) -> None:
    print(
        f"SSEBench overhead on {report['dataset']} ({report['version']}), {report['machine']['cpus']} CPUs, "
        f"{report['rounds']} rounds, medians (p95)"
    )
    print(
        f"{'task':32} {'floor':>14} {'run':>14} {'overhead':>9} {'ratio':>6} {'disk+':>8} {'floor as sse-runner':>20}"
    )
    for task_id, t in report["tasks"].items():
        runner = t.get("floor_as_runner_s")
        print(
            f"{task_id:32} {t['floor_s']['median']:7.1f} s ({t['floor_s']['p95']:4.1f}) "
            f"{t['run_s']['median']:7.1f} s ({t['run_s']['p95']:4.1f}) {t['overhead_s']:+8.2f}s "
            f"{t['ratio']:5.2f}x {t['disk_beyond_case_bytes'] / 1e6:6.1f}MB"
            + (f" {runner['median']:12.1f} s ({runner['p95']:4.1f})" if runner else "")
        )
    sidecar = {task_id: t["sidecar"] for task_id, t in report["tasks"].items() if "sidecar" in t}
    if sidecar:
        print(f"\nsidecar mode: {'task':23} {'run':>14} {'overhead':>9} {'disk+':>8}")
        for task_id, t in sidecar.items():
            print(
                f"{'':14}{task_id:23} {t['run_s']['median']:7.1f} s ({t['run_s']['p95']:4.1f}) "
                f"{t['overhead_s']:+8.1f}s {t['disk_beyond_case_bytes'] / 1e6:6.1f}MB"
            )
        print(
            "inside a sidecar run (median seconds): "
            + "; ".join(
                f"{task_id}: " + ", ".join(f"{k} {v:.2f}" for k, v in t["run_phases_s"].items())
                for task_id, t in sidecar.items()
            )
        )
    print(
        "\ninside a run (median seconds): "
        + "; ".join(
            f"{task_id}: " + ", ".join(f"{k} {v:.2f}" for k, v in t["run_phases_s"].items())
            for task_id, t in report["tasks"].items()
        )
    )
    print("\ndaemon round trips inside a container, as model:")
    for name, s in report["latency_ms"].items():
        print(f"  {name:22} median {s['median']:6.2f} ms   p95 {s['p95']:6.2f} ms")
    images = report["images_current_s"]
    print(
        f"\ndeciding no image needs rebuilding: {images['again']:.2f} s for {len(report['tasks'])} tasks "
        f"({images['per_task']:.2f} s per task)"
    )
    built = report["agent_layer_build_s"]
    if isinstance(built, dict):
        print(
            f"building one agent layer (dummy, no cache): {built['assembled']:.1f} s "
            f"(Docker's build of its Dockerfile: {built['docker_build']:.1f} s)"
        )
    else:
        print(f"building one agent layer (dummy, no cache): {built:.1f} s")
    if "runtime_volume_bytes" in report:
        print(
            f"the runtime, in one volume that every task of a language shares: "
            f"{report['runtime_volume_bytes'] / 1e6:.1f} MB"
        )
    if "workers_s" in report:
        w = report["workers_s"]
        print(f"reference + dummy on the dataset: -n 1 {w['n1']:.1f} s, -n 2 {w['n2']:.1f} s: {w['speedup']:.2f}x")
        if "cpus_busy_n1" in w:
            print(
                f"  CPUs busy on average: {w['cpus_busy_n1']:.2f} at -n 1, {w['cpus_busy_n2']:.2f} at -n 2 "
                f"(of {report['machine']['cpus']})"
            )


if __name__ == "__main__":
    sys.exit(main())
