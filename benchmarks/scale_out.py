"""Dispatching runs over Ray against running them here, side by side.

    python benchmarks/scale_out.py [--rounds 3] [--trials 2] [--json scale_out.json]

Needs root (a network namespace), `ray` (the dev extra) and the demo's
images for the dummy and reference agents. It starts a Ray cluster of two
worker nodes on this machine (tests/raycluster.py, in a namespace that holds
only loopback) and measures, rounds alternating (A B A B ...):

  overhead    one dummy run of c-demo with `ssebench run`, here against
              `--dispatch ray`: the command's wall clock (the Ray one
              connects to the cluster and starts a worker each time), the
              run's own time on its machine, and what dispatch added to it:
              from submission to its start on the node, and from its end
              there to its files written home (summary.json's timeline:
              submitted, node_started, node_ended, home).
  throughput  the demo with reference and dummy, `--trials` times each
              (12 runs with 2 trials) through pytest: `-n 2` here against
              `--dispatch ray` over the two nodes; runs per minute, and per
              dispatched run what dispatch added (as above, not counting the
              wait for a free slot on its node).

It prints one table and writes it as JSON. Both nodes share this machine's
2 cores and Docker engine, so the throughput says what dispatch costs, not
what more machines would bring.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.raycluster import delete_netns, in_loopback_netns


def one_run(inside: list[str], address: str | None, results: Path) -> dict[str, float]:
    command = [
        *inside,
        sys.executable,
        "-m",
        "ssebench.cli",
        "run",
        "--task",
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--results",
        str(results),
    ]
    if address:
        command += ["--dispatch", "ray", "--ray-address", address]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    if "grade: failed" not in done.stdout:
        raise SystemExit(f"the run did not end as dummy's do:\n{done.stdout}\n{done.stderr}")
    run_dir = Path(done.stdout.split("run directory: ", 1)[1].split()[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    row = {"wall": wall, "run": summary["durations"]["total"]}
    if address:
        row["added"] = added([summary])[0]
    return row


def added(summaries: list[dict[str, Any]]) -> list[float]:
    """Per dispatched run, the seconds it spent neither on its node nor waiting for a free slot there:
    from submission (or the end of the node's previous run, if later) to its start on the node, plus
    from its end on the node to its files written home."""
    out = []
    ends: dict[str, list[float]] = {}
    for s in summaries:
        ends.setdefault(s["node"], []).append(s["timeline"]["node_ended"])
    for s in summaries:
        t = s["timeline"]
        before = [e for e in ends[s["node"]] if e <= t["node_started"]]
        ready = max([t["submitted"], *before])
        out.append((t["node_started"] - ready) + (t["home"] - t["node_ended"]))
    return out


def sweep(inside: list[str], address: str | None, results: Path, trials: int) -> dict[str, Any]:
    command = [
        *inside,
        sys.executable,
        "-m",
        "pytest",
        "datasets/demo",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--trials",
        str(trials),
        "--results",
        str(results),
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    command += ["--dispatch", "ray", "--ray-address", address] if address else ["-n", "2"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    runs = 6 * trials
    if f"{3 * trials} failed, {3 * trials} passed" not in done.stdout:
        raise SystemExit(f"the sweep did not grade as expected:\n{done.stdout[-3000:]}")
    row: dict[str, Any] = {"wall": wall, "runs": runs, "runs_per_minute": 60 * runs / wall}
    if address:
        summaries = [
            json.loads(p.read_text()) for p in results.glob("*/*/*/*/summary.json") if not p.parent.is_symlink()
        ]
        row["added"] = sorted(added(summaries))
        row["nodes"] = sorted({s["node"] for s in summaries})
    return row


def median(rows: list[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds of the single-run overhead (default 3)")
    parser.add_argument("--trials", type=int, default=2, help="trials of the demo sweep: 6 runs each (default 2)")
    parser.add_argument("--json", type=Path, default=Path("scale_out.json"))
    args = parser.parse_args()
    name = "ssebench-ray-bench"
    delete_netns(name)
    inside = in_loopback_netns(name)
    cluster = subprocess.Popen(
        [*inside, sys.executable, "-m", "tests.raycluster", "2"],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert cluster.stdout is not None and cluster.stdin is not None
        address = json.loads(cluster.stdout.readline())["address"]
        with tempfile.TemporaryDirectory(prefix="ssebench-bench-") as tmp:
            results = Path(tmp)
            local: list[dict[str, float]] = []
            ray: list[dict[str, float]] = []
            for n in range(args.rounds):
                local.append(one_run([], None, results / f"local-{n}"))
                ray.append(one_run(inside, address, results / f"ray-{n}"))
            sweep_local = sweep([], None, results / "sweep-local", args.trials)
            sweep_ray = sweep(inside, address, results / "sweep-ray", args.trials)
        cluster.stdin.write("quit\n")
        cluster.stdin.flush()
        cluster.wait(60)
    finally:
        if cluster.poll() is None:
            cluster.kill()
        delete_netns(name)
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "single_run": {
            "local": local,
            "ray": ray,
            "median_wall_local": median(local, "wall"),
            "median_wall_ray": median(ray, "wall"),
            "median_run_local": median(local, "run"),
            "median_run_ray": median(ray, "run"),
            "median_dispatch_added": median(ray, "added"),
        },
        "sweep": {"local_n2": sweep_local, "ray_two_nodes": sweep_ray},
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    s = report["single_run"]
    print(f"{'figure':58} {'local':>10} {'ray':>10}")
    print(
        f"{'one c-demo dummy run, ssebench run, wall (median, s)':58} {s['median_wall_local']:>10.2f} "
        f"{s['median_wall_ray']:>10.2f}"
    )
    print(
        f"{'  the run itself, execute on its machine (median, s)':58} {s['median_run_local']:>10.2f} "
        f"{s['median_run_ray']:>10.2f}"
    )
    print(f"{'  dispatch added to that run (median, s)':58} {'-':>10} {s['median_dispatch_added']:>10.3f}")
    print(
        f"{f'demo sweep, {6 * args.trials} runs (-n 2 / two Ray nodes), wall s':58} {sweep_local['wall']:>10.1f} "
        f"{sweep_ray['wall']:>10.1f}"
    )
    print(f"{'  runs per minute':58} {sweep_local['runs_per_minute']:>10.2f} {sweep_ray['runs_per_minute']:>10.2f}")
    extra = sweep_ray["added"]
    print(
        f"{'  dispatch added per run in the sweep (median / max, s)':58} {'-':>10} "
        f"{statistics.median(extra):>5.3f} / {max(extra):.3f}"
    )
    print(f"{'  nodes the runs went to':58} {'-':>10} {len(sweep_ray['nodes']):>10}")
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
