"""`ssebench task new`: a fake Debian mirror on disk (file:// URLs, no network), and one real package.

The fake source package has two patches in its series: an earlier one that
touches the same file as the fix, so that the fix only applies after it (the
reason the pilot applies the series up to the fix), and the fix, which changes
code and a test.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import re
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssebench import authoring
from ssebench.cli import main
from ssebench.runtime.contract import PROTECTED, is_protected
from ssebench.task import TaskConfig
from tests.helpers import mirror_reachable

PARSE_C = "int parse(int n)\n{\n    int table[4];\n    table[n] = 1;\n    return table[0];\n}\n"
TEST_C = "#include <assert.h>\nint parse(int n);\nint main(void) { assert(parse(0) == 1); return 0; }\n"

EARLIER = """Description: a comment first
--- a/src/parse.c
+++ b/src/parse.c
@@ -1,3 +1,4 @@
+/* parse one record */
 int parse(int n)
 {
     int table[4];
"""

FIX = """From: Upstream <dev@example.org>
Subject: reject out-of-range indexes (CVE-2099-0001)
Index: foo-1.0/src/parse.c
===================================================================
--- foo-1.0.orig/src/parse.c
+++ foo-1.0/src/parse.c
@@ -2,5 +2,7 @@
 int parse(int n)
 {
     int table[4];
+    if (n < 0 || n > 3)
+        return -1;
     table[n] = 1;
     return table[0];
 }
--- foo-1.0.orig/tests/parse_test.c
+++ foo-1.0/tests/parse_test.c
@@ -1,3 +1,3 @@
 #include <assert.h>
 int parse(int n);
-int main(void) { assert(parse(0) == 1); return 0; }
+int main(void) { assert(parse(0) == 1); assert(parse(9) == -1); return 0; }
"""


def _tar(path: Path, files: dict[str, str], mode: str) -> bytes:
    with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


def _mirror(root: Path, patches: dict[str, str], *, drop_orig: bool = False) -> str:
    pool = root / "pool/main/f/foo"
    pool.mkdir(parents=True)
    orig = _tar(
        pool / "foo_1.0.orig.tar.gz", {"foo-1.0/src/parse.c": PARSE_C, "foo-1.0/tests/parse_test.c": TEST_C}, "w:gz"
    )
    debian_files = {f"debian/patches/{n}": t for n, t in patches.items()}
    debian_files["debian/patches/series"] = "# the series\n" + "".join(f"{n}\n" for n in patches)
    debian_files["debian/control"] = "Source: foo\n"
    deb = _tar(pool / "foo_1.0-1+deb12u1.debian.tar.xz", debian_files, "w:xz")
    sums = "".join(
        f" {hashlib.sha256(d).hexdigest()} {len(d)} {n}\n"
        for n, d in (("foo_1.0.orig.tar.gz", orig), ("foo_1.0-1+deb12u1.debian.tar.xz", deb))
    )
    if drop_orig:
        (pool / "foo_1.0.orig.tar.gz").unlink()
    index = (
        "Package: bar\nVersion: 1.0-1\nDirectory: pool/main/b/bar\n\n"
        "Package: foo\nBinary: foo-bin, libfoo-dev\nVersion: 1.0-1+deb12u1\n"
        "Build-Depends: debhelper-compat (= 13), libz-dev, pkgconf\nFormat: 3.0 (quilt)\n"
        f"Homepage: https://example.org/foo\nChecksums-Sha256:\n{sums}Directory: pool/main/f/foo\n"
    )
    sources = root / "dists/bookworm/main/source"
    sources.mkdir(parents=True)
    (sources / "Sources.xz").write_bytes(lzma.compress(index.encode()))
    return f"file://{root}"


def _deb(root: Path, package: str, files: dict[str, str]) -> None:
    """A binary package in the fake mirror's pool, built with dpkg-deb."""
    build = root / f"build-{package}"
    for name, text in files.items():
        (build / name).parent.mkdir(parents=True, exist_ok=True)
        (build / name).write_text(text)
    (build / "DEBIAN").mkdir()
    (build / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: 1.0-1+deb12u1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n"
    )
    out = root / f"pool/main/f/foo/{package}_1.0-1+deb12u1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(build), str(out)], check=True, capture_output=True)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "dataset.yaml").write_text("version: t-1\n")
    return folder


def _new(dataset: Path, mirror: str, **kwargs: Any) -> authoring.Scaffold:
    return authoring.new_from_debian(
        dataset,
        "foo",
        "1.0-1+deb12u1",
        suites=[("bookworm", mirror)],
        patch=kwargs.get("patch"),
        advisory=kwargs.get("advisory"),
        task_id=kwargs.get("task_id"),
    )


def test_debian_package_is_split_into_code_and_tests(tmp_path: Path, dataset: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX})
    scaffold = _new(dataset, mirror, advisory="CVE-2099-0001")
    task = dataset / "foo-CVE-2099-0001"
    assert scaffold.task_dir == task
    patch = (task / "sse/diffs/patch.diff").read_text()
    test = (task / "sse/diffs/test.diff").read_text()
    assert "diff --git a/src/parse.c b/src/parse.c" in patch and "+    if (n < 0 || n > 3)" in patch
    assert "tests/parse_test.c" not in patch
    assert "diff --git a/tests/parse_test.c b/tests/parse_test.c" in test and "assert(parse(9) == -1)" in test
    assert "src/parse.c" not in test
    # The code diff applies to the tree with the series up to the fix (the earlier patch's comment in it).
    tree = tmp_path / "check"
    (tree / "src").mkdir(parents=True)
    (tree / "src/parse.c").write_text("/* parse one record */\n" + PARSE_C)
    subprocess.run(["git", "apply", "--check", "-"], input=patch, text=True, cwd=tree, check=True)
    dockerfile = (task / "Dockerfile").read_text()
    assert "NFIX=2;" in dockerfile and "foo 1.0-1+deb12u1 from Debian bookworm" in dockerfile
    # Each tarball by the URL that served it and the index's SHA-256 (apt-helper checks it), not by the .dsc,
    # which a mirror does not always keep; the packaging unpacked over the tree, the upstream tarball stripped.
    pool = mirror + "/pool/main/f/foo"
    for name in ("foo_1.0.orig.tar.gz", "foo_1.0-1+deb12u1.debian.tar.xz"):
        sha = hashlib.sha256(Path(pool.removeprefix("file://"), name).read_bytes()).hexdigest()
        assert f"apt-helper download-file {pool}/{name} {name} SHA256:{sha};" in dockerfile
    assert "tar -xf foo_1.0.orig.tar.gz -C tree --strip-components=1;" in dockerfile
    assert "rm -rf tree/debian; tar -xf foo_1.0-1+deb12u1.debian.tar.xz -C tree;" in dockerfile
    assert "apt-get source" not in dockerfile and ".dsc" not in dockerfile
    assert "--no-backup-if-mismatch" in dockerfile
    assert "libz-dev" in dockerfile and "debhelper" not in dockerfile
    # The image's history shows the RUN line: it must not name the fix.
    assert "fix-range" not in dockerfile and "CVE-2099-0001" not in dockerfile
    config = yaml.safe_load((task / "sse/config.yaml").read_text())
    TaskConfig.model_validate(config)
    assert config["language"] == "c" and config["repository"] == "https://example.org/foo"
    assert "TODO" in config["task_description"]["bug_description"]
    assert all((task / "sse" / name).stat().st_mode & 0o100 for name in ("build.sh", "run.sh", "test.sh"))
    assert any("PoC" in item for item in scaffold.todo)


