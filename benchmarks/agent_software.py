"""What an agent with software of its own costs each task, and how soon a run's agent works.

    python benchmarks/agent_software.py [--agent mini-swe-agent] [--model scripted-fix] [--dataset demo]
                                        [--mode sandbox] [--rounds 2]

Runs the agent on every task of the dataset `--rounds` times through pytest
(the first round may make its software volume; the figures of time are of
the later, warm, rounds when there are several), then prints side by side,
per task: the disk its agent layer adds on the tool image (the launcher:
the software is the one volume, whose size is printed once), and, from
each run's own records, the time from the daemon serving (the entrypoint's
line) to the agent's start (its dialog's `init`) and to its first model
call as the gateway received it (its usage record's time less its
latency).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import _stamp  # this folder is on the path when the script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "sdk"))


def mb(size: float) -> str:
    return f"{size / 1e6:8.2f} MB"


def run_times(run_dir: Path, results: Path) -> tuple[float, float, float | None]:
    """(serving -> the agent's process started, -> its first record, -> its first model call) of one run, in
    seconds."""
    from sse.dialog import read

    from ssebench.inflight import entrypoint_lines
    from ssebench.runtime.contract import SERVING

    summary = json.loads((run_dir / "summary.json").read_text())
    near = summary["timeline"]["container_started"]
    lines = entrypoint_lines((run_dir / "container.log").read_text())
    serving = next(_stamp(near, at) for at, said in lines if said == SERVING)
    process = next(_stamp(near, at) for at, said in lines if said.startswith("agent: "))
    started = read(run_dir / "archive" / "dialog.jsonl")[0]["ts"]
    calls = [
        json.loads(line)
        for usage in results.glob(f".gateway/*/usage/{summary['run_id']}.jsonl")
        for line in usage.read_text().splitlines()
    ]
    first = min((c["ts"] - c["latency"] for c in calls), default=None)
    return process - serving, started - serving, (first - serving if first is not None else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="mini-swe-agent")
    parser.add_argument("--model", default="scripted-fix")
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--mode", default="sandbox")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from ssebench.agent import load_agent
    from ssebench.agentvolume import agent_volume_name
    from ssebench.dataset import load_tasks
    from ssebench.engine import client, images
    from ssebench.image import image_names
    from ssebench.settings import get_settings

    settings = get_settings()
    agent = load_agent(settings.agents_dir, args.agent)
    tasks = load_tasks(ROOT / "datasets" / args.dataset)
    times: dict[str, list[tuple[float, float, float | None]]] = {t.id: [] for t in tasks}
    with tempfile.TemporaryDirectory(prefix="ssebench-agent-bench-") as folder:
        for round_ in range(args.rounds):
            results = Path(folder) / f"round-{round_}"
            done = subprocess.run(
                [sys.executable, "-m", "pytest", str(ROOT / "datasets" / args.dataset), "--agent", args.agent,
                 "--model", args.model, "--mode", args.mode, "-q", "-p", "no:cacheprovider", "--results", str(results)],
                capture_output=True, text=True, check=False, cwd=ROOT,
            )  # fmt: skip
            if done.returncode not in (0, 1):
                raise SystemExit(f"pytest failed:\n{done.stdout[-3000:]}")
            if round_ == 0 and args.rounds > 1:
                continue  # may have made the volume and the layers: not a warm run
            for run_dir in results.glob(f"*/{args.model}/{args.agent}/*-{args.mode}-*"):
                if run_dir.is_dir() and not run_dir.is_symlink():
                    times[run_dir.parent.parent.parent.name].append(run_times(run_dir, results))

    print(f"{args.agent} ({', '.join(agent.config.software.python) if agent.config.software else 'no software'}), "
          f"model {args.model}, {args.mode} mode, {max(1, args.rounds - 1)} warm round(s)")  # fmt: skip
    if agent.software_digest is not None:
        name = agent_volume_name(settings, agent)
        size = next((v["UsageData"]["Size"] for v in client().df()["Volumes"] if v["Name"] == name), None)
        print(f"software volume {name}: {mb(size) if size is not None else 'missing'}, once for every task")
    print(f"\n{'task':12} {'agent layer':>12}   from the daemon serving to the agent's:")
    print(f"{'':12} {'':>12} {'process':>10} {'first record':>14} {'first model call':>18}")
    for task in tasks:
        names = image_names(settings, task, args.agent, args.mode)
        agent_image, tool = images().inspect(names["agent"]), images().inspect(names["tool"])
        added = (agent_image or {}).get("Size", 0) - (tool or {}).get("Size", 0)
        columns = []
        for index, width in ((0, 10), (1, 14), (2, 18)):
            values = [t[index] for t in times[task.id] if t[index] is not None]
            columns.append(f"{statistics.median(values):.3f} s".rjust(width) if values else "-".rjust(width))  # type: ignore[type-var]
        print(f"{task.id:12} {mb(added):>12} {' '.join(columns)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
