"""Python packages downloaded on the host for an image's Python: the runtime's, and each agent's software.

Containers cannot be assumed to reach a package index, so the runtime venv
and an agent's venv are installed with `pip install --no-index` from a
wheelhouse made here. Each requirements file pins a whole closure (the
runtime's images/runtime/requirements.txt, an agent's requirements.txt), so
the download needs no resolver and gives the same wheels on every machine;
`resolve_closure` is how an agent's closure is made in the first place. An
agent's closure also carries each wheel's SHA-256, so pip downloads (and, in
the volume, installs) only the wheels that were locked.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock

from ssebench.agent import Agent, normalized
from ssebench.errors import SSEBenchError
from ssebench.image import digest
from ssebench.logs import last_lines
from ssebench.settings import Settings

_MANYLINUX = ["manylinux2014"] + [f"manylinux_2_{minor}" for minor in range(17, 37)]


def requirements_file(settings: Settings) -> Path:
    return settings.images_dir / "runtime" / "requirements.txt"


def pip_args(python: str, machine: str, *, deps: bool = False) -> list[str]:
    """pip download options that select wheels for another interpreter (and, unless `deps`, no dependency
    of what is named: a pinned closure names them all)."""
    major, minor = python.split(".")[:2]
    args = [
        "--only-binary=:all:",
        *([] if deps else ["--no-deps"]),
        "--python-version",
        f"{major}.{minor}",
        "--implementation",
        "cp",
        "--abi",
        f"cp{major}{minor}",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for tag in _MANYLINUX:
        args += ["--platform", f"{tag}_{machine}"]
    return args


def ensure_wheelhouse(settings: Settings, python: str, machine: str) -> Path:
    """A complete wheelhouse of the runtime for `python` (e.g. '3.11') on `machine` (e.g. 'x86_64')."""
    return download(settings, requirements_file(settings).read_text(), python, machine, "the runtime")


def pip_pin(settings: Settings) -> str:
    """The runtime's pin of pip: what installs an agent's software from its wheelhouse, offline."""
    for line in requirements_file(settings).read_text().splitlines():
        if line.strip().startswith("pip=="):
            return line.strip()
    raise SSEBenchError(f"{requirements_file(settings)} pins no pip (pip==VERSION): add it")


def agent_wheelhouse(settings: Settings, agent: Agent, python: str, machine: str) -> Path:
    """A complete wheelhouse of an agent's pinned closure (and the runtime's pip, which installs it)."""
    closure = agent.closure
    if closure is None:
        raise SSEBenchError(f"agent {agent.name} has no software to download")
    text = closure.read_text("utf-8").rstrip("\n") + "\n" + pip_pin(settings) + "\n"
    return download(settings, text, python, machine, f"agent {agent.name}'s software")


def download(settings: Settings, requirements: str, python: str, machine: str, what: str) -> Path:
    """The wheels of a pinned closure (`requirements`, a requirements file's text) for `python` on `machine`,
    downloaded once into the cache (keyed by the three) and kept with the requirements as
    `requirements.txt`; `what` names them in an error."""
    key = digest(requirements, python, machine)[:16]
    root = settings.cache_dir / "wheelhouse"
    final = root / f"cp{python.replace('.', '')}-{machine}-{key}"
    if (final / ".complete").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{final.name}.lock")):
        if (final / ".complete").exists():
            return final
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=root))
        try:
            (partial / "requirements.txt").write_text(requirements)
            # pip checks every line's digest once one line has one: lines with digests (a locked closure) and
            # those without (the runtime's pip, added to an agent's) are downloaded apart.
            lines = [line for line in requirements.splitlines() if line.split("#", 1)[0].strip()]
            groups = [[line for line in lines if "--hash=" in line], [line for line in lines if "--hash=" not in line]]
            for number, group in enumerate(g for g in groups if g):
                listed = partial / f".download-{number}.txt"
                listed.write_text("".join(f"{line}\n" for line in group))
                command = [*_PIP_DOWNLOAD, "-d", str(partial), "-r", str(listed), *pip_args(python, machine)]
                run = subprocess.run(command, capture_output=True, text=True, check=False)
                listed.unlink()
                if run.returncode != 0:
                    tail = last_lines(run.stdout + run.stderr, 10)
                    raise SSEBenchError(
                        f"downloading {what}'s wheels for Python {python} ({machine}) failed; "
                        f"the host needs a package index or PIP_FIND_LINKS with them:\n{tail}"
                    )
            (partial / ".complete").write_text("ok\n")
            if final.exists():
                shutil.rmtree(final)
            partial.rename(final)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return final


def resolve_closure(pins: Iterable[str], python: str, machine: str, *, exact: bool = False) -> list[str]:
    """The whole closure of `pins` for `python` on `machine`, as sorted `name==version --hash=sha256:HEX`
    lines: pip resolves it on the host (for the image's interpreter, not the host's), and the wheels it picked
    name it and give their digests. `exact`: `pins` is the closure already (`agents lock --keep-versions`):
    only their wheels are fetched, for their digests."""
    with tempfile.TemporaryDirectory(prefix="ssebench-lock-") as folder:
        command = [*_PIP_DOWNLOAD, "-d", folder, *pins, *pip_args(python, machine, deps=not exact)]
        run = subprocess.run(command, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise SSEBenchError(
                f"resolving {' '.join(pins)} for Python {python} ({machine}) failed:\n"
                f"{last_lines(run.stdout + run.stderr, 10)}"
            )
        found = []
        for wheel in Path(folder).glob("*.whl"):
            # A wheel's file name: {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl, `_` for `-` in each.
            name, version = wheel.name.split("-")[:2]
            sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
            found.append(f"{normalized(name)}=={version} --hash=sha256:{sha256}")
        return sorted(found)


_PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q")