def test_patch_named_directly_and_id_given(tmp_path: Path, dataset: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX})
    scaffold = _new(dataset, mirror, patch="fix-range.patch", task_id="foo-range")
    assert scaffold.task_dir.name == "foo-range"
    assert "NFIX=2;" in (scaffold.task_dir / "Dockerfile").read_text()
    # Without --advisory, the CVE the patch's header names gives the references (and would give the id).
    references = yaml.safe_load((scaffold.task_dir / "sse/config.yaml").read_text())["reference"]
    assert references == [
        "https://nvd.nist.gov/vuln/detail/CVE-2099-0001",
        "https://security-tracker.debian.org/tracker/CVE-2099-0001",
    ]
    assert _new(dataset, mirror, patch="fix-range.patch").task_dir.name == "foo-CVE-2099-0001"
    # A header naming two CVEs (a fix of an earlier fix, say): both are kept, and the author is told to choose.
    two = _mirror(
        tmp_path / "mirror2", {"fix-range.patch": FIX.replace("(CVE-2099-0001)", "(CVE-2099-0002, CVE-2099-0001)")}
    )
    both = _new(tmp_path / "ds", two, patch="fix-range.patch")
    assert both.task_dir.name == "foo-CVE-2099-0002"
    assert any("names CVE-2099-0002, CVE-2099-0001" in item for item in both.todo)
    # A patch that names none: no references to guess, and the id from the patch's name.
    plain = _new(dataset, mirror, patch="01-comment.patch")
    assert plain.task_dir.name == "foo-01-comment"
    assert yaml.safe_load((plain.task_dir / "sse/config.yaml").read_text())["reference"] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"advisory": "CVE-2000-1"},
            "--advisory CVE-2000-1: no patch names it in its name or header"
            " (the series: 01-comment.patch, fix-range.patch); give --patch",
        ),
        ({"patch": "nope.patch"}, "--patch nope.patch: not in debian/patches/series"),
        ({}, "give --patch NAME.patch or --advisory ID"),
    ],
)
def test_which_patch_errors_name_the_flag(tmp_path: Path, dataset: Path, kwargs: dict[str, str], message: str) -> None:
    mirror = _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX})
    with pytest.raises(authoring.AuthoringError, match="^" + re.escape(message)):
        _new(dataset, mirror, **kwargs)
    assert list(dataset.iterdir()) == [dataset / "dataset.yaml"]


