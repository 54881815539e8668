"""A Ray cluster of several nodes on this machine, for the scale-out tests; every listener on 127.0.0.1.

`python -m tests.raycluster WORKERS [NODE_IP]` starts a head node (no CPUs:
the driver's home, where no run is placed) and WORKERS worker nodes of 2
CPUs and 5 GiB each, every node at NODE_IP (127.0.0.1 unless given), prints
one JSON line

    {"address": "127.0.0.1:PORT", "nodes": [{"id": ..., "raylet": PID}, ...]}

(workers only), then reads commands from stdin: `remove N` kills worker
node N at once (as a machine that is switched off), `quit` stops them all.

It is meant to run inside a network namespace that holds only loopback
(`in_loopback_netns`): Ray turns a node address of 127.0.0.1 into the
machine's outward address whenever it can find one, and would listen there.
In such a namespace there is none, so nothing of the cluster can be reached
from outside this machine. The Docker engine is reached through its Unix
socket all the same. Any other NODE_IP (127.0.1.1, say) makes Ray listen on
every interface: a cluster the controller must refuse without a token, and
which only such a namespace makes safe to start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def node_args(ip: str = "127.0.0.1") -> dict[str, Any]:
    """What every node starts with: its address, and no dashboard."""
    return {"node_ip_address": ip, "include_dashboard": False, "dashboard_host": "127.0.0.1"}


def in_loopback_netns(name: str) -> list[str]:
    """Create network namespace `name` with loopback up; the command prefix that runs inside it."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    return ["ip", "netns", "exec", name]


def delete_netns(name: str) -> None:
    subprocess.run(["ip", "netns", "delete", name], check=False)


def listeners() -> list[str]:
    """Every TCP listening address in the network namespace this runs in (`ss`)."""
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines()]


def main(workers: int, node_ip: str = "127.0.0.1") -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    Path(tempfile.gettempdir(), "ray").mkdir(exist_ok=True)
    temp = tempfile.mkdtemp(prefix="sse-ray-")
    node = node_args(node_ip)
    cluster = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 0, "temp_dir": temp})
    nodes = [cluster.add_node(**node, num_cpus=2, memory=5 << 30) for _ in range(workers)]

    def raylet(node: object) -> int:
        return int(node.all_processes["raylet"][0].process.pid)  # type: ignore[attr-defined]

    print(
        json.dumps(
            {"address": cluster.address, "temp": temp, "nodes": [{"id": n.node_id, "raylet": raylet(n)} for n in nodes]}
        ),
        flush=True,
    )
    for line in sys.stdin:
        command = line.split()
        if command[:1] == ["remove"]:
            node = nodes[int(command[1])]
            cluster.remove_node(node, allow_graceful=False)
            print(json.dumps({"removed": node.node_id}), flush=True)
        elif command[:1] == ["listeners"]:
            print(json.dumps({"listeners": listeners()}), flush=True)
        elif command[:1] == ["quit"]:
            break
    cluster.shutdown()  # type: ignore[no-untyped-call]
    shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, *sys.argv[2:3])
