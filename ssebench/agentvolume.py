"""An agent's software volume: its pinned packages in a venv at /opt/agents/<name>, one volume per agent
version, filled once and mounted read-only by every run of the agent.

The wheels are downloaded on the host for the image's Python and machine
(`ssebench.wheelhouse.agent_wheelhouse`), copied into a container of a
runtime image that has the volume mounted at /opt/agents/<name> itself (so
the venv's paths, its scripts' `#!` lines included, are the ones runs see),
and installed there offline (`pip install --no-index`). The filler checks
that everything is root's alone and writes its fill id last
(`ssebench.runtimevolume.ensure_volume`). The agent's own image stays its
launcher alone: a task adds no copy of the software to the disk.

An agent's `agent.py` finds it at `/opt/agents/<name>`: its Python at
`bin/python`, its console scripts in `bin/`, whatever a package ships
(a CLI's binary) in the venv's site-packages.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from ssebench.agent import Agent
from ssebench.engine import containers
from ssebench.errors import SSEBenchError
from ssebench.image import digest
from ssebench.runtimevolume import Fill, ensure_volume, root_only_check
from ssebench.settings import Settings

# Every agent volume's name starts so (`make clean-images` removes them with the images).
AGENT_VOLUME_PREFIX = "ssebench-agent-"
# Written last into an agent volume by the container that fills it: the fill's id.
AGENT_COMPLETE = ".ssebench-agent-complete"
# Where the filling container gets the wheels (its own layer, gone with it).
_WHEELS = "/tmp/ssebench-wheels"


def agent_volume_name(settings: Settings, agent: Agent) -> str:
    """One volume per agent version and software, and per OS image (whose Python the venv runs on)."""
    if agent.software_digest is None:
        raise SSEBenchError(f"agent {agent.name} has no software (agent.yaml software.python)")
    return f"{AGENT_VOLUME_PREFIX}{agent.name}-{digest(agent.software_digest, settings.os_image)[:24]}"


def agent_binds(agent: Agent, volume: str) -> dict[str, dict[str, str]]:
    """The binds that mount an agent's volume where its runs see it: read-only, never filled from an image."""
    return {volume: {"bind": agent.home, "mode": "ro,nocopy"}}


def fill_script(home: str) -> str:
    """As root in a runtime image's container, $1 the fill id: a venv at `home` (the volume), the wheels at
    _WHEELS installed into it offline, compiled (no run can write its caches), root's alone, then complete."""
    return (
        'set -eu; id="$1"; '
        f"python3 -m venv --without-pip {home}; "
        f"grep -v '^pip==' {_WHEELS}/requirements.txt > {_WHEELS}/install.txt; "
        f"set -- {_WHEELS}/pip-*.whl; "
        f'{home}/bin/python "$1/pip" install --no-index --no-cache-dir --disable-pip-version-check --no-deps '
        f"--no-warn-script-location --find-links {_WHEELS} -r {_WHEELS}/install.txt; "
        # A module that does not compile (a template, another Python's code) is the package's affair, not ours.
        f"{home}/bin/python -m compileall -q {home} > /dev/null || true; "
        f"chown -R root:root {home}; chmod -R go-w {home}; "
        + root_only_check(home)
        + f'sync; printf %s "$id" > {home}/{AGENT_COMPLETE}'
    )


def ensure_agent_volume(settings: Settings, agent: Agent, runtime_image: str) -> str:
    """The name of the volume that holds `agent`'s software, made with a container of `runtime_image` (any
    runtime image: they share the OS image's Python) if it is missing."""
    name = agent_volume_name(settings, agent)

    def stage(container: str) -> None:
        from ssebench.build import probe_python
        from ssebench.wheelhouse import agent_wheelhouse

        python, machine = probe_python(runtime_image)
        wheels = agent_wheelhouse(settings, agent, python, machine)
        with tempfile.TemporaryFile() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(wheels, arcname=Path(_WHEELS).name, filter=_root_readable)
            archive.seek(0)
            containers().put(container, str(Path(_WHEELS).parent), archive)

    fill = Fill(
        volume=name,
        image=runtime_image,
        digest=agent.software_digest or "",
        kind="agent-volume",
        mount=agent.home,
        script=fill_script(agent.home),
        marker=AGENT_COMPLETE,
        stage=stage,
    )
    return ensure_volume(settings, fill)


def _root_readable(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755 if info.isdir() else 0o644
    return info
