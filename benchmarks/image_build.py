"""Cold image builds of a dataset, one chain at a time and several at once, side by side.

    python benchmarks/image_build.py [--dataset datasets/demo] [--jobs 2] [--agent dummy]

Builds every layer of every task (base, runtime, case, tool, agent) with
Docker's cache off, first with one job, then with `--jobs`, and prints the
wall time of each and their ratio. The images go under prefixes of their own
(`ssebench-bench-1/...`, `ssebench-bench-N/...`) and are removed afterwards,
so the project's own images are neither used nor touched. Needs the OS image
(ssebench images bootstrap); takes about as long as two cold builds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _remove_prefix(prefix: str) -> int:
    from ssebench.engine import client

    removed = 0
    for img in client().images.list():
        if any(tag.startswith(prefix + "/") for tag in img.tags):
            client().images.remove(img.id, force=True)
            removed += 1
    return removed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=Path("datasets/demo"))
    parser.add_argument("--jobs", type=int, default=2, help="the parallel run's jobs (default 2)")
    parser.add_argument("--agent", default="dummy", help="the agent layer to build on each task")
    args = parser.parse_args()

    from ssebench.agent import load_agent
    from ssebench.build import build_images
    from ssebench.dataset import load_tasks
    from ssebench.settings import Settings

    tasks = load_tasks(args.dataset)
    figures: dict[int, float] = {}
    for jobs in (1, args.jobs):
        settings = Settings(prefix=f"ssebench-bench-{jobs}")
        agent = load_agent(settings.agents_dir, args.agent)
        _remove_prefix(settings.prefix)
        started = time.monotonic()
        outcome = build_images(settings, tasks, agent, force=True, jobs=jobs, say=lambda m: None)
        figures[jobs] = time.monotonic() - started
        removed = _remove_prefix(settings.prefix)
        if outcome.failures:
            for failure in outcome.failures.values():
                print(f"error: {str(failure).splitlines()[0]}", file=sys.stderr)
            return 1
        print(
            f"jobs={jobs}: {len(outcome.report.built)} images in {figures[jobs]:.0f} s (removed {removed} afterwards)",
            flush=True,
        )
    cores = os.cpu_count()
    print(
        f"\n{len(tasks)} tasks, {cores} cores: {args.jobs} jobs took {figures[args.jobs]:.0f} s, "
        f"one job {figures[1]:.0f} s: {figures[1] / figures[args.jobs]:.2f}x faster"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
