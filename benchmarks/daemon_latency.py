"""Round trips to the daemon inside a real task container, side by side.

    python benchmarks/daemon_latency.py [--task datasets/demo/c-demo] [--calls 200]

Starts the task's tool image with an agent that only sleeps, then, inside the
container as model, times `bash echo hi` and `GET /version` over the agent
socket through the SDK, interleaved, and prints the median and 95th percentile
of each. Needs the task's images (ssebench images build).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MEASURE = """
import json, statistics, time
from sse.daemon import Daemon
from sse.tools.bash import execute
d = Daemon()
bash, version = [], []
for _ in range({calls}):
    t = time.perf_counter(); r = execute("echo hi"); bash.append(time.perf_counter() - t)
    assert r.stdout == "hi\\n", r
    t = time.perf_counter(); d.version(); version.append(time.perf_counter() - t)
def q(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
print(json.dumps({{name: {{"median_ms": 1000 * statistics.median(xs), "p95_ms": 1000 * q(xs, 0.95)}}
                  for name, xs in (("bash echo hi", bash), ("GET /version", version))}}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=Path("datasets/demo/c-demo"))
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    from ssebench.engine import client
    from ssebench.image import image_names
    from ssebench.settings import get_settings
    from ssebench.task import load_task

    image = image_names(get_settings(), load_task(args.task))["tool"]
    container = client().containers.run(image, ["sleep", "3600"], detach=True, init=True, network_disabled=True,
                                        labels={"ssebench.session": "benchmark"})
    try:
        deadline = time.monotonic() + 120
        while b"] agent: " not in container.logs():
            if time.monotonic() > deadline:
                print(container.logs().decode(), file=sys.stderr)
                return 1
            time.sleep(0.2)
        code, out = container.exec_run(["/opt/ssebench/venv/bin/python", "-c", MEASURE.format(calls=args.calls)],
                                       user="1000", environment={"SSE_DAEMON_SOCKET": "/tmp/sse.sock"})
        if code != 0:
            print(out.decode(), file=sys.stderr)
            return 1
        figures = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        container.remove(force=True)
    print(f"{args.calls} calls each, interleaved, inside {image}, as model over the agent socket:")
    for name, f in figures.items():
        print(f"  {name:14}  median {f['median_ms']:6.2f} ms   p95 {f['p95_ms']:6.2f} ms")
    ratio = figures["bash echo hi"]["median_ms"] / figures["GET /version"]["median_ms"]
    print(f"  bash / version median ratio: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
