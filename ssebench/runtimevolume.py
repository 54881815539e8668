"""The runtime volume: one per runtime digest, filled once from the runtime image, mounted read-only.

Every tool image is made, and every run's task container runs, with it at
/opt/ssebench (`ssebench.runtime.contract.RUNTIME_HOME`); the runtime is in no
task's image (`ssebench.image`).
"""

from __future__ import annotations

import io
import tarfile
import uuid
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
# Fills /fill from the runtime image's /opt/ssebench, refuses a runtime that is not root's alone (owner, group,
# no write for others, no set-id bit: runs mount it where root imports it), then says it is complete.
_FILL = (
    f"set -eu; cp -a {RUNTIME_HOME}/. /fill/; "
    "bad=$(find /fill ! -type l \\( ! -user 0 -o ! -group 0 -o -perm /6022 \\) -print | head -5); "
    'if [ -n "$bad" ]; then echo "not root\'s alone: $bad"; exit 1; fi; '
    f'sync; printf %s "$1" > /fill/{RUNTIME_COMPLETE}'
)


def runtime_volume_name(digest: str) -> str:
    """The volume that holds a runtime image's /opt/ssebench: one per runtime digest, named by it."""
    return f"{RUNTIME_VOLUME_PREFIX}{digest[:32]}"


def runtime_binds(volume: str) -> dict[str, dict[str, str]]:
    """The binds that mount a runtime volume where tool images run it: read-only, and never filled from the
    container's image."""
    return {volume: {"bind": RUNTIME_HOME, "mode": "ro,nocopy"}}


def ensure_runtime_volume(settings: Settings, runtime_image: str) -> str:
    """The name of the volume that holds `runtime_image`'s runtime, made from the image if it is missing.

    A new volume gets a fill id (label `ssebench.fill`); a container of the
    runtime image copies its runtime in, checks that all of it is root's
    alone, and writes the fill id last. A volume is used only when it is
    known complete: this machine recorded its fill id when it filled it
    (`<cache>/runtime-volumes/`), or its marker names its own fill id. Any
    other (a fill that failed or was killed, a volume the engine made empty
    because it was removed under a run) is removed and filled again. The file
    lock keeps the workers of this machine from filling one twice.
    Containers mount it read-only.
    """
    labels = images().labels(runtime_image)
    if labels is None or not labels.get(LABEL_HASH):
        raise SSEBenchError(f"there is no runtime image {runtime_image}: build it with `ssebench images build`")
    name = runtime_volume_name(labels[LABEL_HASH])
    records = settings.cache_dir / "runtime-volumes"
    with FileLock(str(lock_path(settings, name))):
        found = next((v for v in cleanup().volumes({"name": name}) if v.get("Name") == name), None)
        fill_id = ((found or {}).get("Labels") or {}).get(LABEL_FILL)
        if fill_id and _read(records / name) == fill_id:
            return name
        if fill_id and _marker(runtime_image, name) == fill_id:
            _record(records, name, fill_id)
            return name
        if found is not None and not cleanup().remove_volume(name):
            raise SSEBenchError(
                f"the runtime volume {name} is incomplete and a container still uses it: remove "
                f"that container, then run again (or `docker volume rm -f {name}`)"
            )
        fill_id = uuid.uuid4().hex
        _fill(runtime_image, name, fill_id, labels[LABEL_HASH])
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


def _marker(runtime_image: str, volume: str) -> str | None:
    """The fill id a runtime volume's marker holds, read through a container that is created, never started."""
    made = containers().create(runtime_image, command=["true"], binds={volume: {"bind": "/check", "mode": "ro,nocopy"}})
    try:
        data = containers().archive(made, f"/check/{RUNTIME_COMPLETE}")
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.extractfile(f"{RUNTIME_COMPLETE}")
            return member.read(200).decode("utf-8", errors="replace").strip() if member else None
    except NotFoundError:
        return None  # no marker: the fill never ended
    except (tarfile.TarError, KeyError):
        return None
    finally:
        containers().remove(made)


def _fill(runtime_image: str, volume: str, fill_id: str, digest: str) -> None:
    """Make the volume and fill it from the image; on any failure, remove it again and raise SSEBenchError."""
    made: str | None = None
    filled = False
    try:
        containers().create_volume(
            volume, labels={LABEL_LAYER: "runtime-volume", LABEL_HASH: digest, LABEL_FILL: fill_id}
        )
        made = containers().create(
            runtime_image,
            entrypoint=["sh", "-c", _FILL, "fill"],
            command=[fill_id],
            user="root",
            labels={LABEL_LAYER: "runtime-fill"},
            binds={volume: {"bind": "/fill", "mode": "rw,nocopy"}},
        )
        status = containers().run_to_end(made, f"filling the runtime volume {volume}", RUNTIME_FILL_TIMEOUT)
        if status != 0:
            tail = containers().logs(made).strip()[-2000:]
            raise SSEBenchError(
                f"filling the runtime volume {volume} from {runtime_image} failed (status {status}): {tail}"
            )
        filled = True
    finally:
        if made is not None:
            containers().remove(made)  # first: a volume goes once no container uses it
        if not filled:
            cleanup().remove_volume(volume)
