"""What of a change grading applies, chosen by git itself; crash reports in a PoC's output; deep trees.

The capture runs real git on a real tree (as this user: User switches only
as root); the container tests (tests/integrity/test_build_files.py) attack
the whole path in each language.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ssebench.runtime.bencher import crash_report
from ssebench.runtime.capture import BASE_REPO, Capture, make_base
from ssebench.runtime.files import prune_tree, remove_tree
from ssebench.runtime.process import User
from ssebench.runtime.protection import CODE, PROTECTED, Protection
from ssebench.runtime.taskfile import parse_taskfile

ME = User(name="me", uid=os.geteuid(), gid=os.getegid(), home="/nonexistent")

TREE = {
    "src/parse.c": "int parse(void) { return 0; }\n",
    "src/parse.h": "int parse(void);\n",
    "Makefile": "all:\n\tcc -c src/parse.c\n",
    "tests/parse_test.c": "int main(void) { return 0; }\n",
    "test_tlv.c": "int main(void) { return 0; }\n",
    "tools/dump.c": "int main(void) { return 0; }\n",
    "go/kv.go": "package kv\n",
    "go/kv_test.go": "package kv\n",
    "rs/src/lib.rs": "pub fn f() {}\n",
    "rs/build.rs": "fn main() {}\n",
    "rs/Cargo.toml": "[package]\nname = \"x\"\n",
    "docs/README": "read me\n",
}


@pytest.fixture
def capture(tmp_path: Path) -> Capture:
    source = tmp_path / "tree"
    for name, text in TREE.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    make_base(source, tmp_path / "capture")
    if os.geteuid() != 0:  # make_base hands the base to root; without root it stays ours, which is as good here
        pytest.skip("make_base needs root")
    captured = Capture(source, tmp_path / "capture", ME, patch_limit=1 << 20)
    captured.prepare()
    return captured


def _edit(capture: Capture) -> None:
    """Every kind of change: code modified and added, a protected file modified, protected files added."""
    tree = capture.source
    (tree / "src" / "parse.c").write_text("int parse(void) { return 1; }\n")
    (tree / "src" / "new.c").write_text("int added;\n")
    (tree / "Makefile").write_text("all:\n\t-true\n")
    (tree / "tests" / "parse_test.c").write_text("int main(void) { return 1; }\n")
    (tree / "test_tlv.c").unlink()
    (tree / "rs" / "build.rs").write_text("fn main() { panic!() }\n")
    (tree / "rs" / "src" / "lib.rs").write_text("pub fn f() { }\n")
    (tree / "go" / "zz_test.go").write_text("package kv\n")
    (tree / ".cargo").mkdir()
    (tree / ".cargo" / "config.toml").write_text("[build]\n")
    (tree / "tools" / "dump.c").write_text("int main(void) { return 1; }\n")


def _paths(patch: bytes) -> set[str]:
    return {line.split(" b/")[-1] for line in patch.decode().splitlines() if line.startswith("diff --git ")}


def test_the_graded_change_is_the_code_under_repair_and_the_rest_is_set_aside(capture: Capture) -> None:
    _edit(capture)
    change = capture.change(Protection.of("c", ["tools/**"]))
    assert _paths(change.patch) == {"src/parse.c", "src/new.c", "Makefile", "tests/parse_test.c", "test_tlv.c",
                                    "rs/build.rs", "rs/src/lib.rs", "go/zz_test.go", ".cargo/config.toml",
                                    "tools/dump.c"}
    # C's code: .c and .h, outside tests, harnesses and hidden directories; Rust's and Go's files are not C's.
    assert _paths(change.graded) == {"src/parse.c", "src/new.c"}
    assert set(change.set_aside) == _paths(change.patch) - _paths(change.graded)
    # The graded part is a patch of its own, byte for byte the whole change's hunks for those files.
    assert all(section in change.patch for section in change.graded.split(b"diff --git ")[1:])


def test_each_language_grades_its_own_code_and_fix_may_change_wins(capture: Capture) -> None:
    _edit(capture)
    assert _paths(capture.change(Protection.of("rust")).graded) == {"rs/src/lib.rs"}
    assert _paths(capture.change(Protection.of("go")).graded) == set()
    # A task whose fix changes a test's expectations lets it change that file, and nothing else of the tests.
    lifted = capture.change(Protection.of("c", fix_may_change=["tests/parse_test.c", "Makefile"]))
    assert _paths(lifted.graded) == {"src/parse.c", "src/new.c", "tools/dump.c", "tests/parse_test.c", "Makefile"}
    assert "tests/parse_test.c" not in lifted.set_aside and "test_tlv.c" in lifted.set_aside
    everything = capture.change(Protection.of("c", fix_may_change=["**"]))
    assert everything.set_aside == () and _paths(everything.graded) == _paths(everything.patch)


def test_no_change_and_a_change_of_protected_files_only(capture: Capture) -> None:
    assert capture.change(Protection.of("c")) .patch == b""
    (capture.source / "Makefile").write_text("all:\n")
    change = capture.change(Protection.of("c"))
    assert change.patch and change.graded == b"" and change.set_aside == ("Makefile",)


def test_a_task_names_its_protection_in_config_yaml() -> None:
    task = parse_taskfile({"id": "t", "project": "p", "language": "go", "source": "/src/p",
                           "protected_files": ["cmd/**"], "fix_may_change": "go.mod"})
    protection = task.protection()
    assert protection.code == CODE["go"] and protection.protected == (*PROTECTED["go"], "cmd/**")
    assert protection.fix_may_change == ("go.mod",)
    assert protection.graded()[1] == [":(glob)go.mod"]
    assert ":(exclude,glob)go.mod" in protection.graded()[0]


# -- crash reports ---------------------------------------------------------------------------------------------

ASAN = b"=================================================================\n==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020\n"
GO_PANIC = b"panic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:\nmain.main()\n"
RUST_PANIC = b"thread 'main' panicked at src/lib.rs:10:5:\nattempt to add with overflow\n"


@pytest.mark.parametrize("language,output,found", [
    ("c", ASAN, "==42==ERROR: AddressSanitizer"),
    ("c", b"x.c:3:9: runtime error: signed integer overflow\n", "x.c:3:9: runtime error: "),
    ("go", GO_PANIC, "panic:  / goroutine 1 ["),
    ("go", b"fatal error: stack overflow\n\ngoroutine 7 [running]:\n", "fatal error:  / goroutine 7 ["),
    ("rust", RUST_PANIC, "thread 'main' panicked at"),
    ("rust", b"\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n",
     "thread 'main' has overflowed its stack"),
    ("rust", ASAN, "==42==ERROR: AddressSanitizer"),
])
def test_a_crash_report_is_found_in_a_pocs_output(tmp_path: Path, language: str, output: bytes, found: str) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_bytes(b"input rejected\n")
    err.write_bytes(output)
    assert crash_report([out, err], language) == found


@pytest.mark.parametrize("language,output", [
    ("c", b"run.sh: input rejected gracefully\nerror: runtime error in the input\n"),
    ("go", b"panic: a word in the program's own output\n"),  # no goroutine trace: not the runtime's report
    ("go", b"goroutine 1 [running]: a line of a log\n"),
    ("rust", b"the input panicked at nothing\n"),
])
def test_output_that_only_resembles_a_report_is_not_one(tmp_path: Path, language: str, output: bytes) -> None:
    (tmp_path / "out").write_bytes(output)
    assert crash_report([tmp_path / "out"], language) is None


def test_a_report_buried_in_a_flood_and_across_a_chunk_boundary_is_found(tmp_path: Path) -> None:
    from ssebench.runtime import bencher

    flood = tmp_path / "err"
    with flood.open("wb") as out:
        out.write(b"x" * (bencher._SCAN_CHUNK - 10))  # the report straddles the first chunk's end
        out.write(ASAN)
        out.write(b"y\n" * (8 << 20))  # output after the report pushes it out of any tail kept
    assert crash_report([flood], "c") == "==42==ERROR: AddressSanitizer"


# -- deep trees ------------------------------------------------------------------------------------------------


def _deep(root: Path, depth: int) -> Path:
    """A directory `depth` levels deep under `root`, made through descriptors (its path is too long for one call)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as leaf:
            leaf.write("x")
    finally:
        os.close(fd)
    return root


