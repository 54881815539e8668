"""One task's dummy run, two checkouts of the harness against one floor, interleaved round by round.

    python benchmarks/compare.py BEFORE_TREE [--before-prefix ssebench-before] [--dataset demo] [--task c-demo]
                                 [--rounds 10] [--as-runner]

Each round runs, in turn, the task's floor (as benchmarks/overhead.py does),
a dummy run through pytest with the harness of BEFORE_TREE (a worktree of an
earlier commit, whose images carry `--before-prefix`: build them there first
with SSEBENCH_PREFIX set), and one with this checkout's. The machine's
drift over the rounds falls on both sides alike. Prints medians and p95 of
the three and of each side's overhead, and where each side's container time
went. With --as-runner the floor is the same work as sse-runner (the user a
run's scripts run as), as overhead.py's "floor as sse-runner".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import floor, phases, q  # this folder is on the path when the script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(tree: Path, task_dir: Path, results: Path, env: dict[str, str]) -> tuple[float, dict[str, float]]:
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
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tree,
        env=env,
    )
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest failed in {tree}:\n{done.stdout[-3000:]}")
    run_dir = max((p for p in results.glob("*/*/dummy/*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return elapsed, phases(run_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("--before-prefix", default="ssebench-before")
    parser.add_argument("--dataset", default="demo", help="a dataset under datasets/ (demo, pilot)")
    parser.add_argument("--task", default="c-demo")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--as-runner", action="store_true", help="time the floor's work as sse-runner")
    args = parser.parse_args()

    from ssebench.dataset import load_dataset
    from ssebench.image import image_names
    from ssebench.settings import get_settings

    task = next(t for t in load_dataset(ROOT / "datasets" / args.dataset).tasks if t.id == args.task)
    tool = image_names(get_settings(), task)["tool"]
    before = args.before.resolve()
    env_before = {**os.environ, "PYTHONPATH": f"{before}:{before / 'sdk'}", "SSEBENCH_PREFIX": args.before_prefix}
    sides = {"before": (before, env_before), "after": (ROOT, dict(os.environ))}
    times: dict[str, list[float]] = {"floor": [], "before": [], "after": []}
    parts: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="ssebench-compare-") as scratch:
        for n in range(args.rounds):
            times["floor"].append(floor(task, tool, as_runner=args.as_runner))
            for side, (tree, env) in sides.items():
                elapsed, where = run(tree, tree / "datasets" / args.dataset / task.id, Path(scratch) / side, env)
                times[side].append(elapsed)
                parts[side].append(where)
            print(
                f"round {n + 1}: floor {times['floor'][-1]:.2f} s, before {times['before'][-1]:.2f} s, "
                f"after {times['after'][-1]:.2f} s",
                file=sys.stderr,
            )
    print(
        f"{task.id}, {args.rounds} rounds interleaved, medians (p95)"
        + (", the floor as sse-runner" if args.as_runner else "")
    )
    for name, values in times.items():
        over = (
            ""
            if name == "floor"
            else f"   overhead {statistics.median(v - f for v, f in zip(values, times['floor'], strict=True)):+.2f} s"
        )
        print(f"  {name:6} {statistics.median(values):6.2f} s ({q(values, 0.95):5.2f}){over}")
    for side, runs in parts.items():
        keys = [k for k in runs[0] if all(k in r for r in runs)]
        print(
            f"  {side} inside the container: "
            + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in keys)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