def test_advisory_in_two_patches_is_ambiguous(tmp_path: Path, dataset: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", {"CVE-2099-0001-part1.patch": EARLIER, "fix-range.patch": FIX})
    with pytest.raises(authoring.AuthoringError, match="2 patches name") as e:
        _new(dataset, mirror, advisory="CVE-2099-0001")
    assert "once per entry, in series order, for a fix in several" in str(e.value)


# FIX in two series entries, as Debian splits some fixes (libpng's CVE-2025-66293-part1/-part2): the code, then
# the test.
FIX_CODE, _, FIX_TEST = FIX.partition("--- foo-1.0.orig/tests/parse_test.c\n")
FIX_TEST = "Subject: the test of the range check\n--- foo-1.0.orig/tests/parse_test.c\n" + FIX_TEST


def test_a_fix_in_several_entries_is_given_by_each_in_series_order(tmp_path: Path, dataset: Path) -> None:
    parts = {"01-comment.patch": EARLIER, "fix-part1.patch": FIX_CODE, "fix-part2.patch": FIX_TEST}
    mirror = _mirror(tmp_path / "mirror", parts)
    scaffold = _new(dataset, mirror, patch=["fix-part1.patch", "fix-part2.patch"])
    task = scaffold.task_dir
    assert task.name == "foo-CVE-2099-0001"  # the first part's header names it
    assert "+    if (n < 0 || n > 3)" in (task / "sse/diffs/patch.diff").read_text()
    assert "assert(parse(9) == -1)" in (task / "sse/diffs/test.diff").read_text()
    assert "NFIX=2;" in (task / "Dockerfile").read_text()  # the tree stops before the first part
    # Parts out of order, or with an entry between them, are refused naming the series' own order.
    for wrong in (["fix-part2.patch", "fix-part1.patch"], ["01-comment.patch", "fix-part2.patch"]):
        with pytest.raises(authoring.AuthoringError, match="a fix in several parts is consecutive entries"):
            _new(dataset, mirror, patch=wrong, task_id="other")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """The fake mirror over HTTP on loopback, and the log of its requests ("GET /path", "HEAD /path"); a path
    under /moved/ is redirected to the same path without it, and /broken/ answers 500."""
    _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX})
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)  # loopback, not through a proxy the machine may set
    log: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path / "mirror"), **kwargs)

        def send_head(self) -> Any:
            log.append(f"{self.command} {self.path}")
            if self.path.startswith("/moved/"):
                self.send_response(302)
                self.send_header("Location", self.path.removeprefix("/moved"))
                self.end_headers()
                return None
            if self.path.startswith("/broken/"):
                self.send_error(500)
                return None
            return super().send_head()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()


