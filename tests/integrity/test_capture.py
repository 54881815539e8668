"""Patch capture cannot be reached or configured by the agent, and runs nothing the agent planted.

The agent writes every git setting that can run a program into its own
`.git` (and into nested repositories of its tree), a `.gitattributes` naming
drivers, and tries to write into capture's repository. Captures during the
agent phase (/diff, /files) and at grading must still see the change and
run none of it.
"""

from __future__ import annotations

import pytest

from tests.integrity.harness import LEVELS, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

MARKER_DIR = "/tmp/sse-archive"

PLANT = r"""
set -e
plant() {  # a repository's config that runs `touch MARKER-<what>` every way git allows
  git config core.fsmonitor "touch {m}/m-fsmonitor-$1; false"
  git config core.pager "touch {m}/m-pager-$1; cat"
  git config core.sshCommand "touch {m}/m-ssh-$1"
  git config core.editor "touch {m}/m-editor-$1"
  git config core.askPass "touch {m}/m-askpass-$1"
  git config core.hooksPath .git/hooks
  git config diff.external "touch {m}/m-external-$1"
  git config filter.evil.clean "touch {m}/m-filter-$1; cat"
  git config filter.evil.smudge "touch {m}/m-filter-$1; cat"
  git config filter.evil.process "touch {m}/m-process-$1"
  git config diff.evil.textconv "touch {m}/m-textconv-$1; cat"
  git config diff.evil.command "touch {m}/m-diffcmd-$1"
  git config merge.evil.driver "touch {m}/m-merge-$1"
  git config alias.diff "!touch {m}/m-alias-$1"
  git config alias.add "!touch {m}/m-alias-$1"
  git config alias.log "!touch {m}/m-alias-$1"
  git config credential.helper "!touch {m}/m-credential-$1"
  git config gpg.program "touch {m}/m-gpg-$1"
  git config log.showSignature true
  git config protocol.allow always
  git config remote.origin.url "ext::sh -c touch% {m}/m-ext-$1"
  git config remote.origin.promisor true
  git config extensions.partialClone origin
  git config core.repositoryformatversion 1
  git config include.path "$PWD/.git/extra-config"
  printf '[core]\n\tfsmonitor = touch {m}/m-include-%s\n' "$1" > .git/extra-config
  for hook in pre-commit post-commit post-index-change reference-transaction pre-auto-gc post-checkout \
              fsmonitor-watchman post-rewrite; do
    printf '#!/bin/sh\ntouch {m}/m-hook-%s-%s\n' "$hook" "$1" > .git/hooks/$hook
    chmod +x .git/hooks/$hook
  done
}
cd {src}
plant top
echo '* filter=evil diff=evil merge=evil' > .gitattributes
echo '/* changed by the agent */' >> tlv.c
mkdir -p nested/deeper
for dir in nested nested/deeper; do
  (cd $dir && git init -q && echo x > f && git add f && git -c user.name=a -c user.email=a@x commit -qm nested \
   && plant "$(basename $dir)")
done
"""

ATTACK_BASE = r"""
for path in /var/lib/ssebench-capture /var/lib/ssebench-capture/base.git /var/lib/ssebench-capture/base.git/config \
            /var/lib/ssebench-capture/base.index /var/lib/ssebench-capture/scratch; do
  if [ -w "$path" ]; then echo "writable: $path"; fi
done
ls /var/lib/ssebench-capture/scratch 2>/dev/null && echo "listable: scratch"
{ printf '[core]\n\tfsmonitor = touch /tmp/sse-archive/m-base\n' >> /var/lib/ssebench-capture/base.git/config; } \
  2>/dev/null && echo "wrote: base config"
true
"""


def _markers(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("m-")]


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_planted_git_configuration_runs_nothing_and_capture_is_out_of_reach(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    run.sh("1000", PLANT.replace("{m}", MARKER_DIR).replace("{src}", run.source))
    # The control: what was planted does run when git runs in the tree as it usually does.
    run.sh("1000", f"cd {run.source} && git status >/dev/null 2>&1; git diff HEAD >/dev/null 2>&1; true")
    fired = set(_markers(run.sh("root", f"ls {MARKER_DIR}").split()))
    # (git status runs the filter's process and the included config's fsmonitor, which overrides the first.)
    assert {"m-include-top", "m-process-top"} <= fired, fired
    run.sh("1000", f"rm -f {MARKER_DIR}/m-*")
    assert run.sh("1000", ATTACK_BASE, task=True).strip() == ""  # capture is where the task is
    owned = run.sh("root", "find /var/lib/ssebench-capture -not -user root | head", task=True)
    assert owned.strip() == "", f"capture files not root's:\n{owned}"
    diff, files = run.py(
        "1000",
        "import json; from sse.daemon import _default as d;"
        "print(json.dumps([d().get('/diff')['diff'], d().get('/files')['files']]))",
    )
    assert "changed by the agent" in diff
    assert {".gitattributes", "tlv.c"} <= {f["path"] for f in files}
    assert _markers(run.sh("root", f"ls {MARKER_DIR}").split()) == []
    result = run.finish()
    assert result["patch_result"]["status"] in ("passed", "failed"), result
    assert "changed by the agent" in (run.run_dir / "final.patch").read_text()
    assert _markers([p.name for p in (run.run_dir / "archive").iterdir()]) == []
