"""`task new`'s Dockerfile, built for real: the tree it makes is the one the fix was split against.

The package is a security upload whose .dsc the mirror no longer serves and whose upstream tarball only the
main archive's pool holds (giflib 5.1.9-2+deb11u1, the pilot's giflib task): the case `apt-get source` could
not fetch, which every such task's author had to rewrite by hand.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from ssebench import authoring
from ssebench.settings import Settings
from tests.helpers import PILOT, mirror_reachable

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# The tree's checks, run in the image: the fix and its tests apply forward (the tree is the vulnerable one
# the diffs were cut from, not the fixed one), nothing of the packaging or of patch's backups is left.
# patch -f: a patch that looks reversed is applied as given, and fails (--batch would reverse it and pass).
CHECKS = """set -eu
cd /src/giflib
patch -p1 --dry-run -f < /ssebench/diffs/patch.diff
patch -p1 --dry-run -f < /ssebench/diffs/test.diff
if patch -p1 -R --dry-run -f < /ssebench/diffs/patch.diff >/dev/null; then echo 'the fix is in the tree'; exit 3; fi
test ! -e debian && test ! -e .pc
leftover=$(find . -name '*.orig' -o -name '*.rej')
if [ -n "$leftover" ]; then echo "backups left: $leftover"; exit 4; fi
echo tree-ok
"""


@pytest.mark.skipif(not mirror_reachable(), reason="Debian's mirror is not reachable from here")
def test_a_security_uploads_scaffold_builds_the_vulnerable_tree(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    dataset.mkdir()
    (dataset / "dataset.yaml").write_text("version: t-1\n")
    scaffold = authoring.new_from_debian(dataset, "giflib", "5.1.9-2+deb11u1", advisory="CVE-2026-26740")
    task = scaffold.task_dir
    # The split is the pilot task's: the fix's code change, byte for byte.
    assert (task / "sse/diffs/patch.diff").read_text() == (
        PILOT / "giflib-CVE-2026-26740/sse/diffs/patch.diff"
    ).read_text()
    dockerfile = (task / "Dockerfile").read_text()
    assert "pool/main/g/giflib/giflib_5.1.9.orig.tar.bz2" in dockerfile
    assert "debian-security/pool/updates/main/g/giflib/giflib_5.1.9-2+deb11u1.debian.tar.xz" in dockerfile
    # Only the RUN step is under test: it builds on the OS image instead of the C base image (which adds the
    # toolchain, not anything this step uses).
    header, _, rest = dockerfile.partition("\nRUN ")
    assert "\nFROM ${SSEBENCH_REGISTRY}/base-generic-c:" in header
    (task / "Dockerfile").write_text(f"FROM {Settings().os_image}\nRUN " + rest)
    tag = f"ssebench-test-authoring:{uuid.uuid4().hex[:12]}"
    try:
        built = subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(task)], capture_output=True, text=True, timeout=900
        )
        assert built.returncode == 0, built.stderr[-2000:]
        checked = subprocess.run(
            ["docker", "run", "--rm", "--network=none", tag, "sh", "-c", CHECKS],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0 and "tree-ok" in checked.stdout, checked.stdout + checked.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
