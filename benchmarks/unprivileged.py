"""What the task's scripts pay for running unprivileged, on this engine's storage driver and on the kernel's.

    python benchmarks/unprivileged.py [--image IMAGE] [--rounds 3] [--json unprivileged.json]

A run's scripts run as sse-runner; a task's floor (overhead.py) runs them as
root. In a task's tool image (default: c-ares's of the pilot, else
c-demo's), as root and as sse-runner, interleaved round by round, the file
operations a build is made of:

  stat        200 000 stat() of a header under /usr/include
  open+read   50 000 opens and reads of it
  exec        500 runs of /bin/true
  compile     100 compiles (gcc) and runs of a one-line C program, in a volume

each where the runs are: in a container (the engine's storage driver), and,
where this host can (as root, with the kernel's overlayfs), on a kernel
overlay mount of the same image's layers, chrooted: the driver Docker uses
by default (overlay2). With strace on the host and fuse-overlayfs as the
driver, it also counts the requests the driver's daemon answered during one
stat loop of each user, by system call. Prints the medians and writes them
as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
USERS = {"root": "", "sse-runner": "setpriv --reuid sse-runner --regid sse-runner --clear-groups "}
OPERATIONS = ["stat", "open+read", "exec", "compile"]

# Runs in the image, as the user `run_as` names: one JSON line of seconds per operation.
PROBE = r"""
set -eu
work=$1
t() { local s=$EPOCHREALTIME; "$@" >/dev/null; local e=$EPOCHREALTIME; printf '"%s": %s, ' "$1" "$(python3 -c "print($e - $s)")"; }
stat_() { python3 -c 'import os
for i in range(200000): os.stat("/usr/include/stdio.h")'; }
open_() { python3 -c 'import os
for i in range(50000):
    fd = os.open("/usr/include/stdio.h", os.O_RDONLY); os.read(fd, 65536); os.close(fd)'; }
exec_() { for i in $(seq 500); do /bin/true; done; }
compile_() { cd "$work"; echo 'int main(void){return 0;}' > t.c
  for i in $(seq 100); do gcc t.c -o t; ./t; done; }
printf '{'; t stat_; t open_; t exec_; t compile_; printf '"done": 0}\n'
"""
NAMES = {"stat_": "stat", "open_": "open+read", "exec_": "exec", "compile_": "compile"}


def _parse(line: str) -> dict[str, float]:
    raw = json.loads(line.strip().splitlines()[-1])
    return {NAMES[k]: v for k, v in raw.items() if k in NAMES}


def in_container(image: str, user: str) -> dict[str, float]:
    """One probe in a container of `image` as `user`, its work in a fresh volume (as a run's checks are)."""
    volume = f"ssebench-benchmark-unprivileged-{os.getpid()}"
    script = f"mkdir -p /work/w && chmod 1777 /work/w && {USERS[user]}bash -c {shlex.quote(PROBE)} probe /work/w"
    try:
        done = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                "--label",
                "ssebench.session=benchmark",
                "-v",
                f"{volume}:/work",
                "--entrypoint",
                "bash",
                image,
                "-c",
                script,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the probe failed in {image} as {user}: {done.stderr[-2000:]}")
    return _parse(done.stdout)


class KernelOverlay:
    """The image's layers mounted with the kernel's overlayfs on this host, to chroot into; None if it cannot."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.dir = Path(tempfile.mkdtemp(prefix="ssebench-ovl-"))
        self.root = self.dir / "merged"
        self.mounted: list[Path] = []

    def __enter__(self) -> KernelOverlay | None:
        if os.geteuid() != 0:
            self.why = "not root"
            return None
        data = json.loads(
            subprocess.run(
                ["docker", "inspect", "--format", "{{json .GraphDriver.Data}}", self.image],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        layers = ":".join(p for p in (data.get("UpperDir"), data.get("LowerDir")) if p)
        for sub in ("merged", "upper", "work"):
            (self.dir / sub).mkdir()
        mount = subprocess.run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={layers},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                str(self.root),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if mount.returncode != 0:
            self.why = mount.stderr.strip() or "mount failed"
            return None
        self.mounted.append(self.root)
        subprocess.run(["mount", "--bind", "/proc", str(self.root / "proc")], check=True)
        self.mounted.append(self.root / "proc")
        return self

    def probe(self, user: str) -> dict[str, float]:
        work = self.root / "tmp" / f"probe-{user}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        work.chmod(0o1777)
        done = subprocess.run(
            [
                "chroot",
                str(self.root),
                "bash",
                "-c",
                f"{USERS[user]}bash -c {shlex.quote(PROBE)} probe /tmp/probe-{user}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"the probe failed on the kernel's overlay as {user}: {done.stderr[-2000:]}")
        return _parse(done.stdout)

    def __exit__(self, *exc: object) -> None:
        for path in reversed(self.mounted):
            subprocess.run(["umount", str(path)], capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def driver_requests(image: str) -> dict[str, dict[str, int]] | None:
    """Per user, the system calls fuse-overlayfs made while a container did 20 000 stat() calls."""
    if not shutil.which("strace"):
        return None
    loop = "python3 -c 'import os\nfor i in range(20000): os.stat(\"/usr/include/stdio.h\")'"
    out: dict[str, dict[str, int]] = {}
    for user, prefix in USERS.items():
        container = subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--rm",
                "--network",
                "none",
                "--label",
                "ssebench.session=benchmark",
                "--entrypoint",
                "bash",
                image,
                "-c",
                f"sleep 2; {prefix}{loop}; sleep 1",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        try:
            merged = json.loads(
                subprocess.run(
                    ["docker", "inspect", "--format", "{{json .GraphDriver}}", container],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            if merged.get("Name") != "fuse-overlayfs":
                return None
            target = merged["Data"]["MergedDir"]
            pids = [
                line.split()[0]
                for line in subprocess.run(
                    ["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True
                ).stdout.splitlines()
                if "fuse-overlayfs" in line and target in line and " Z" not in line
            ]
            if not pids:
                return None
            traced = subprocess.run(
                ["timeout", "-s", "INT", "30", "strace", "-f", "-c", "-p", pids[0]],
                capture_output=True,
                text=True,
                check=False,
            )
            subprocess.run(["docker", "wait", container], capture_output=True, check=False)
            calls: dict[str, int] = {}
            for line in traced.stderr.splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1].isidentifier() and parts[-1] != "total":
                    calls[parts[-1]] = int(parts[3])
            out[user] = calls
        finally:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
    return out


def default_image() -> str:
    names = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, check=True
    ).stdout.split()
    for wanted in ("/tool/pilot/c-ares-", "/tool/demo/c-demo:"):
        found = [n for n in names if wanted in n]
        if found:
            return found[0]
    raise SystemExit("no tool image of c-ares or c-demo: build one (ssebench images build datasets/demo)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="", help="a tool image (default: c-ares's of the pilot, else c-demo's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("unprivileged.json"))
    args = parser.parse_args()
    image = args.image or default_image()
    driver = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    times: dict[str, dict[str, list[dict[str, float]]]] = {}
    started = time.monotonic()
    with KernelOverlay(image) as overlay:
        places = {f"container ({driver})": None, "kernel overlayfs": overlay}
        if overlay is None:
            del places["kernel overlayfs"]
        for _ in range(args.rounds):
            for place, mount in places.items():
                for user in USERS:
                    got = in_container(image, user) if mount is None else mount.probe(user)
                    times.setdefault(place, {}).setdefault(user, []).append(got)
    report: dict[str, Any] = {
        "image": image,
        "driver": driver,
        "rounds": args.rounds,
        "kernel_overlay": "measured" if overlay else f"not measured: {getattr(overlay, 'why', '')}",
        "medians": {},
        "driver_requests": driver_requests(image) if driver == "fuse-overlayfs" else None,
    }
    print(f"SSEBench: root against sse-runner in {image}, {args.rounds} rounds interleaved, medians (s)")
    print(f"{'where':28} {'user':11}" + "".join(f"{op:>11}" for op in OPERATIONS))
    for place, users in times.items():
        for user, rounds in users.items():
            medians = {op: statistics.median(r[op] for r in rounds) for op in OPERATIONS}
            report["medians"].setdefault(place, {})[user] = medians
            print(f"{place:28} {user:11}" + "".join(f"{medians[op]:11.2f}" for op in OPERATIONS))
        root, runner = report["medians"][place]["root"], report["medians"][place]["sse-runner"]
        print(f"{'':28} {'runner/root':11}" + "".join(f"{runner[op] / root[op]:10.2f}x" for op in OPERATIONS))
    if "kernel overlayfs" not in times:
        print(f"kernel overlayfs: {report['kernel_overlay']}")
    if report["driver_requests"]:
        print("requests fuse-overlayfs answered during 20 000 stat() calls in a container:")
        for user, calls in report["driver_requests"].items():
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
            print(f"  {user:11} " + ", ".join(f"{name} {count}" for name, count in top))
    print(f"({time.monotonic() - started:.0f} s)")
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
