"""Volumes filled once and mounted read-only by every run: the runtime's, and each agent's software.

The runtime volume: one per runtime digest, filled from the runtime image.
Every tool image is made, and every run's task container runs, with it at
/opt/ssebench (`ssebench.runtime.contract.RUNTIME_HOME`); the runtime is in
no task's image (`ssebench.image`). An agent's software volume
(`ssebench.agentvolume`) is filled the same way, once per agent version, and
mounted at /opt/agents/<name>.

`ensure_volume` is the one way either is made: a fill id, a filling
container that checks everything is root's alone and writes the fill id
last, a record of it on this machine, and a file lock.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ssebench.engine import NotFoundError, cleanup, containers, images
from ssebench.errors import SSEBenchError
from ssebench.image import LABEL_HASH, LABEL_LAYER, lock_path
from ssebench.runtime.contract import RUNTIME_HOME
from ssebench.settings import Settings

# Every runtime volume's name starts so (`make clean-images` removes them with the images).
RUNTIME_VOLUME_PREFIX = "ssebench-runtime-"
# Written last into a runtime volume by the container that fills it: the fill's id (its volume's label).
RUNTIME_COMPLETE = ".ssebench-runtime-complete"
LABEL_FILL = "ssebench.fill"
RUNTIME_FILL_TIMEOUT = 600


def root_only_check(path: str) -> str:
    """Shell that fails, naming up to five, when anything under `path` is not root's alone (owner, group, no
    write for others, no set-id bit): runs mount it where root, or the agent, runs it, and nothing there may
    be the agent's to change."""
    return (
        f"bad=$(find {path} ! -type l \\( ! -user 0 -o ! -group 0 -o -perm /6022 \\) -print | head -5); "
        'if [ -n "$bad" ]; then echo "not root\'s alone: $bad"; exit 1; fi; '
    )


# Fills /fill from the runtime image's /opt/ssebench, refuses a runtime that is not root's alone, then says it is
# complete ($1: the fill id).
_FILL = (
    f"set -eu; cp -a {RUNTIME_HOME}/. /fill/; "
    + root_only_check("/fill")
    + f'sync; printf %s "$1" > /fill/{RUNTIME_COMPLETE}'
)


@dataclass(frozen=True)
class Fill:
    """How one volume is made: by whom, where it is mounted while it is filled, and how it says it is done."""

    volume: str
    image: str  # a container of it fills the volume
    digest: str  # what is in it (label ssebench.hash)
    kind: str  # label ssebench.layer of the volume; its filling container's is kind + "-fill"
    mount: str  # where the filling container mounts it
    script: str  # sh -c, as root; $1 is the fill id, which it writes last into `marker`
    marker: str  # a file name at the volume's top
    # Puts what the fill needs into its container (created, not yet started), e.g. wheels under /tmp.
    stage: Callable[[str], None] | None = None


def runtime_volume_name(digest: str) -> str:
    """The volume that holds a runtime image's /opt/ssebench: one per runtime digest, named by it."""
    return f"{RUNTIME_VOLUME_PREFIX}{digest[:32]}"


def runtime_binds(volume: str) -> dict[str, dict[str, str]]:
    """The binds that mount a runtime volume where tool images run it: read-only, and never filled from the
    container's image."""
    return {volume: {"bind": RUNTIME_HOME, "mode": "ro,nocopy"}}


def ensure_runtime_volume(settings: Settings, runtime_image: str) -> str:
    """The name of the volume that holds `runtime_image`'s runtime, made from the image if it is missing
    (`ensure_volume`). Containers mount it read-only."""
    labels = images().labels(runtime_image)
    if labels is None or not labels.get(LABEL_HASH):
        raise SSEBenchError(f"there is no runtime image {runtime_image}: build it with `ssebench images build`")
    name = runtime_volume_name(labels[LABEL_HASH])
    fill = Fill(
        volume=name,
        image=runtime_image,
        digest=labels[LABEL_HASH],
        kind="runtime-volume",
        mount="/fill",
        script=_FILL,
        marker=RUNTIME_COMPLETE,
    )
    return ensure_volume(settings, fill)


def ensure_volume(settings: Settings, fill: Fill) -> str:
    """The name of `fill`'s volume, made and filled if it is missing or incomplete.

    A new volume gets a fill id (label `ssebench.fill`); a container of the
    fill's image, with the volume mounted where its script fills it, runs the
    script, which checks that all of it is root's alone and writes the fill
    id last. A volume is used only when it is known complete: this machine
    recorded its fill id when it filled it (`<cache>/runtime-volumes/`), or its
    marker names its own fill id. Any other (a fill that failed or was
    killed, a volume the engine made empty because it was removed under a
    run) is removed and filled again. The file lock keeps the workers of this
    machine from filling one twice.
    """
    name = fill.volume
    records = settings.cache_dir / "runtime-volumes"
    with FileLock(str(lock_path(settings, name))):
        found = next((v for v in cleanup().volumes({"name": name}) if v.get("Name") == name), None)
        fill_id = ((found or {}).get("Labels") or {}).get(LABEL_FILL)
        if fill_id and _read(records / name) == fill_id:
            return name
        if fill_id and _marker(fill.image, name, fill.marker) == fill_id:
            _record(records, name, fill_id)
            return name
        if found is not None and not cleanup().remove_volume(name):
            raise SSEBenchError(
                f"the volume {name} is incomplete and a container still uses it: remove "
                f"that container, then run again (or `docker volume rm -f {name}`)"
            )
        fill_id = uuid.uuid4().hex
        _fill(fill, fill_id)
        _record(records, name, fill_id)
    return name


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _record(records: Path, name: str, fill_id: str) -> None:
    records.mkdir(parents=True, exist_ok=True)
    (records / name).write_text(fill_id + "\n", encoding="utf-8")


def _marker(image: str, volume: str, marker: str) -> str | None:
    """The fill id a volume's marker holds, read through a container that is created, never started."""
    made = containers().create(image, command=["true"], binds={volume: {"bind": "/check", "mode": "ro,nocopy"}})
    try:
        data = containers().archive(made, f"/check/{marker}")
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.extractfile(marker)
            return member.read(200).decode("utf-8", errors="replace").strip() if member else None
    except NotFoundError:
        return None  # no marker: the fill never ended
    except (tarfile.TarError, KeyError):
        return None
    finally:
        containers().remove(made)


def _fill(fill: Fill, fill_id: str) -> None:
    """Make the volume and fill it; on any failure, remove it again and raise SSEBenchError."""
    made: str | None = None
    filled = False
    try:
        containers().create_volume(
            fill.volume, labels={LABEL_LAYER: fill.kind, LABEL_HASH: fill.digest, LABEL_FILL: fill_id}
        )
        made = containers().create(
            fill.image,
            entrypoint=["sh", "-c", fill.script, "fill"],
            command=[fill_id],
            user="root",
            labels={LABEL_LAYER: fill.kind.removesuffix("-volume") + "-fill"},
            binds={fill.volume: {"bind": fill.mount, "mode": "rw,nocopy"}},
        )
        if fill.stage is not None:
            fill.stage(made)
        status = containers().run_to_end(made, f"filling the volume {fill.volume}", RUNTIME_FILL_TIMEOUT)
        if status != 0:
            tail = containers().logs(made).strip()[-2000:]
            raise SSEBenchError(f"filling the volume {fill.volume} from {fill.image} failed (status {status}): {tail}")
        filled = True
    finally:
        if made is not None:
            containers().remove(made)  # first: a volume goes once no container uses it
        if not filled:
            cleanup().remove_volume(fill.volume)
