"""What of a change grading applies, chosen by git itself; crash reports in a PoC's output; deep trees.

The capture runs real git on a real tree (as this user: User switches only
as root); the container tests (tests/integrity/test_build_files.py) attack
the whole path in each language.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ssebench.runtime.bencher import crash_report
from ssebench.runtime.capture import Capture, make_base
from ssebench.runtime.contract import CODE, PROTECTED, TaskFile
from ssebench.runtime.files import prune_tree, remove_tree
from ssebench.runtime.process import User
from ssebench.runtime.protection import Protection

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
    "rs/Cargo.toml": '[package]\nname = "x"\n',
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
    """Every kind of change: code modified and added, a protected file modified, protected files added.

    (Later than the base's index by its times: capture compares sizes and whole seconds, and an edit of the
    same size within the second the base was made would look unchanged, as it would to git.)"""
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
    later = time.time() + 10
    for path in tree.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            os.utime(path, (later, later))


def _paths(patch: bytes) -> set[str]:
    return {line.split(" b/")[-1] for line in patch.decode().splitlines() if line.startswith("diff --git ")}


def test_the_graded_change_is_the_code_under_repair_and_the_rest_is_set_aside(capture: Capture) -> None:
    _edit(capture)
    change = capture.change(Protection.of("c", ["tools/**"]))
    assert _paths(change.patch) == {
        "src/parse.c",
        "src/new.c",
        "Makefile",
        "tests/parse_test.c",
        "test_tlv.c",
        "rs/build.rs",
        "rs/src/lib.rs",
        "go/zz_test.go",
        ".cargo/config.toml",
        "tools/dump.c",
    }
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
    assert capture.change(Protection.of("c")).patch == b""
    (capture.source / "Makefile").write_text("all:\n")
    change = capture.change(Protection.of("c"))
    assert change.patch and change.graded == b"" and change.set_aside == ("Makefile",)


def test_a_task_names_its_protection_in_config_yaml() -> None:
    task = TaskFile.parse(
        {
            "id": "t",
            "project": "p",
            "language": "go",
            "source": "/src/p",
            "protected_files": ["cmd/**"],
            "fix_may_change": "go.mod",
        }
    )
    protection = Protection.of_task(task)
    assert protection.code == CODE["go"] and protection.protected == (*PROTECTED["go"], "cmd/**")
    assert protection.fix_may_change == ("go.mod",)
    assert protection.graded()[1] == [":(glob)go.mod"]
    assert ":(exclude,glob)go.mod" in protection.graded()[0]


# -- crash reports ---------------------------------------------------------------------------------------------

ASAN = b"=================================================================\n==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020\n"
GO_PANIC = b"panic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:\nmain.main()\n"
RUST_PANIC = b"thread 'main' panicked at src/lib.rs:10:5:\nattempt to add with overflow\n"


@pytest.mark.parametrize(
    "language,output,found",
    [
        ("c", ASAN, "==42==ERROR: AddressSanitizer"),
        ("c", b"x.c:3:9: runtime error: signed integer overflow\n", "x.c:3:9: runtime error:"),
        ("c", b"/src/a b/lib/x.c:3:9: runtime error: shift\n", "b/lib/x.c:3:9: runtime error:"),
        ("go", GO_PANIC, "panic / goroutine 1 ["),
        ("go", b"fatal error: stack overflow\n\ngoroutine 7 [running]:\n", "fatal error / goroutine 7 ["),
        ("rust", RUST_PANIC, "thread 'main'"),
        ("rust", b"\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n", "thread 'main'"),
        ("rust", ASAN, "==42==ERROR: AddressSanitizer"),
    ],
)
def test_a_crash_report_is_found_in_a_pocs_output(tmp_path: Path, language: str, output: bytes, found: str) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_bytes(b"input rejected\n")
    err.write_bytes(output)
    assert crash_report([out, err], language) == found


@pytest.mark.parametrize(
    "language,output",
    [
        ("c", b"run.sh: input rejected gracefully\nerror: runtime error in the input\n"),
        ("go", b"panic: a word in the program's own output\n"),  # no goroutine trace: not the runtime's report
        ("go", b"goroutine 1 [running]: a line of a log\n"),
        ("rust", b"the input panicked at nothing\n"),
    ],
)
def test_output_that_only_resembles_a_report_is_not_one(tmp_path: Path, language: str, output: bytes) -> None:
    (tmp_path / "out").write_bytes(output)
    assert crash_report([tmp_path / "out"], language) is None


def test_a_long_run_of_one_byte_is_scanned_in_linear_time(tmp_path: Path) -> None:
    """A regular expression with `\\S+` before UBSan's `: runtime error:` took 10 s on 80 kB of one byte (it
    is quadratic), in the daemon's process: now 8 MB take well under a second."""
    out = tmp_path / "out"
    out.write_bytes(b"a" * (8 << 20) + b"thread 'x" * 100_000)
    started = time.monotonic()
    assert crash_report([out], "rust") is None
    assert time.monotonic() - started < 2.0
    out.write_bytes(b"a" * (8 << 20) + b": runtime error: " * 200_000)  # more marks than are checked
    started = time.monotonic()
    assert crash_report([out], "c") is None
    assert time.monotonic() - started < 2.0