def test_whether_the_mirror_serves_a_file_is_asked_without_downloading_it(
    served: tuple[str, list[str]], dataset: Path
) -> None:
    mirror, log = served
    packaging = "/pool/main/f/foo/foo_1.0-1+deb12u1.debian.tar.xz"
    # The versions an error offers instead are probed, not fetched.
    with pytest.raises(authoring.AuthoringError, match=r"\(it serves 1.0-1\+deb12u1 \(bookworm\)\)$"):
        authoring.new_from_debian(dataset, "foo", "9", patch="fix-range.patch", suites=[("bookworm", mirror)])
    assert log.count(f"HEAD {packaging}") == 1
    assert f"GET {packaging}" not in log
    # A task is made with one download of each file: the check that its packaging is served downloads none.
    log.clear()
    _new(dataset, mirror, patch="fix-range.patch")
    assert log.count(f"GET {packaging}") == 1
    assert log.count("GET /pool/main/f/foo/foo_1.0.orig.tar.gz") == 1
    assert log.count(f"HEAD {packaging}") == 1
    # A redirect is followed with HEAD too (urllib alone would follow it with GET).
    log.clear()
    assert authoring.url_served(f"{mirror}/moved{packaging}")
    assert log == [f"HEAD /moved{packaging}", f"HEAD {packaging}"]
    # "No such file" is a no; a server that fails, or no server, is an error that says so.
    assert not authoring.url_served(f"{mirror}/pool/main/f/foo/none.tar.xz")
    with pytest.raises(
        authoring.AuthoringError, match=r"cannot ask whether the mirror serves .*/broken/x: HTTP Error 500"
    ):
        authoring.url_served(f"{mirror}/broken/x")
    with pytest.raises(authoring.AuthoringError, match=r"cannot ask whether the mirror serves http://127.0.0.1:1/x"):
        authoring.url_served("http://127.0.0.1:1/x")


def test_unknown_version_and_existing_task(tmp_path: Path, dataset: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX})
    with pytest.raises(
        authoring.AuthoringError, match=r"--debian foo=9: no such source package version in bookworm"
    ) as e:
        authoring.new_from_debian(dataset, "foo", "9", patch="fix-range.patch", suites=[("bookworm", mirror)])
    # The error says which versions could be had instead: those whose packaging the mirror serves.
    assert str(e.value).endswith("(it serves 1.0-1+deb12u1 (bookworm))")
    (Path(mirror.removeprefix("file://")) / "pool/main/f/foo/foo_1.0-1+deb12u1.debian.tar.xz").rename(
        tmp_path / "moved.tar.xz"
    )
    with pytest.raises(authoring.AuthoringError) as e:
        authoring.new_from_debian(dataset, "foo", "9", patch="fix-range.patch", suites=[("bookworm", mirror)])
    assert str(e.value).endswith("(it lists 1.0-1+deb12u1 (bookworm) but serves none)")
    (tmp_path / "moved.tar.xz").rename(
        Path(mirror.removeprefix("file://")) / "pool/main/f/foo/foo_1.0-1+deb12u1.debian.tar.xz"
    )
    _new(dataset, mirror, patch="fix-range.patch", task_id="t")
    with pytest.raises(authoring.AuthoringError, match="exists; give another --id"):
        _new(dataset, mirror, patch="fix-range.patch", task_id="t")


