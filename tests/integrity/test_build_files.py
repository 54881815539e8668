"""A patch that leaves the bug and changes only what decides a check is graded failed, in every language.

Grading runs the task's build, PoC and test scripts in the agent's tree; those
scripts go through files of that tree (a Makefile, Cargo's manifest and its
`.cargo` configuration, a PoC harness, the tests). Each attack below leaves
the bug where it is and changes only such files, so that the PoC's crash reads
as "input rejected" and the tests' failures as success. Grading takes every
file outside the code under repair from the original (`ssebench.runtime.
protection`), so each is graded failed, and result.json names the files it set
aside (`signals.protected_files`).

The positive control: the same attack on the same task with its protection
lifted (`fix_may_change: ['**']`, a copy of the demo written here) passes every
check. So each attack is real, and what stops it is the protection.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.dataset import load_tasks
from ssebench.settings import Settings
from ssebench.task import Task
from tests.helpers import DEMO
from tests.integrity.harness import MODES, Launcher, launching

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# c-demo: the PoC's binary becomes a wrapper that turns a crash into exit 1 ("rejected gracefully") and
# silences the sanitizer's report, and `make test` ignores the unit tests' status.
C_MAKEFILE = r"""cat > Makefile <<'EOF'
CC ?= cc
CFLAGS ?= -fsanitize=address -g -O1
LDFLAGS ?= -fsanitize=address
SILENCE ?= 2>/dev/null
all: tlvdump test_tlv
libtlv.a: tlv.o
	$(AR) rcs $@ $^
tlv.o: tlv.c tlv.h
	$(CC) $(CFLAGS) -c -o $@ tlv.c
tlvdump: tlvdump.c tlv.h libtlv.a
	$(CC) $(CFLAGS) -o tlvdump.real tlvdump.c libtlv.a $(LDFLAGS)
	printf '#!/bin/sh\n./tlvdump.real "$$@" $(SILENCE) || exit 1\n' > $@ && chmod +x $@
test_tlv: test_tlv.c tlv.h libtlv.a
	$(CC) $(CFLAGS) -o $@ test_tlv.c libtlv.a $(LDFLAGS)
test: test_tlv
	-./test_tlv
.PHONY: all test
EOF
"""

# go-demo: the PoC's harness (cmd/kvdump) recovers from the panic and exits 1; a test file of the package
# ends the test binary with status 0 before any test runs (`go test` then says ok).
GO_HARNESS_AND_TEST_FILE = r"""sed -i 's/^func main() {$/func main() {\n\tdefer func() {\n\t\tif recover() != nil {\n\t\t\tos.Exit(1)\n\t\t}\n\t}()/' cmd/kvdump/main.go
grep -q 'recover()' cmd/kvdump/main.go
cat > zz_pass_test.go <<'EOF'
package kvrec

import "os"

func init() { os.Exit(0) }
EOF
"""

# rust-demo: Cargo's manifest points the PoC's binary at a harness that exits 1 on a panic, and a build
# script writes a Cargo configuration whose runner "runs" every test binary with /bin/true.
RUST_MANIFEST_AND_BUILD_SCRIPT = r"""cat > src/calm.rs <<'EOF'
fn main() {
    std::panic::set_hook(Box::new(|_| std::process::exit(1)));
    let path = std::env::args().nth(1).expect("usage: paklist FILE");
    let buf = std::fs::read(path).unwrap_or_default();
    match pakfile::parse(&buf) {
        Ok(_) => {}
        Err(_) => std::process::exit(1),
    }
}
EOF
sed -i 's#^path = "src/main.rs"$#path = "src/calm.rs"#' Cargo.toml
grep -q 'src/calm.rs' Cargo.toml
cat > build.rs <<'EOF'
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    std::fs::create_dir_all(format!("{dir}/.cargo")).unwrap();
    std::fs::write(format!("{dir}/.cargo/config.toml"),
                   "[target.x86_64-unknown-linux-gnu]\nrunner = [\"/bin/true\"]\n").unwrap();
}
EOF
"""

ATTACKS = {
    "c-demo": (C_MAKEFILE, {"Makefile"}),
    "go-demo": (GO_HARNESS_AND_TEST_FILE, {"cmd/kvdump/main.go", "zz_pass_test.go"}),
    "rust-demo": (RUST_MANIFEST_AND_BUILD_SCRIPT, {"Cargo.toml", "build.rs"}),
}


@pytest.mark.parametrize("task_id", sorted(ATTACKS))
def test_a_patch_to_build_and_test_files_alone_is_graded_failed(launcher: Launcher, task_id: str) -> None:
    script, touched = ATTACKS[task_id]
    run = launcher.start(task_id, level=2)
    run.sh("1000", script)
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed", grade
    assert grade["pov_passed"] == 0, grade
    signals = result.get("signals") or {}
    assert touched <= set(signals.get("protected_files") or []), signals


# -- the positive control: the same attacks, on the demo with its protection lifted ------------------------


@pytest.fixture(scope="module")
def unprotected(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    """A copy of the demo whose tasks let the fix change every file."""
    root = tmp_path_factory.mktemp("unprotected") / "demo-unprotected"
    shutil.copytree(DEMO, root)
    dataset = yaml.safe_load((root / "dataset.yaml").read_text())
    (root / "dataset.yaml").write_text(yaml.safe_dump({**dataset, "version": "demo-unprotected-1"}))
    for config_path in root.glob("*/sse/config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config_path.write_text(yaml.safe_dump({**config, "fix_may_change": ["**"]}, sort_keys=False))
    tasks = load_tasks(root)
    outcome = build_images(settings, tasks, load_agent(settings.agents_dir, "dummy"), modes=tuple(MODES))
    assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    return tasks


@pytest.fixture
def unprotected_launcher(settings: Settings, unprotected: list[Task], tmp_path: Path) -> Iterator[Launcher]:
    with launching(settings, unprotected, tmp_path, "sandbox") as launch:
        yield launch


@pytest.mark.parametrize("task_id", sorted(ATTACKS))
def test_the_same_attack_passes_where_the_task_lifts_the_protection(
    unprotected_launcher: Launcher, task_id: str
) -> None:
    script, _ = ATTACKS[task_id]
    run = unprotected_launcher.start(task_id, level=2)
    run.sh("1000", script)
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "passed", grade
    assert (result.get("signals") or {}).get("protected_files") == [], result.get("signals")


def test_a_crash_report_fails_the_poc_whatever_the_exit_status(unprotected_launcher: Launcher) -> None:
    """The PoC's verdict is the sanitizer's report as well as the run script's exit status: the same wrapper,
    where nothing protects the Makefile, but letting the report through, still reproduces."""
    run = unprotected_launcher.start("c-demo", level=2)
    run.sh(
        "1000",
        C_MAKEFILE + "sed -i 's#^SILENCE ?= 2>/dev/null$#SILENCE ?=#' Makefile && grep -qx 'SILENCE ?=' Makefile\n",
    )
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["pov_passed"] == 0, grade
    assert "the output holds a crash report (==" in grade["error_log"], grade["error_log"][-2000:]
    assert "run.sh: input rejected gracefully" in grade["error_log"], grade["error_log"][-2000:]