def test_a_report_after_64_mb_of_output_is_found_in_the_last_64_mb(tmp_path: Path) -> None:
    from ssebench.runtime import bencher

    big = tmp_path / "err"
    with big.open("wb") as out:
        out.truncate(bencher.SCAN_SPAN * 2 + 12345)
        out.seek(bencher.SCAN_SPAN * 2)
        out.write(ASAN)
    assert crash_report([big], "c") == "==42==ERROR: AddressSanitizer"


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
    assert pruned.kept_files == 20 and pruned.dropped_count == 10 and len(list(archive.iterdir())) == 20
    assert pruned.dropped == [{"path": "*", "kind": "entries", "reason": "more than 20 entries", "count": 10}]


def test_the_prune_removes_what_is_past_its_caps_in_a_few_commands_and_stops_at_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every directory past the caps went by an `rm` of its own (2.4 ms each: 3 million of them outlasted the
    run, found by review); now a directory's overflow goes in batches, and the walk has a time limit."""

    archive = tmp_path / "archive"
    for i in range(3000):
        (archive / "many" / f"d{i}").mkdir(parents=True)
    calls: list[int] = []
    real = subprocess.run

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", counted)  # the module, as files.py calls it
    pruned = prune_tree(archive, file_cap=10, total_cap=100, max_entries=100)
    assert pruned.dropped_count == 3000 - 99 and not pruned.unfinished
    assert len(list((archive / "many").iterdir())) == 99 and len(calls) <= 6, len(calls)
    (archive / "late").mkdir()
    stopped = prune_tree(archive, file_cap=10, total_cap=100, time_limit=0)
    assert stopped.unfinished and (archive / "late").is_dir()


def test_git_selects_with_the_protections_patterns_as_documented(tmp_path: Path) -> None:
    """`**/` matches the root too, and `*` stays within one directory: the meaning the docs give."""
    repo = tmp_path / "r"
    for name in ("a.c", "x/b.c", "test/c.c", "x/test/d.c", "x/testy/e.c"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("1\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "--others", "--", ":(glob)**/*.c", ":(exclude,glob)**/test/**"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(listed.split()) == ["a.c", "x/b.c", "x/testy/e.c"]


def test_lines_of_code_that_can_hide_a_bug_are_signalled() -> None:
    """Review forged a pass on each demo task with a few graded lines (a macro renaming main in a header the
    harness includes, a Go init that exits, a Rust .init_array entry): the checks cannot tell, so result.json
    names such lines for a reader. A fix's ordinary lines are not named (the control)."""
    from ssebench.runtime.evaluator import hiding_lines

    forged = b"""diff --git a/tlv.h b/tlv.h
--- a/tlv.h
+++ b/tlv.h
@@ -1 +1,2 @@
 int x;
+#define main(...) main(int argc, char **argv) { return 0; } static int unused(__VA_ARGS__)
diff --git a/zz.go b/zz.go
--- /dev/null
+++ b/zz.go
@@ -0,0 +1,2 @@
+package kvrec
+func init() { os.Exit(0) }
diff --git a/src/lib.rs b/src/lib.rs
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1 +1,3 @@
 pub fn f() {}
+#[used] #[link_section = ".init_array"] static I: extern "C" fn() = g;
+extern "C" fn g() { std::process::exit(0) }
"""
    found, count = hiding_lines(forged)
    assert count == 4 and [f["path"] for f in found] == ["tlv.h", "zz.go", "src/lib.rs", "src/lib.rs"], found
    fix = b"""diff --git a/tlv.c b/tlv.c
--- a/tlv.c
+++ b/tlv.c
@@ -30,2 +30,4 @@
+    if (len > TLV_VALUE_MAX)
+        return TLV_ERR_TOO_LONG;
     memcpy(out, in, len);
"""
    assert hiding_lines(fix) == ([], 0)
    many = b"+++ b/x.c\n" + b"+__attribute__((constructor)) void a(void) {}\n" * 80
    found, count = hiding_lines(many)
    assert count == 80 and len(found) == 50