def test_without_the_upstream_tarball_the_tree_comes_from_the_binary_package(tmp_path: Path, dataset: Path) -> None:
    """The mirror keeps a version's packaging and binary packages longer than its upstream tarball: the
    fixed tree is taken from the package that carries it (found by the fix's files), and the Dockerfile
    installs that package and reverses the fix."""
    mirror = _mirror(tmp_path / "mirror", {"01-comment.patch": EARLIER, "fix-range.patch": FIX}, drop_orig=True)
    fixed_c = "/* parse one record */\n" + PARSE_C.replace(
        "    table[n] = 1;", "    if (n < 0 || n > 3)\n        return -1;\n    table[n] = 1;"
    )
    fixed_test = TEST_C.replace("assert(parse(0) == 1);", "assert(parse(0) == 1); assert(parse(9) == -1);")
    _deb(tmp_path / "mirror", "foo-bin", {"usr/bin/foo": "binary\n"})
    _deb(
        tmp_path / "mirror",
        "libfoo-dev",
        {"usr/share/foo/src/parse.c": fixed_c, "usr/share/foo/tests/parse_test.c": fixed_test},
    )
    scaffold = _new(dataset, mirror, advisory="CVE-2099-0001")
    patch = (scaffold.task_dir / "sse/diffs/patch.diff").read_text()
    assert "+    if (n < 0 || n > 3)" in patch and "parse_test.c" not in patch
    assert (
        "+int main(void) { assert(parse(0) == 1); assert(parse(9) == -1); return 0; }"
        in (scaffold.task_dir / "sse/diffs/test.diff").read_text()
    )
    dockerfile = (scaffold.task_dir / "Dockerfile").read_text()
    assert "pkg=libfoo-dev; ver=1.0-1+deb12u1;" in dockerfile and "cp -a /usr/share/foo /src/foo" in dockerfile
    assert "patch -R -p1 < /tmp/fix.diff" in dockerfile and "CVE-2099-0001" not in dockerfile


def test_tarball_with_wrong_checksum_is_refused(tmp_path: Path, dataset: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", {"fix-range.patch": FIX})
    orig = tmp_path / "mirror/pool/main/f/foo/foo_1.0.orig.tar.gz"
    orig.write_bytes(orig.read_bytes() + b"\0")
    with pytest.raises(authoring.AuthoringError, match="SHA-256 differs"):
        _new(dataset, mirror, patch="fix-range.patch")


@pytest.mark.parametrize("top", ["foo-1.0/", "./foo-1.0/"])
def test_the_dockerfiles_tar_unpacks_as_the_split_did(tmp_path: Path, top: str) -> None:
    """GNU tar counts `./` as a component, Python's paths do not: the Dockerfile's --strip-components is the
    count tar needs to make the tree the fix was split against."""
    archive = tmp_path / "foo_1.0.orig.tar.gz"
    _tar(archive, {f"{top}src/parse.c": PARSE_C, f"{top}README": "r\n"}, "w:gz")
    split = tmp_path / "split"
    split.mkdir()
    stripped = authoring._safe_extract(archive, split, strip=True)
    line = authoring._unpack_line(authoring.Tarball(archive.name, "file:///x", "0", "", stripped))
    assert f"--strip-components={top.count('/')};" in line
    image = tmp_path / "image"
    image.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(image), f"--strip-components={stripped}"], check=True)
    assert sorted(p.relative_to(image) for p in image.rglob("*")) == sorted(
        p.relative_to(split) for p in split.rglob("*")
    )
    assert (image / "src/parse.c").read_text() == PARSE_C


