"""The harness's way of making a layer against Docker's build of the same Dockerfile, no cache, side by side.

    python benchmarks/layer_build.py [--dataset datasets/pilot] [--tasks ID,ID] [--kind case] [--rounds 2]

For each task, rounds alternate (A B A B ...): the layer made as `ssebench
images build` makes it (a case layer assembled, or Docker's build of its
head with its tail assembled; an agent layer assembled), and `docker build
--no-cache` of the same Dockerfile with the same build arguments. Both go
to a scratch image that is removed afterwards; the parents must be built
(`ssebench images build DATASET --agent dummy`). Prints the medians and
writes them as JSON. `benchmarks/overhead.py` uses it for the agent layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = "ssebench-benchmark/{kind}-layer:latest"


def _remove(*images: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *images], capture_output=True, check=False)


def layer_build(settings: Any, task: Any, kind: str, agent: str = "dummy") -> dict[str, float]:
    """Seconds to make one layer of a task (`case` or `agent`), no cache: the harness's way and Docker's build."""
    from ssebench.agent import load_agent
    from ssebench.bootstrap import ensure_os_image
    from ssebench.image import plan
    from ssebench.layers import build_layer, head_image

    scratch = SCRATCH.format(kind=kind)
    planned = next(
        layer
        for layer in plan(settings, task, ensure_os_image(settings), load_agent(settings.agents_dir, agent))
        if layer.kind == kind
    )
    layer = replace(planned, image=scratch)
    assert layer.dockerfile is not None
    started = time.monotonic()
    build_layer(settings, layer, nocache=True)
    ours = time.monotonic() - started
    _remove(scratch, head_image(scratch))
    args = [a for key, value in layer.buildargs.items() for a in ("--build-arg", f"{key}={value}")]
    started = time.monotonic()
    done = subprocess.run(
        ["docker", "build", "-q", "--no-cache", *args, "-f", str(layer.dockerfile), "-t", scratch, str(layer.context)],
        capture_output=True,
        text=True,
        check=False,
    )
    theirs = time.monotonic() - started
    _remove(scratch)
    if done.returncode != 0:
        raise SystemExit(f"Docker's build of {layer.dockerfile} failed: {done.stderr[-2000:]}")
    return {"assembled": ours, "docker_build": theirs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=ROOT / "datasets" / "pilot")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: every task)")
    parser.add_argument("--kind", choices=("case", "agent"), default="case")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path("layer_build.json"))
    args = parser.parse_args()

    from ssebench.dataset import load_tasks
    from ssebench.settings import get_settings

    settings = get_settings()
    wanted = set(filter(None, args.tasks.split(",")))
    tasks = [t for t in load_tasks(args.dataset) if not wanted or t.id in wanted]
    report: dict[str, dict[str, float]] = {}
    print(f"{args.kind} layer, no cache, {args.rounds} round(s) each, medians")
    print(f"{'task':40} {'ssebench':>9} {'docker build':>13}")
    for task in tasks:
        rounds = [layer_build(settings, task, args.kind) for _ in range(args.rounds)]
        report[task.id] = {key: statistics.median(r[key] for r in rounds) for key in ("assembled", "docker_build")}
        print(f"{task.id:40} {report[task.id]['assembled']:8.1f}s {report[task.id]['docker_build']:12.1f}s", flush=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
