"""The runtime every run shares is read-only to everyone in every run, root included.

The runtime (its venv, the daemon, the SDK) is one volume per runtime
digest, mounted at /opt/ssebench in every task container of the machine at
once. If any run could change it, that run would choose the code that grades
every other run. So, in a held run, model and root (with the run's
capabilities, as the runtime's own processes have them) try to write,
replace, remove, rename and link every path of the runtime, and to remount
it writable; each attempt must fail. A positive control runs the same
attempts on a writable copy of a few of its files, where they must succeed.
The run then grades normally and the runtime's contents are unchanged.
"""

from __future__ import annotations

import json
import typing

import pytest

from ssebench.engine import client
from tests.integrity.harness import PYTHON, HeldRun, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

RUNTIME = "/opt/ssebench"

# Every way to change a path: write into it, truncate it, add beside it, replace it by rename, link over it,
# change its mode, remove it. Prints the number of attempts and those that succeeded.
ATTACK = r"""
import json, os, sys
root = sys.argv[1]
attempts, changed = 0, []

def attempt(what, fn):
    global attempts
    attempts += 1
    try:
        fn()
        changed.append(what)
    except OSError:
        pass

paths = [root]
for dirpath, dirnames, filenames in os.walk(root):
    paths += [os.path.join(dirpath, n) for n in dirnames + filenames]
for p in paths:
    if os.path.isdir(p) and not os.path.islink(p):
        attempt("create " + p, lambda: open(os.path.join(p, ".planted"), "w").close())
        attempt("mkdir " + p, lambda: os.mkdir(os.path.join(p, ".planted-dir")))
        attempt("symlink in " + p, lambda: os.symlink("/tmp", os.path.join(p, ".planted-link")))
    elif os.path.isfile(p) and not os.path.islink(p):
        attempt("write " + p, lambda: open(p, "ab").close())
    if not os.path.islink(p):  # a link's own mode means nothing (and chmod would follow it)
        attempt("chmod " + p, lambda: os.chmod(p, 0o777))
    if p != root:
        attempt("rename " + p, lambda: os.rename(p, p + ".moved"))
        attempt("link over " + p, lambda: os.symlink("/tmp", p + ".new") or os.replace(p + ".new", p))
print(json.dumps({"attempts": attempts, "changed": changed[:20], "count": len(changed)}))
"""

DIGEST = (
    f"find {RUNTIME} -printf '%p %U %G %m %s %l\\n' | sort | sha256sum && "
    f"find {RUNTIME} -type f -print0 | sort -z | xargs -0 cat | sha256sum"
)


def _digest(image: str, volume: str) -> str:
    """The runtime volume's names, owners, modes, sizes, link targets and contents, seen from a new container."""
    out = client().containers.run(
        image,
        ["-c", DIGEST],
        entrypoint=["bash"],
        remove=True,
        network_disabled=True,
        volumes={volume: {"bind": RUNTIME, "mode": "ro,nocopy"}},
    )
    return str(out.decode())


def _attack(run: HeldRun, user: str, root: str) -> dict[str, typing.Any]:
    out = run.sh(user, f"{PYTHON} -I -c {_quote(ATTACK)} {root}", task=True)
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_no_run_can_change_the_runtime_it_shares(launcher: Launcher) -> None:
    run = launcher.start()
    try:
        mounts = {m["Destination"]: m for m in run.task_container.attrs["Mounts"]}
        runtime = mounts[RUNTIME]
        assert runtime["Type"] == "volume" and runtime["RW"] is False, runtime
        assert runtime["Name"].startswith("ssebench-runtime-"), runtime
        if run.mode == "sidecar":  # the agent's container runs its own image's runtime, not the shared volume
            assert RUNTIME not in {m["Destination"] for m in run.container.attrs["Mounts"]}
        image = run.task_container.image.id
        before = _digest(image, runtime["Name"])

        # Positive control: the same attempts change a writable copy of some of the runtime's files.
        run.sh(
            "root",
            f"mkdir /tmp/control && find {RUNTIME}/lib/sse -maxdepth 1 -type f -exec cp -a {{}} "
            "/tmp/control/ ';' && chown -R model:model /tmp/control",
            task=True,
        )
        control = _attack(run, "model", "/tmp/control")
        assert int(control["attempts"]) > 10 and control["count"] == control["attempts"], control

        for user in ("model", "root"):
            outcome = _attack(run, user, RUNTIME)
            assert int(outcome["attempts"]) > 1000, outcome  # the whole runtime was tried
            assert outcome["count"] == 0, (user, outcome)
        remount = run.sh("root", f"mount -o remount,rw {RUNTIME} 2>&1; touch {RUNTIME}/x 2>&1; true", task=True)
        assert "Read-only file system" in remount, remount

        result = run.finish()
        assert result["patch_result"]["status"] == "failed"  # the dummy agent's run grades as every run does
        assert _digest(image, runtime["Name"]) == before
    finally:
        run.close()