def test_split_follows_the_languages_test_conventions() -> None:
    diff = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in ("web/users.go", "web/users_test.go", "web/testdata/users.yml", "README.md")
    )
    code, tests = authoring.split_diff(diff, "go")
    assert "a/web/users.go" in code and "a/README.md" in code
    assert "users_test.go" in tests and "testdata/users.yml" in tests
    assert "users_test.go" not in code


def test_c_test_suites_under_their_own_names_are_tests() -> None:
    # rsync's and busybox's tests are in testsuite/, libpng's test programs in contrib/libtests/: their
    # authors moved them to the hidden tests and protected them by hand.
    paths = ("testsuite/safe-links.test", "testsuite/awk.tests", "contrib/libtests/pngstest.c", "util1.c")
    diff = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n" for p in paths)
    code, tests = authoring.split_diff(diff, "c")
    assert [p for p in paths if f"a/{p} " in tests] == list(paths[:3])
    assert [p for p in paths if f"a/{p} " in code] == ["util1.c"]


def test_is_protected_agrees_with_git(tmp_path: Path) -> None:
    """The matcher the split uses selects what git's glob pathspecs select (grading's side)."""
    paths = [
        "Makefile",
        "src/Makefile.am",
        "src/parse.c",
        "tests/a.c",
        "lib/test_x.c",
        "x_test.c",
        "a/b/fuzz/f.c",
        ".hidden/h.c",
        "go/kv.go",
        "go/kv_test.go",
        "vendor/x/y.go",
        "rs/build.rs",
        "rs/src/lib.rs",
        "rs/benches/b.rs",
    ]
    for p in paths:
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text("x\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A", "-f"], cwd=tmp_path, check=True)
    for language, patterns in PROTECTED.items():
        listed = subprocess.run(
            ["git", "ls-files", "--", *(f":(glob){p}" for p in patterns)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert sorted(p for p in paths if is_protected(language, p)) == sorted(listed), language
        assert listed, language


def _crate(tmp_path: Path, version: str, lib: str, test: str) -> bytes:
    files = {
        f"demo-{version}/src/lib.rs": lib,
        f"demo-{version}/tests/it.rs": test,
        f"demo-{version}/Cargo.toml": f'[package]\nname = "demo"\nversion = "{version}"\n',
        f"demo-{version}/.cargo_vcs_info.json": f'{{"sha1": "{version}"}}\n',
    }
    return _tar(tmp_path / f"demo-{version}.crate", files, "w:gz")


def test_crate_versions_are_diffed_and_split(tmp_path: Path, dataset: Path) -> None:
    crates = {
        f"{authoring.CRATES}/demo/demo-0.1.0.crate": _crate(
            tmp_path, "0.1.0", "pub fn f() {}\n", "#[test]\nfn t() {}\n"
        ),
        f"{authoring.CRATES}/demo/demo-0.1.1.crate": _crate(
            tmp_path, "0.1.1", "pub fn f() { check(); }\n", "#[test]\nfn t() {}\n#[test]\nfn u() {}\n"
        ),
    }
    scaffold = authoring.new_from_crate(
        dataset, "demo", "0.1.0", "0.1.1", advisory="RUSTSEC-2099-0001", fetch=crates.__getitem__
    )
    patch = (scaffold.task_dir / "sse/diffs/patch.diff").read_text()
    test = (scaffold.task_dir / "sse/diffs/test.diff").read_text()
    assert scaffold.task_dir.name == "demo-RUSTSEC-2099-0001"
    assert "+pub fn f() { check(); }" in patch and "tests/it.rs" not in patch
    assert "+fn u() {}" in test and "src/lib.rs" not in test
    assert ".cargo_vcs_info.json" not in patch  # packaging noise, not the fix
    assert 'version = "0.1.1"' in patch  # the rest of the version bump stays for the author to cut
    TaskConfig.model_validate(yaml.safe_load((scaffold.task_dir / "sse/config.yaml").read_text()))


def test_cli_says_what_is_left_and_names_bad_flags(
    tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["task", "new", str(dataset), "--debian", "foo"]) == 1
    assert "--debian foo: give it as PKG=VERSION" in capsys.readouterr().err
    assert main(["task", "new", str(dataset), "--crate", "demo"]) == 1
    assert "--crate needs --vulnerable VERSION and --fixed VERSION" in capsys.readouterr().err
    mirror = _mirror(tmp_path / "mirror", {"fix-range.patch": FIX})
    monkeypatch.setattr(authoring, "SUITES", (("bookworm", mirror),))
    assert main(["task", "new", str(dataset), "--debian", "foo=1.0-1+deb12u1", "--advisory", "CVE-2099-0001"]) == 0
    out = capsys.readouterr().out
    assert "sse/diffs/patch.diff" in out and "left to do:" in out and "PoC" in out


@pytest.mark.slow
@pytest.mark.skipif(not mirror_reachable(), reason="Debian's mirror is not reachable from here")
def test_real_go_package_from_the_mirror(dataset: Path) -> None:
    """The pilot's exporter-toolkit task's first step, against the real mirror (its upstream tarball is
    gone, so the source comes from the -dev package)."""
    scaffold = authoring.new_from_debian(
        dataset, "golang-github-prometheus-exporter-toolkit", "0.5.1-2+deb11u2", advisory="CVE-2022-46146"
    )
    pilot = Path(__file__).parents[2] / "datasets/pilot/exporter-toolkit-CVE-2022-46146/sse/diffs"
    assert (scaffold.task_dir / "sse/diffs/patch.diff").read_text() == (pilot / "patch.diff").read_text()
    # The hidden tests are the fix's, and whatever an author adds beside them: every line the scaffold's
    # test.diff adds is in the task's, in order.
    made, kept = ((d / "test.diff").read_text().splitlines() for d in (scaffold.task_dir / "sse/diffs", pilot))
    added = iter(line for line in kept if line.startswith("+"))
    assert all(line in added for line in made if line.startswith("+"))
    assert "golang-github-prometheus-exporter-toolkit-dev" in (scaffold.task_dir / "Dockerfile").read_text()


def test_a_security_uploads_upstream_tarball_comes_from_the_main_archives_pool() -> None:
    # The security archive serves what the upload changed; the release's upstream tarball stays in the main
    # archive's pool, which is laid out as pool/main/..., where the security archive's is pool/updates/main/...
    # (the Directory field of the security suite's Sources index).
    asked: list[str] = []
    pool = "pool/updates/main/g/giflib"
    main_pool = "pool/main/g/giflib"
    main = {f"{authoring.MIRROR}/{main_pool}/giflib_5.1.9.orig.tar.gz": b"upstream"}

    def fetch(url: str) -> bytes:
        asked.append(url)
        if url in main:
            return main[url]
        raise authoring.NotOnMirror(f"cannot fetch {url}: 404")

    def package(archive: str) -> authoring.SourcePackage:
        return authoring.SourcePackage("giflib", "5.1.9-2+deb11u1", "bullseye-security", archive, pool, {})

    secure = package(authoring.SECURITY_MIRROR)
    assert authoring.fetch_from_pools(secure, "giflib_5.1.9.orig.tar.gz", fetch) == (
        f"{authoring.MIRROR}/{main_pool}/giflib_5.1.9.orig.tar.gz",
        b"upstream",
    )
    assert asked == [
        secure.url("giflib_5.1.9.orig.tar.gz"),
        f"{authoring.MIRROR}/{main_pool}/giflib_5.1.9.orig.tar.gz",
    ]
    # A file missing from both, or from the main archive itself, is missing: said, not looked for elsewhere.
    with pytest.raises(authoring.NotOnMirror):
        authoring.fetch_from_pools(secure, "giflib_5.1.9-2+deb11u1.debian.tar.xz", fetch)
    with pytest.raises(authoring.NotOnMirror):
        authoring.fetch_from_pools(package("https://mirror.example/debian"), "giflib_5.1.9.orig.tar.gz", fetch)
