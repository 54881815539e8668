"""What the leak scan searches for and how it reads the search's output (the search itself runs in real
containers: tests/integration/test_leak.py)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from ssebench.dataset import load_tasks
from ssebench.leak import (
    HOLD,
    MIN_LINE,
    WINDOW,
    Hit,
    Piece,
    ScanOutput,
    answer_pieces,
    binary_files,
    diff_hunks,
    input_terms,
    judge,
    line_terms,
    normalised,
    parse,
    patterned,
)
from tests.helpers import DEMO, PILOT

DIFF = b"""\
diff --git a/src/x.c b/src/x.c
--- a/src/x.c
+++ b/src/x.c
@@ -1,3 +1,5 @@ int parse(void)
 int parse(void) {
+\tif (len > LIMIT_OF_THE_VALUE) {
+\t\treturn ERR_TOO_LONG;
+\t}
 }
@@ -9,2 +11,3 @@
 x
+    int aligned_name    = compute_the_value(a, b);
--- a/tests/t.c
+++ b/tests/t.c
@@ -1,1 +1,1 @@
-removed line that is long enough to count
 context line
"""


def test_a_line_is_searched_without_its_indentation_and_by_its_longest_part_between_alignment() -> None:
    assert normalised(b"\t\tif (len > LIMIT_OF_THE_VALUE) {  ") == b"if (len > LIMIT_OF_THE_VALUE) {"
    assert normalised(b"    int aligned_name    = compute_the_value(a, b);") == b"= compute_the_value(a, b);"
    assert normalised(b"\tkey:\tvalue_that_is_long") == b"value_that_is_long"
    assert normalised(b"   ") == b""


def test_hunks_are_the_added_lines_of_each_hunk_named_by_their_file() -> None:
    assert diff_hunks(DIFF) == [
        ("src/x.c", [b"\tif (len > LIMIT_OF_THE_VALUE) {", b"\t\treturn ERR_TOO_LONG;", b"\t}"]),
        ("src/x.c", [b"    int aligned_name    = compute_the_value(a, b);"]),
    ]


def test_short_lines_are_not_searched_for() -> None:
    terms = line_terms([b"\t}", b"\t\treturn ERR_TOO_LONG;", b"\tif (len > LIMIT_OF_THE_VALUE) {"])
    assert terms == (b"return ERR_TOO_LONG;", b"if (len > LIMIT_OF_THE_VALUE) {")
    assert all(len(t) >= MIN_LINE for t in terms)
    assert line_terms([b"}", b"return 0;", b"x = y + 1;"]) == ()


def test_comments_are_not_searched_for_code_is() -> None:
    licence = [
        b' * THE SOFTWARE IS PROVIDED "AS IS" AND INTERNET SOFTWARE CONSORTIUM DISCLAIMS',
        b"/* Copyright (c) 2012 by Gilles Chehade <gilles@openbsd.org>",
        b"\t// reject an index below zero, as upstream does",
        b"# a comment of a shell script that is long",
        b" */",
    ]
    code = [b"\t*dst++ = (unsigned char)value_of_the_digit;", b"#include <some/long/header_name.h>"]
    assert line_terms(licence) == ()
    assert line_terms(code) == (b"*dst++ = (unsigned char)value_of_the_digit;", b"#include <some/long/header_name.h>")


def test_an_inputs_windows_are_its_distinctive_runs_between_breaks() -> None:
    data = b'FILE "disc.bin" BINARY\n  INDEX 4294567296 00:00:00\n\x00AAAAAAAAAAAAAAAAAAAAAAAA\nshort\n'
    assert input_terms(data) == (b'FILE "disc.bin" BINARY', b"INDEX 4294567296 00:00:00")
    # Runs and ramps of bytes are in every compiler's tables: never searched for.
    assert patterned(bytes(range(14, 78))) and patterned(b"(" * 40) and patterned(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert not patterned(b'{"items":[1,2,3],"insert":{"at":1}}')
    assert input_terms(bytes(range(14, 200)) + b"\n" + b"Fri, " + b"(" * 300) == ()
    assert input_terms(b"\n") == ()


def test_a_window_that_is_one_word_is_the_formats_vocabulary_not_the_input() -> None:
    # openssl-rs's PoC names a certificate extension, which every TLS library's headers and symbols name too.
    assert input_terms(b"crlDistributionPoints\nsection\n") == ()
    assert input_terms(b"crlDistributionPoints = critical,section\n") == (b"crlDistributionPoints = critical,section",)
    assert input_terms(b"dirName:issuer_dn\n") == (b"dirName:issuer_dn",)
    # A word-only input is still found as a whole file, by its hash.
    openssl = next(t for t in load_tasks(PILOT) if t.id == "openssl-rs-RUSTSEC-2023-0024")
    poc = next(p for p in answer_pieces(openssl) if p.kind == "poc")
    assert poc.terms == () and poc.sha256 is not None


def test_a_window_that_is_a_url_of_one_name_is_the_protocols_vocabulary() -> None:
    # gin-contrib-cors's variant is the origin `http://localhost`, which Python's, Perl's and Go's own
    # sources and tests hold too (22 files of its tool image); a longer origin is the input's own.
    assert input_terms(b"http://localhost\n") == ()
    assert input_terms(b"https://localhost_1\n") == ()
    assert input_terms(b"http://localhost.attacker.example\n") == (b"http://localhost.attacker.example",)
    assert input_terms(b"http://localhost-8080.attacker.example:8080\n") == (
        b"http://localhost-8080.attacker.example:8080",
    )
    # The rule is the whole line's, not its searched window's: a long line cut to WINDOW bytes that then looks
    # like one name is still the input's (an SSRF target, a long token), and only web schemes count.
    ssrf = b"http://internal_metadata_service_for_the_cloud_provider_v2_endpoint/latest/meta-data/iam?token=x"
    assert input_terms(ssrf + b"\n") == (ssrf[:WINDOW],)
    token = b"k" + hashlib.sha256(b"a session token").hexdigest().encode()
    assert input_terms(token + b"\n") == (token[:WINDOW],)
    assert input_terms(b"gopher://internal_redis_host_6379\n") == (b"gopher://internal_redis_host_6379",)
    cors = next(t for t in load_tasks(PILOT) if t.id == "gin-contrib-cors-CVE-2019-25211")
    bare = next(p for p in answer_pieces(cors) if p.where.endswith("bare_rule_prefix.txt"))
    assert bare.terms == () and bare.sha256 is not None


def test_a_binary_file_a_diff_gives_whole_is_searched_for_by_its_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * 3 + b"\x00tail of the test data\n"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=m", "-c", "user.email=m@x"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "old.bin").write_bytes(b"\x00\x01old")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "case.bin").write_bytes(data)
    (tmp_path / "old.bin").write_bytes(b"\x00\x01new and longer" * 40)
    subprocess.run([*git, "add", "-A"], check=True)
    diff = subprocess.run([*git, "diff", "--cached", "--binary"], check=True, capture_output=True).stdout
    assert b"GIT binary patch" in diff
    found = dict(binary_files(diff))
    assert found["t/case.bin"] == data
    # What git wrote as a delta (it needs the old file) cannot be searched for; what it gave whole is.
    assert set(found) <= {"t/case.bin", "old.bin"}
    assert binary_files(diff.replace(b"literal ", b"literal-broken ")) == []
    # sqlite's hidden tests are two changesets given whole: each is a test piece, by its bytes.
    sqlite = next(t for t in load_tasks(PILOT) if t.id == "sqlite-CVE-2023-7104")
    binaries = [p for p in answer_pieces(sqlite) if p.kind == "test"]
    assert [p.where for p in binaries] == [
        "diffs/test.diff binary (test/sessionfuzz-truncated-integer.changeset)",
        "diffs/test.diff binary (test/sessionfuzz-truncated-real.changeset)",
    ]
    assert all(p.sha256 and p.size for p in binaries)


# Fixes whose every added line is shorter than MIN_LINE: nothing in them can be told from ordinary code, so
# only their hidden tests and inputs are searched for (each task here is checked to still be so).
SHORT_FIXES = {"libgit2-CVE-2024-24577": "slash--;  if (*slash == '/')  break;"}


def test_the_demo_and_pilot_answers_are_pieces_with_something_to_search_for() -> None:
    tasks = load_tasks(DEMO) + load_tasks(PILOT)
    for task in tasks:
        pieces = answer_pieces(task)
        kinds = {p.kind for p in pieces}
        assert ("fix" in kinds) != (task.id in SHORT_FIXES), (task.id, kinds)
        # Hidden tests are searched for when the task has them (x-net-CVE-2024-45338's fix shipped none).
        assert "poc" in kinds and ("test" in kinds) == bool(task.config.files.future_test), (task.id, kinds)
        assert len([p for p in pieces if p.kind == "poc"]) == len(task.config.files.poc)
        assert len([p for p in pieces if p.kind == "variant"]) == len(task.config.files.variants)
        for piece in pieces:
            if piece.kind in ("poc", "variant") and piece.size and piece.size >= 8:
                assert piece.sha256 is not None
    c_demo = next(t for t in tasks if t.id == "c-demo")
    fix = [p for p in answer_pieces(c_demo) if p.kind == "fix"]
    assert fix[0].where == "diffs/patch.diff hunk 1 (tlv.c)"
    assert fix[0].terms == (b"if (len > TLV_VALUE_MAX) {", b"return TLV_ERR_TOO_LONG;")


def _out(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n"


def test_the_output_is_read_back_to_every_term_a_match_holds() -> None:
    terms = [b"return ERR_TOO_LONG;", b"ERR_TOO_LONG", b"Some Other Line Of Code();"]
    out = _out(
        b"T /a/b c.txt\0RETURN err_too_long;",  # grep -i printed the text as the file has it
        b"T /a/b c.txt\0some other line of code();",
        b"Z /x.gz (compressed)\0err_too_long",
        b"H " + b"0" * 64 + b"  /opt/with  two spaces",
        b"garbage line",
    )
    read = parse(out, terms)
    assert read.matches == {
        "/a/b c.txt": {b"return err_too_long;", b"err_too_long", b"some other line of code();"},
        "/x.gz (compressed)": {b"err_too_long"},
    }
    assert read.hashes == {"/opt/with  two spaces": "0" * 64}


def _piece(*terms: bytes, kind: str = "fix") -> Piece:
    return Piece(kind, "diffs/patch.diff hunk 1 (x.c)", terms)  # type: ignore[arg-type]


def test_a_file_holds_a_hunk_with_three_of_its_lines_or_all_when_it_has_fewer() -> None:
    assert HOLD == 3
    big = _piece(b"aaaa line one", b"bbbb line two", b"cccc line three", b"dddd line four")
    small = _piece(b"eeee only line")
    output = ScanOutput(
        matches={
            "/usr/share/two-of-four": {b"aaaa line one", b"bbbb line two"},
            "/usr/share/three-of-four": {b"aaaa line one", b"bbbb line two", b"dddd line four"},
            "/home/one": {b"eeee only line"},
        },
        hashes={},
    )
    assert judge(output, [big, small], None, "/tmp/scan") == [
        Hit("/home/one", small),
        Hit("/usr/share/three-of-four", big),
    ]


def test_lines_the_vulnerable_tree_holds_are_not_searched_for_but_names_always_are() -> None:
    hunk = _piece(b"aaaa line one", b"bbbb line two", b"cccc line three")
    name = Piece("name", "CVE-2023-0001", (b"cve-2023-0001",))
    output = ScanOutput(
        matches={
            # The tree has two of the hunk's lines (a fix that repeats code found elsewhere in it), and a name.
            "/src/proj/other.c": {b"aaaa line one", b"bbbb line two", b"cve-2023-0001"},
            "/usr/share/doc/copy.c": {b"aaaa line one", b"bbbb line two"},
            "/var/tmp/whole.c": {b"aaaa line one", b"bbbb line two", b"cccc line three"},
            "/tmp/scan/terms": {b"aaaa line one", b"bbbb line two", b"cccc line three"},
        },
        hashes={},
    )
    hits = judge(output, [hunk, name], "/src/proj", "/tmp/scan")
    assert hits == [Hit("/src/proj/other.c", name), Hit("/var/tmp/whole.c", hunk)]
    # The file holding only the tree's two lines holds nothing of the answer; the one holding the third does.
    assert Hit("/usr/share/doc/copy.c", hunk) not in hits
    # With the third line in the tree too, nothing of the hunk is left to find.
    output.matches["/src/proj/more.c"] = {b"cccc line three"}
    assert judge(output, [hunk], "/src/proj", "/tmp/scan") == []


def test_the_trees_git_history_is_not_the_tree() -> None:
    # A history in the tree can hold the fixed code (a clone with later commits): what it holds is searched for
    # like any file's, and exempts nothing elsewhere.
    hunk = _piece(b"aaaa line one", b"bbbb line two", b"cccc line three")
    output = ScanOutput(
        matches={
            "/src/proj/.git (history)": {b"aaaa line one", b"bbbb line two", b"cccc line three"},
            "/home/notes/copy.c": {b"aaaa line one", b"bbbb line two", b"cccc line three"},
        },
        hashes={},
    )
    assert judge(output, [hunk], "/src/proj", "/tmp/scan") == [
        Hit("/home/notes/copy.c", hunk),
        Hit("/src/proj/.git (history)", hunk),
    ]


def test_a_copy_of_an_input_is_found_by_its_hash_whatever_its_name() -> None:
    data = b"\x01a\x01b\x03key\x00\x09long-name"
    poc = Piece("poc", "pocs/x.kv", (), sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    output = ScanOutput(
        matches={},
        hashes={"/opt/renamed.bin": poc.sha256 or "", "/usr/lib/other": "f" * 64, "/tmp/scan/x": poc.sha256 or ""},
    )
    assert judge(output, [poc], "/src/x", "/tmp/scan") == [Hit("/opt/renamed.bin", poc)]
    assert str(Hit("/opt/renamed.bin", poc)) == "/opt/renamed.bin: poc pocs/x.kv"