def test_a_tree_deeper_than_pythons_recursion_is_removed(tmp_path: Path) -> None:
    import shutil

    control = _deep(tmp_path / "control", 1100)
    with pytest.raises(RecursionError):  # the positive control: what cleaning up raised before
        shutil.rmtree(control, ignore_errors=True)
    assert remove_tree(control) and not control.exists()  # (pytest's own clean-up of tmp_path recurses too)
    deep = _deep(tmp_path / "deep", 1100)
    assert remove_tree(deep) and not deep.exists()
    assert remove_tree(tmp_path / "absent")


def test_the_archive_prune_walks_a_deep_tree_without_recursing(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    _deep(archive, 1100)
    (archive / "dialog.jsonl").write_text("{}\n")
    pruned = prune_tree(archive, file_cap=1 << 20, total_cap=1 << 20, max_depth=64)
    assert pruned.kept_files == 1 and (archive / "dialog.jsonl").is_file()
    [deepest] = [d for d in pruned.dropped if d["reason"] == "deeper than 64 levels"]
    assert deepest["path"] == "/".join(["d"] * 64) and not (archive / Path(*["d"] * 64)).exists()
    assert (archive / Path(*["d"] * 63)).is_dir()  # what is within the cap stays


def test_the_prune_caps_entries(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    for i in range(30):
        (archive / f"f{i:02}").write_text("x")
    pruned = prune_tree(archive, file_cap=10, total_cap=100, max_entries=20)
    assert pruned.kept_files == 20 and len(pruned.dropped) == 10 and len(list(archive.iterdir())) == 20


def test_git_selects_with_the_protections_patterns_as_documented(tmp_path: Path) -> None:
    """`**/` matches the root too, and `*` stays within one directory: the meaning the docs give."""
    repo = tmp_path / "r"
    for name in ("a.c", "x/b.c", "test/c.c", "x/test/d.c", "x/testy/e.c"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("1\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "--others", "--", ":(glob)**/*.c",
                             ":(exclude,glob)**/test/**"], capture_output=True, text=True, check=True).stdout
    assert sorted(listed.split()) == ["a.c", "x/b.c", "x/testy/e.c"]
