"""`ssebench task new`: the skeleton of a task, made from a Debian source package or from two crate versions.

What an author used to do by hand for every task, done once here: find the exact source package version on
Debian's mirror, fetch and check its files, unpack it, pick the security patch out of `debian/patches`,
apply the series up to it, split the fix into the code change (`sse/diffs/patch.diff`) and its tests
(`sse/diffs/test.diff`, by the language's test conventions in `ssebench.runtime.protection`), and write a
Dockerfile that rebuilds the vulnerable tree the way the pilot's tasks do (the series applied up to, not
including, the fix; `debian/` and `.pc/` deleted so that nothing the agent reads names the fix), a
config.yaml with TODOs where only the author knows the answer, and build/run/test script skeletons. What
is left to a person is what needs understanding of the bug: the PoC, the harness, the report.

Everything is fetched on the host (the mirror and crates.io are what the host may reach); the Dockerfile
fetches the same pinned version again from the mirror inside the build.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ssebench.errors import SSEBenchError
from ssebench.runtime.contract import is_protected

MIRROR = "https://deb.debian.org/debian"
SECURITY_MIRROR = "https://deb.debian.org/debian-security"
CRATES = "https://static.crates.io/crates"

# Where a version is looked for, in this order: (suite, archive). The containers build on bookworm; older
# and newer suites are still on the mirror, and the Dockerfile fetches a version's tarballs by their URLs.
SUITES: tuple[tuple[str, str], ...] = (
    ("bookworm-security", SECURITY_MIRROR),
    ("bookworm-updates", MIRROR),
    ("bookworm", MIRROR),
    ("trixie-security", SECURITY_MIRROR),
    ("trixie", MIRROR),
    ("bullseye-security", SECURITY_MIRROR),
    ("bullseye", MIRROR),
    ("sid", MIRROR),
)

# Build-Depends that are Debian's packaging tools or the compiler, not libraries a task needs.
_TOOLING = re.compile(r"^(debhelper|debhelper-compat|dh-\S+|golang-any|golang-go|dpkg-dev|cargo|rustc|quilt)$")


class AuthoringError(SSEBenchError):
    """A task cannot be made as asked: one line that names what and how to fix it."""


class NotOnMirror(AuthoringError):
    """The file is not (or no longer) on the mirror."""


Fetch = Callable[[str], bytes]


class _KeepMethod(urllib.request.HTTPRedirectHandler):
    """Follows a redirect with the request's own method: urllib turns a redirected HEAD into a GET."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.method = req.get_method()
        return new


_OPENER = urllib.request.build_opener(_KeepMethod)


def _ask(url: str, method: str, doing: str, timeout: float) -> bytes:
    """The answer to a `method` request for `url` (https or file): its body for GET, nothing for HEAD; an
    AuthoringError naming the URL and what was being done, NotOnMirror when there is no such file."""
    try:
        with _OPENER.open(urllib.request.Request(url, method=method), timeout=timeout) as response:
            return b"" if method == "HEAD" else bytes(response.read())
    except urllib.error.HTTPError as exc:
        error: type[AuthoringError] = NotOnMirror if exc.code in (403, 404, 410) else AuthoringError
        raise error(f"cannot {doing} {url}: {exc}") from None
    except urllib.error.URLError as exc:
        error = NotOnMirror if isinstance(exc.reason, FileNotFoundError | IsADirectoryError) else AuthoringError
        raise error(f"cannot {doing} {url}: {exc}") from None
    except OSError as exc:
        raise AuthoringError(f"cannot {doing} {url}: {exc}") from None


def fetch_url(url: str) -> bytes:
    """The bytes at `url` (https or file), or an AuthoringError naming the URL (NotOnMirror when there is
    no such file)."""
    return _ask(url, "GET", "fetch", timeout=120)


def url_served(url: str) -> bool:
    """Whether the mirror serves `url` (https or file), asked without downloading it: a HEAD request. An
    answer other than "there is no such file" (a timeout, a refused connection, a server error) is an
    AuthoringError naming the URL, not a "no"."""
    try:
        _ask(url, "HEAD", "ask whether the mirror serves", timeout=60)
    except NotOnMirror:
        return False
    return True


@dataclass(frozen=True)
class SourcePackage:
    """One version of a Debian source package as the mirror's Sources index describes it."""

    name: str
    version: str
    suite: str
    archive: str
    directory: str
    files: dict[str, str]  # file name -> SHA-256
    build_depends: tuple[str, ...] = ()
    homepage: str = ""
    go_import_path: str = ""
    format: str = "3.0 (quilt)"
    binaries: tuple[str, ...] = ()

    def url(self, filename: str) -> str:
        return f"{self.archive}/{self.directory}/{filename}"


def _fields(paragraph: str) -> dict[str, str]:
    """A deb822 paragraph's fields (continuation lines joined with newlines)."""
    fields: dict[str, str] = {}
    key = ""
    for line in paragraph.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def parse_sources(text: str, name: str, version: str, suite: str, archive: str) -> SourcePackage | None:
    """The paragraph of `name` at exactly `version` in a Sources index, or None."""
    for paragraph in re.split(r"\n\s*\n", text):
        if f"Package: {name}\n" not in paragraph + "\n":
            continue
        f = _fields(paragraph)
        if f.get("Package") != name or f.get("Version") != version:
            continue
        files = {}
        for line in f.get("Checksums-Sha256", "").splitlines():
            parts = line.split()
            if len(parts) == 3:
                files[parts[2]] = parts[0]
        depends = tuple(
            d.split("(")[0].split("[")[0].split("<")[0].strip()
            for d in re.split(r"[,|]", f.get("Build-Depends", "").replace("\n", " "))
            if d.strip()
        )
        return SourcePackage(
            name=name,
            version=version,
            suite=suite,
            archive=archive,
            directory=f.get("Directory", ""),
            files=files,
            build_depends=depends,
            homepage=f.get("Homepage", ""),
            go_import_path=f.get("Go-Import-Path", "").split(",")[0].strip(),
            format=f.get("Format", "3.0 (quilt)"),
            binaries=tuple(b.strip() for b in f.get("Binary", "").split(",") if b.strip()),
        )
    return None


def _index_entries(text: str, name: str, suite: str, archive: str) -> list[SourcePackage]:
    """Every version of `name` a Sources index lists."""
    versions = re.findall(rf"^Package: {re.escape(name)}\n(?:.+\n)*?Version: (\S+)", text, flags=re.MULTILINE)
    entries = (parse_sources(text, name, v, suite, archive) for v in dict.fromkeys(versions))
    return [e for e in entries if e is not None]


def _served(entry: SourcePackage) -> bool:
    """Whether the mirror serves the entry's packaging (the .debian tarball, or the .dsc of a native package)."""
    packaging = [f for f in entry.files if ".debian.tar." in f] or [f for f in entry.files if f.endswith(".dsc")]
    return all(url_served(entry.url(f)) for f in packaging)


def find_sources(
    name: str,
    version: str,
    fetch: Fetch = fetch_url,
    suites: Iterable[tuple[str, str]] | None = None,
) -> tuple[list[SourcePackage], list[SourcePackage]]:
    """Every suite's entry for `name`=`version` (a version is often in a suite and its security archive,
    and the mirror may keep the files of only one of them), and every other version the suites list, for
    the error that says what could be had instead; none when the version is gone. `fetch` reads the
    indexes; whether a file is served is asked of the mirror itself (url_served)."""
    tried = []
    found: list[SourcePackage] = []
    others: list[SourcePackage] = []
    for suite, archive in SUITES if suites is None else suites:
        url = f"{archive}/dists/{suite}/main/source/Sources.xz"
        try:
            text = lzma.decompress(fetch(url)).decode("utf-8", "replace")
        except AuthoringError:
            continue
        tried.append(suite)
        for entry in _index_entries(text, name, suite, archive):
            (found if entry.version == version else others).append(entry)
    if not found:
        raise AuthoringError(
            f"--debian {name}={version}: no such source package version in"
            f" {', '.join(tried) or 'any suite (is the mirror reachable?)'}; give a version the mirror's Sources index lists"
            + _instead(others)
        )
    return found, others


def _instead(others: list[SourcePackage]) -> str:
    """What the mirror serves of the package's other versions, said at the end of an error (which a failure to
    ask does not replace)."""
    try:
        served = [f"{e.version} ({e.suite})" for e in others if _served(e)]
    except AuthoringError as exc:
        return f" ({exc})"
    if served:
        return f" (it serves {', '.join(served)})"
    return f" (it lists {', '.join(f'{e.version} ({e.suite})' for e in others)} but serves none)" if others else ""


def find_source(
    name: str,
    version: str,
    fetch: Fetch = fetch_url,
    suites: Iterable[tuple[str, str]] | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> SourcePackage:
    """The first suite entry for `name`=`version` whose packaging (the .debian tarball, or the .dsc of a
    native package) the mirror still serves."""
    entries, others = find_sources(name, version, fetch, suites)
    for entry in entries:
        if _served(entry):
            say(f"found {name} {version} in {entry.suite}")
            return entry
    raise AuthoringError(
        f"--debian {name}={version}: the mirror lists it ({', '.join(e.suite for e in entries)}) but serves none"
        " of its packaging files; pick another version" + _instead(others)
    )


def _safe_extract(archive: Path, dest: Path, strip: bool) -> int:
    """Unpack a tarball into `dest`, without its top folder when `strip` and it has just one; members that
    would land outside `dest`, links and devices are refused by tarfile's data filter. Returns how many
    leading components of the members' names were dropped, as GNU tar's --strip-components counts them
    (`./foo-1.0/x` is three components, of which two are dropped)."""
    stripped = 0
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        if strip:
            tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
            if len(tops) == 1:
                top = tops.pop()
                raw = [m.name.split("/") for m in members if PurePosixPath(m.name).parts]
                counts = {next(i for i, part in enumerate(parts) if part == top) + 1 for parts in raw}
                if len(counts) != 1:
                    raise AuthoringError(f"{archive.name}: its members name their top folder in different ways")
                stripped = counts.pop()
                kept = []
                for m in members:
                    parts = PurePosixPath(m.name).parts[1:]
                    if not parts:
                        continue
                    m.name = str(PurePosixPath(*parts))
                    kept.append(m)
                members = kept
        tar.extractall(dest, members=members, filter="data")
    return stripped


@dataclass(frozen=True)
class Tarball:
    """One tarball of a source package as `task new` fetched it: where from (the pool that served it), its
    SHA-256 from the Sources index, and where in the tree it unpacks. The Dockerfile fetches and unpacks
    the same tarballs the same way, so the image's tree is the one the fix was split against."""

    filename: str
    url: str
    sha256: str
    folder: str = ""  # under the tree: "" for the main tarball and debian/, a component's name for its own
    strip: int = 1  # leading name components dropped (tar --strip-components): the tarball's one top folder


# What the Sources index may name, as the Dockerfile's shell and the host's paths take it unquoted.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+~_-]*")
_POOL_DIR = re.compile(r"pool/(?:[A-Za-z0-9+_-][A-Za-z0-9.+_-]*/)*[A-Za-z0-9+_-][A-Za-z0-9.+_-]*")


def unpack_source(pkg: SourcePackage, work: Path, fetch: Fetch = fetch_url) -> tuple[Path, list[Tarball]]:
    """Fetch the package's tarballs, check their SHA-256 against the index, and unpack the tree (without
    applying any patch) into `work`/tree; with the tarballs in the order they were unpacked."""
    if not _POOL_DIR.fullmatch(pkg.directory) or not all(_FILE_NAME.fullmatch(f) for f in pkg.files):
        raise AuthoringError(
            f"{pkg.name} {pkg.version}: the Sources index names a directory or file that is not a pool path"
        )
    tree = work / "tree"
    tree.mkdir(parents=True)
    orig: list[tuple[Path, str, str]] = []
    debian: tuple[Path, str, str] | None = None
    for filename, sha in pkg.files.items():
        if ".tar." not in filename or filename.endswith(".asc"):
            continue  # the .dsc and signatures: the index's checksums already pin the tarballs
        url, data = fetch_from_pools(pkg, filename, fetch)
        if hashlib.sha256(data).hexdigest() != sha:
            raise AuthoringError(f"{url}: SHA-256 differs from the Sources index; fetch again")
        path = work / filename
        path.write_bytes(data)
        if ".debian.tar." in filename:
            debian = (path, url, sha)
        elif ".orig" in filename or pkg.format.startswith("3.0 (native)"):
            orig.append((path, url, sha))
    if not orig:
        raise AuthoringError(f"{pkg.name} {pkg.version}: no source tarball in its .dsc (format {pkg.format})")
    # The main tarball first, then component tarballs (NAME.orig-COMPONENT.tar.*) into their folder.
    orig.sort(key=lambda t: ".orig-" in t[0].name)
    tarballs = []
    for path, url, sha in orig:
        component = re.search(r"\.orig-([A-Za-z0-9-]+)\.tar\.", path.name)
        folder = component.group(1) if component else ""
        (tree / folder).mkdir(exist_ok=True)
        stripped = _safe_extract(path, tree / folder, strip=True)
        tarballs.append(Tarball(path.name, url, sha, folder, stripped))
    if debian is not None:
        shutil.rmtree(tree / "debian", ignore_errors=True)
        _safe_extract(debian[0], tree, strip=False)
        tarballs.append(Tarball(debian[0].name, debian[1], debian[2], "", 0))
    return tree, tarballs


def fetch_from_pools(pkg: SourcePackage, filename: str, fetch: Fetch = fetch_url) -> tuple[str, bytes]:
    """A file of the package, and the URL that served it: from its suite's pool, or, for a security upload,
    from the main archive's pool at the same place: the security archive serves only what the upload
    changed (its upstream tarball is the release's, kept in the main archive's pool/main, where the
    security archive's is pool/updates/main). The caller checks the
    SHA-256 the index gives, wherever it came from."""
    try:
        return pkg.url(filename), fetch(pkg.url(filename))
    except NotOnMirror:
        if pkg.archive != SECURITY_MIRROR:
            raise
        # The security archive's pool is pool/updates/main/..., the main archive's pool/main/...
        url = f"{MIRROR}/{re.sub(r'^pool/updates/', 'pool/', pkg.directory)}/{filename}"
        return url, fetch(url)


def _binary_candidates(pkg: SourcePackage) -> list[str]:
    """The binary packages that may carry the source: -dev (golang-*-dev, librust-*-dev), then -src (Go's
    toolchain), then the rest."""
    dev = [b for b in pkg.binaries if b.endswith("-dev")]
    src = [b for b in pkg.binaries if b.endswith("-src")]
    return dev + src + [b for b in pkg.binaries if b not in dev and b not in src]


def _without_epoch(version: str) -> str:
    return version.split(":", 1)[-1]


def patch_paths(text: str) -> list[str]:
    """The files a patch changes that exist before it (its '--- ' side), without the first component."""
    paths = []
    for line in text.splitlines():
        if line.startswith("--- ") and not line.startswith("--- /dev/null"):
            name = line[4:].split("\t")[0].strip()
            parts = PurePosixPath(name).parts[1:]
            if parts:
                paths.append(str(PurePosixPath(*parts)))
    return paths


def _find_root(root: Path, paths: list[str]) -> Path | None:
    """The folder of an unpacked package under which every path exists."""
    if not paths:
        return None
    first = paths[0]
    for found in sorted(root.rglob(PurePosixPath(first).name)):
        if found.as_posix().endswith("/" + first):
            base = Path(found.as_posix()[: -len(first) - 1])
            if all((base / p).exists() for p in paths):
                return base
    return None


def unpack_binary(
    pkg: SourcePackage, work: Path, patch: Sequence[str], advisory: str | None, fetch: Fetch = fetch_url
) -> tuple[Path, str, str]:
    """The fixed tree as a binary package installs it (every patch of the series applied), with the source
    package's debian/ in it: for packages whose upstream tarball the mirror no longer has. Returns the
    tree, the binary package and where it installs the tree (found by the fix's files)."""
    debian = next((f for f in pkg.files if ".debian.tar." in f), None)
    if debian is None:
        raise AuthoringError(f"{pkg.name} {pkg.version}: no debian tarball, so no debian/patches to take the fix from")
    data = fetch(pkg.url(debian))
    if hashlib.sha256(data).hexdigest() != pkg.files[debian]:
        raise AuthoringError(f"{pkg.url(debian)}: SHA-256 differs from the Sources index; fetch again")
    (work / debian).write_bytes(data)
    packaging = work / "packaging"
    packaging.mkdir()
    _safe_extract(work / debian, packaging, strip=False)
    fix = pick_patch(packaging, patch, advisory)
    paths = list(
        dict.fromkeys(
            p for part in fix for p in patch_paths((packaging / "debian/patches" / part).read_text("utf-8", "replace"))
        )
    )
    if shutil.which("dpkg-deb") is None:
        raise AuthoringError("dpkg-deb is not installed on this host (apt-get install dpkg)")
    for binary in _binary_candidates(pkg):
        for arch in ("all", "amd64"):
            name = f"{binary}_{_without_epoch(pkg.version)}_{arch}.deb"
            try:
                deb = fetch(pkg.url(name))
            except AuthoringError:
                continue
            (work / name).write_bytes(deb)
            root = work / f"root-{binary}"
            subprocess.run(["dpkg-deb", "-x", str(work / name), str(root)], check=True, capture_output=True)
            base = _find_root(root, paths)
            if base is None:
                break
            tree = work / "tree"
            shutil.copytree(base, tree, symlinks=True)
            shutil.rmtree(tree / "debian", ignore_errors=True)
            shutil.copytree(packaging / "debian", tree / "debian")
            return tree, binary, "/" + base.relative_to(root).as_posix()
    raise AuthoringError(
        f"{pkg.name} {pkg.version}: the mirror has neither its upstream tarball nor a binary package with the"
        f" files debian/patches/{', '.join(fix)} changes; pick another version"
    )


def read_series(tree: Path) -> list[str]:
    """The quilt series' patch names, in order."""
    series = tree / "debian" / "patches" / "series"
    if not series.is_file():
        return []
    names = []
    for line in series.read_text(errors="replace").splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.append(line.split()[0])
    return names


def _patch_header(tree: Path, name: str) -> str:
    """A debian/patches entry's header (DEP-3 fields, commit message): what comes before its first diff."""
    text = (tree / "debian" / "patches" / name).read_text(errors="replace")
    return text.split("\n---", 1)[0].split("\ndiff ", 1)[0].split("\nIndex: ", 1)[0]


_CVE = re.compile(r"CVE-\d{4}-\d{4,}", re.IGNORECASE)


def advisories_named(tree: Path, fix: Sequence[str]) -> list[str]:
    """The CVE ids the fix's patches name in their file names and headers, in order, each once: a fix given
    by --patch without --advisory still gets its references and its task id from them."""
    found = _CVE.findall("\n".join(f"{part}\n{_patch_header(tree, part)}" for part in fix))
    return list(dict.fromkeys(cve.upper() for cve in found))


def pick_patch(tree: Path, patch: Sequence[str], advisory: str | None) -> list[str]:
    """The series entries that are the fix: named by --patch (one, or consecutive entries in series order
    for a fix Debian split into parts), or the one whose name or header names --advisory."""
    series = read_series(tree)
    if not series:
        raise AuthoringError("the source package has no debian/patches/series; it carries no patch to take")
    if patch:
        for name in patch:
            if name not in series:
                raise AuthoringError(f"--patch {name}: not in debian/patches/series ({', '.join(series)})")
        first = series.index(patch[0])
        if list(patch) != series[first : first + len(patch)]:
            raise AuthoringError(
                f"--patch {' --patch '.join(patch)}: a fix in several parts is consecutive entries of"
                f" debian/patches/series, given in its order ({', '.join(series[first : first + len(patch)])})"
            )
        return list(patch)
    if not advisory:
        raise AuthoringError("give --patch NAME.patch or --advisory ID to say which patch is the fix")
    found = []
    for name in series:
        header = _patch_header(tree, name)
        if advisory.lower() in name.lower() or advisory.lower() in header.lower():
            found.append(name)
    if len(found) != 1:
        what = (
            f"no patch names it in its name or header (the series: {', '.join(series)})"
            if not found
            else f"{len(found)} patches name it ({', '.join(found)})"
        )
        raise AuthoringError(
            f"--advisory {advisory}: {what}; give --patch NAME.patch"
            " (once per entry, in series order, for a fix in several)"
        )
    return found


def _git(tree: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", "-c", "user.name=ssebench", "-c", "user.email=ssebench@localhost", "-c", "core.autocrlf=false", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise AuthoringError(f"git {' '.join(args)} failed in {tree}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def _restage(tree: Path) -> None:
    """Stage the tree's files as they are now, each read again: git trusts an index entry whose size and
    times match, and a file replaced by another of the same size (a version bump, `<` for `>`) with the
    same mtime (crates and tarballs carry fixed ones) on a reused inode looked unchanged and fell out of
    the diff."""
    (tree / ".git" / "index").unlink()
    _git(tree, "add", "-A", "-f")


def _apply(tree: Path, patch_file: Path) -> None:
    done = subprocess.run(
        ["patch", "-p1", "--force", "--no-backup-if-mismatch", "-i", str(patch_file)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise AuthoringError(f"debian/patches/{patch_file.name} does not apply: {done.stdout.strip()[-300:]}")


def fix_diff(tree: Path, fix: Sequence[str]) -> tuple[str, int]:
    """Apply the series up to `fix` (its entries, consecutive), then `fix`, and return git's diff of what
    `fix` changed (clean a/ b/ paths, whatever form the Debian patch had) and its first entry's 1-based
    place in the series."""
    series = read_series(tree)
    position = series.index(fix[0]) + 1
    patches = tree / "debian" / "patches"
    for name in series[: position - 1]:
        _apply(tree, patches / name)
    # The packaging and quilt's state are not the project's: git sees the tree as the agent will.
    work = tree.parent / "split"
    shutil.copytree(tree, work, symlinks=True, ignore=shutil.ignore_patterns("debian", ".pc", ".git"))
    _git(work, "init", "-q")
    _git(work, "add", "-A", "-f")
    _git(work, "commit", "-q", "-m", "vulnerable")
    for part in fix:
        _apply(work, patches / part)
    _restage(work)
    return _git(work, "diff", "--cached", "--binary", "HEAD"), position


def fix_diff_reversed(tree: Path, fix: Sequence[str]) -> tuple[str, int]:
    """As fix_diff, for a tree that already has the whole series applied: reverse `fix` (its last entry
    first) to get the vulnerable tree, and diff it against the fixed one."""
    series = read_series(tree)
    position = series.index(fix[0]) + 1
    patches = tree / "debian" / "patches"
    vulnerable = tree.parent / "split"
    shutil.copytree(tree, vulnerable, symlinks=True, ignore=shutil.ignore_patterns("debian", ".pc", ".git"))
    for part in reversed(fix):
        done = subprocess.run(
            ["patch", "-R", "-p1", "--force", "--no-backup-if-mismatch", "-i", str(patches / part)],
            cwd=vulnerable,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise AuthoringError(
                f"debian/patches/{part} does not reverse out of the packaged tree: {done.stdout.strip()[-300:]}"
            )
    _git(vulnerable, "init", "-q")
    _git(vulnerable, "add", "-A", "-f")
    _git(vulnerable, "commit", "-q", "-m", "vulnerable")
    for child in vulnerable.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.copytree(tree, vulnerable, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns("debian", ".pc"))
    _restage(vulnerable)
    return _git(vulnerable, "diff", "--cached", "--binary", "HEAD"), position


def split_diff(diff: str, language: str) -> tuple[str, str]:
    """(code, tests): the per-file sections of a git diff whose paths are the language's tests, test data,
    harnesses or build logic (`ssebench.runtime.contract.PROTECTED`) go to the tests, the rest to the
    code change."""
    code: list[str] = []
    tests: list[str] = []
    for section in re.split(r"(?m)^(?=diff --git )", diff):
        if not section.strip():
            continue
        match = re.match(r"diff --git a/(\S+) b/(\S+)", section)
        path = match.group(2) if match else ""
        (tests if path and is_protected(language, path) else code).append(section)
    return "".join(code), "".join(tests)


def guess_language(pkg: SourcePackage) -> str:
    deps = set(pkg.build_depends)
    if "dh-golang" in deps or pkg.go_import_path or pkg.name.startswith("golang-"):
        return "go"
    if "dh-cargo" in deps or pkg.name.startswith("rust-"):
        return "rust"
    return "c"


def default_id(project: str, advisory: str | None, patch: str) -> str:
    tag = advisory or re.sub(r"\.(patch|diff)$", "", patch)
    return re.sub(r"[^A-Za-z0-9.-]+", "-", f"{project}-{tag}").strip("-.")[:128]


def _project_name(pkg: SourcePackage) -> str:
    if re.match(r"golang-\d", pkg.name):
        return "go"  # the toolchain's own packages (golang-1.15): the project is Go itself
    if pkg.go_import_path:
        return pkg.go_import_path.rstrip("/").split("/")[-1]
    return re.sub(r"^(golang-(github-[^-]+-)?|rust-)", "", pkg.name)


@dataclass
class Scaffold:
    """What `task new` wrote, and what it leaves to the author."""

    task_dir: Path
    files: list[Path] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)


_HEADER = """ARG SSEBENCH_REGISTRY=ghcr.io/42-b3yond-6ug/ssebench
FROM ${{SSEBENCH_REGISTRY}}/base-generic-{language}:1.0.0
"""

_COPY = """COPY sse/config.yaml /ssebench/config.yaml
COPY sse/build.sh /ssebench/scripts/build.sh
COPY sse/run.sh /ssebench/scripts/run.sh
COPY sse/test.sh /ssebench/scripts/test.sh
COPY sse/harness /ssebench/harness
COPY sse/diffs /ssebench/diffs
COPY sse/pocs /ssebench/pocs
COPY sse/reports /ssebench/reports
WORKDIR {source}
"""


def _unpack_line(tarball: Tarball) -> str:
    into = f"tree/{tarball.folder}" if tarball.folder else "tree"
    strip = f" --strip-components={tarball.strip}" if tarball.strip else ""
    make = f"mkdir -p {into}; " if tarball.folder else ""
    clear = "rm -rf tree/debian; " if ".debian.tar." in tarball.filename else ""
    return f"    {make}{clear}tar -xf {tarball.filename} -C {into}{strip}; \\\n"


def dockerfile(
    pkg: SourcePackage, language: str, position: int, source: str, libraries: list[str], tarballs: list[Tarball]
) -> str:
    """The pilot's pattern: the pinned source package, its series applied up to (not including) entry
    `position`, the packaging deleted. The tarballs are fetched by URL from the pools that served them to
    `task new` (a security upload's upstream tarball is in the main archive's) and checked against the
    Sources index's SHA-256 by apt-helper, without the .dsc, which the mirror does not always keep. The
    RUN line gives the fix's place in the series, not its name, so that the image's history does not name
    it."""
    install = " ".join(["xz-utils", "bzip2", "patch", *libraries])
    where = f"{pkg.suite} (the security archive)" if "security" in pkg.suite else pkg.suite
    lines = [
        _HEADER.format(language=language),
        f"# {pkg.name} {pkg.version} from Debian {where}, with its patch series applied up to, but not\n",
        f"# including, entry {position} (the security fix: sse/diffs/patch.diff plus sse/diffs/test.diff).\n",
        "# Written by `ssebench task new`; TODO: check the libraries below and add what the harness needs.\n",
        "RUN set -eux; \\\n",
        "    apt-get update; \\\n",
        f"    apt-get install -y --no-install-recommends {install}; \\\n",
        "    mkdir -p /tmp/pkg/tree; cd /tmp/pkg; \\\n",
        *(
            f"    /usr/lib/apt/apt-helper download-file {t.url.replace('https://', 'http://')} {t.filename} SHA256:{t.sha256}; \\\n"
            for t in tarballs
        ),
        *(_unpack_line(t) for t in tarballs),
        "    cd tree; \\\n",
        f"    NFIX={position}; \\\n",
        "    sed -e 's/#.*//' debian/patches/series | awk 'NF { print $1 }' | head -n \"$((NFIX - 1))\" \\\n",
        '      | while read -r p; do patch -p1 --force --no-backup-if-mismatch < "debian/patches/$p"; done; \\\n',
        "    rm -rf debian .pc; \\\n",
        f"    mkdir -p {PurePosixPath(source).parent}; mv /tmp/pkg/tree {source}; cd /; rm -rf /tmp/pkg; \\\n",
        "    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log\n",
        _COPY.format(source=source),
    ]
    return "".join(lines)


def dockerfile_binary(pkg: SourcePackage, binary: str, inside: str, source: str, language: str) -> str:
    """The pilot's pattern where the mirror no longer has the upstream tarball: the fixed source from the
    -dev package, the package purged, and the fix (code and tests) reversed."""
    deb_line = ""
    if pkg.suite not in ("bookworm", "bookworm-updates", "bookworm-security"):
        deb_line = (
            f"    printf '%s\\n' 'Types: deb' 'URIs: {pkg.archive.replace('https://', 'http://')}' 'Suites: {pkg.suite}' \\\n"
            "        'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \\\n"
            "        > /etc/apt/sources.list.d/ssebench-suite.sources; \\\n"
        )
    return "".join(
        [
            _HEADER.format(language=language),
            f"# {pkg.name} {pkg.version} as Debian {pkg.suite} ships it in {binary}, with the security fix\n",
            "# (sse/diffs/patch.diff and sse/diffs/test.diff) reversed. The mirror no longer has the upstream\n",
            "# tarball, so the source is taken from the binary package, which is then purged; its dependencies\n",
            "# stay in /usr/share/gocode. Written by `ssebench task new`.\n",
            "COPY sse/diffs/patch.diff /tmp/fix.diff\n",
            "COPY sse/diffs/test.diff /tmp/fixtest.diff\n",
            "RUN set -eux; \\\n",
            f"    pkg={binary}; ver={pkg.version}; \\\n",
            deb_line,
            "    apt-get update; \\\n",
            '    apt-get install -y --no-install-recommends "$pkg=$ver" patch \\\n',
            '      || { echo "cannot install $pkg=$ver from the Debian mirror" >&2; exit 1; }; \\\n',
            f"    mkdir -p {PurePosixPath(source).parent}; cp -a {inside} {source}; \\\n",
            '    apt-get purge -y "$pkg"; \\\n',
            f"    rm -rf {inside} /usr/share/doc/$pkg; \\\n",
            f"    cd {source}; \\\n",
            "    patch -R -p1 < /tmp/fix.diff; \\\n",
            "    if [ -s /tmp/fixtest.diff ]; then patch -R -p1 < /tmp/fixtest.diff; fi; \\\n",
            "    rm -f /tmp/fix.diff /tmp/fixtest.diff /etc/apt/sources.list.d/ssebench-suite.sources; rm -rf debian .pc; \\\n",
            "    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log\n",
            _COPY.format(source=source),
        ]
    )


def scripts(language: str, import_path: str) -> dict[str, str]:
    """Skeletons of build.sh, run.sh and test.sh for the language."""
    if language == "go":
        gopath = (
            "src=$PWD\n"
            'gp=${TMPDIR:-/tmp}/ssebench-gopath-$(printf %s "$src" | md5sum | cut -c1-12)\n'
            f'mkdir -p "$gp/src/{PurePosixPath(import_path).parent}"\n'
            f'ln -sfn "$src" "$gp/src/{import_path}"\n'
            'export GO111MODULE=off GOPATH="$gp:/usr/share/gocode"\n'
            f'cd "$gp/src/{import_path}"\n'
        )
        build = (
            "#!/bin/bash\n"
            f"# Build {import_path} in GOPATH mode (the tree linked into a private GOPATH; dependencies\n"
            "# from Debian's golang-*-dev packages in /usr/share/gocode), then the PoC driver.\n"
            "set -euo pipefail\n" + gopath + "go build ./...\n"
            "# TODO: build the PoC driver from /ssebench/harness (copy it into a hidden folder of the tree,\n"
            '# e.g. .ssebench-check, and `go build -o "$src/check" ./.ssebench-check`).\n'
        )
        test = (
            "#!/bin/bash\n# Build, then run the project's own tests (GOPATH mode, see build.sh).\n"
            "set -euo pipefail\n/ssebench/scripts/build.sh\n" + gopath + "go test -count=1 ./...\n"
        )
    elif language == "rust":
        build = (
            "#!/bin/bash\n# Build the crate offline against Debian's crate registry.\nset -euo pipefail\n"
            "cargo build --offline\n# TODO: build the PoC driver from /ssebench/harness.\n"
        )
        test = "#!/bin/bash\nset -euo pipefail\n/ssebench/scripts/build.sh\ncargo test --offline\n"
    else:
        build = (
            "#!/bin/bash\n# Build with the sanitizer that reports the bug: write its flags out (the base image sets no\n"
            "# CFLAGS), e.g. CFLAGS='-fsanitize=address -g -O1 -fno-omit-frame-pointer'.\n"
            "# pipefail: a pipe whose reader stops early fails the build (`yes | make oldconfig` exits 141,\n"
            "# SIGPIPE); write `{ yes || true; } | ...` there.\n"
            "set -euo pipefail\n# TODO: configure and make; build the PoC driver from /ssebench/harness.\n"
        )
        test = "#!/bin/bash\nset -euo pipefail\n/ssebench/scripts/build.sh\n# TODO: run the project's tests.\n"
    run = (
        "#!/bin/bash\n"
        "# run.sh POC: exit 0 when the PoC no longer triggers the bug, non-zero while it does.\n"
        "set -uo pipefail\n"
        "poc=${1:?usage: run.sh POC_FILE}\n"
        'echo "TODO: run the PoC driver on $poc" >&2\n'
        "exit 1\n"
    )
    return {"build.sh": build, "run.sh": run, "test.sh": test}


def config(
    task_id: str, project: str, repository: str, language: str, source: str, references: list[str]
) -> dict[str, object]:
    return {
        "id": task_id,
        "project": project,
        "repository": repository,
        "language": language,
        "source": source,
        "task_description": {
            "crash_report": ["reports/issue.md"],
            "bug_description": "TODO: what goes wrong, in our own words (no advisory id, no patch name).",
            "issue": "none",
        },
        "scripts": {"build": "scripts/build.sh", "run": "scripts/run.sh", "test": "scripts/test.sh"},
        "files": {"patch": "diffs/patch.diff", "poc": ["pocs/TODO"], "future_test": "diffs/test.diff"},
        "sanitizer": "none" if language != "c" else "address",
        "type": "TODO",
        "reference": references,
        "originality": "public",
    }


def _write(scaffold: Scaffold, relative: str, text: str, mode: int = 0o644) -> None:
    path = scaffold.task_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    scaffold.files.append(path)


def _check_config(data: dict[str, object]) -> None:
    from pydantic import ValidationError

    from ssebench.task import TaskConfig

    try:
        TaskConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise AuthoringError(f"config.yaml would be invalid: {where}: {first['msg']}") from None


def _target(dataset_dir: Path, task_id: str) -> Path:
    if not dataset_dir.is_dir():
        raise AuthoringError(f"{dataset_dir}: no such dataset folder; give an existing folder (with dataset.yaml)")
    task_dir = dataset_dir / task_id
    if task_dir.exists():
        raise AuthoringError(f"{task_dir} exists; give another --id or remove it")
    return task_dir


def _finish(scaffold: Scaffold, data: dict[str, object], code: str, tests: str, script_text: dict[str, str]) -> None:
    _check_config(data)
    _write(scaffold, "sse/config.yaml", yaml.safe_dump(data, sort_keys=False, width=1000))
    _write(scaffold, "sse/diffs/patch.diff", code)
    _write(scaffold, "sse/diffs/test.diff", tests)
    for name, text in script_text.items():
        _write(scaffold, f"sse/{name}", text, 0o755)
    _write(
        scaffold,
        "sse/reports/issue.md",
        "# TODO: the bug report the agent reads\n\nWhat the user sees, in our own words: no advisory id, no patch name.\n",
    )
    for folder in ("harness", "pocs"):
        _write(scaffold, f"sse/{folder}/.gitkeep", "")
    scaffold.todo += [
        "write a PoC in sse/pocs/ and name it in config.yaml's files.poc (and a variant in files.variants if cheap)",
        "write the harness (sse/harness/) and finish build.sh / run.sh / test.sh",
        "write reports/issue.md and config.yaml's bug_description and type",
        f"pin: ssebench dataset pin {scaffold.task_dir.parent} --keep-version (again after each edit: images"
        " build and verify refuse a task that differs from its pin)",
        f"check: ssebench dataset verify {scaffold.task_dir}",
    ]
    if not code.strip():
        scaffold.todo.insert(0, "the fix changes no code file: check sse/diffs/patch.diff")
    if not tests.strip():
        scaffold.todo.insert(0, "the fix ships no tests: write the hidden tests as sse/diffs/test.diff")


def new_from_debian(
    dataset_dir: Path,
    name: str,
    version: str,
    *,
    patch: str | Sequence[str] | None = None,
    advisory: str | None = None,
    task_id: str | None = None,
    language: str | None = None,
    fetch: Fetch = fetch_url,
    suites: Iterable[tuple[str, str]] | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> Scaffold:
    """Scaffold a task from Debian source package `name`=`version` whose debian/patches entry `patch`
    (or consecutive entries, for a fix in parts; or the one naming `advisory`) is the fix."""
    patches = [patch] if isinstance(patch, str) else list(patch or [])
    pkg = find_source(name, version, fetch, suites, say)
    with tempfile.TemporaryDirectory(prefix="ssebench-task-new-") as tmp:
        work = Path(tmp)
        language = language or guess_language(pkg)
        binary = inside = ""
        try:
            tree, tarballs = unpack_source(pkg, work / "source", fetch)
        except NotOnMirror:
            say("the mirror no longer has the upstream tarball: taking the source from a binary package")
            tree, binary, inside = unpack_binary(pkg, work, patches, advisory, fetch)
            say(f"the source is {inside} in {binary}")
        fix = pick_patch(tree, patches, advisory)
        say(f"the fix is {', '.join(f'debian/patches/{part}' for part in fix)}")
        named = [advisory] if advisory else advisories_named(tree, fix)
        if not advisory and named:
            say(f"the patch names {', '.join(named)}")
        diff, position = fix_diff_reversed(tree, fix) if binary else fix_diff(tree, fix)
    project = _project_name(pkg)
    task_id = task_id or default_id(project, named[0] if named else None, fix[0])
    task_dir = _target(dataset_dir, task_id)
    code, tests = split_diff(diff, language)
    source = f"/src/{re.sub(r'[^A-Za-z0-9._-]+', '-', project)}"
    libraries = [d for d in pkg.build_depends if d.endswith("-dev") and not _TOOLING.match(d)]
    repository = (
        f"https://{pkg.go_import_path}"
        if pkg.go_import_path.startswith("github.com/")
        else (pkg.homepage if pkg.homepage.startswith("https://") else "https://TODO")
    )
    references = [f"https://nvd.nist.gov/vuln/detail/{a}" for a in named if a.startswith("CVE-")]
    references += [f"https://security-tracker.debian.org/tracker/{a}" for a in named]
    scaffold = Scaffold(task_dir)
    if not advisory and len(named) > 1:
        scaffold.todo.append(
            f"the patch names {', '.join(named)}: the id and references took them all in that order; keep the"
            " advisory this fix is for (give --advisory to choose)"
        )
    data = config(task_id, project, repository, language, source, references)
    if repository == "https://TODO":
        scaffold.todo.append("config.yaml's repository: the upstream project's https:// URL")
    _finish(scaffold, data, code, tests, scripts(language, pkg.go_import_path or f"example.org/{project}"))
    if binary:
        _write(scaffold, "Dockerfile", dockerfile_binary(pkg, binary, inside, source, language))
    else:
        _write(scaffold, "Dockerfile", dockerfile(pkg, language, position, source, libraries, tarballs))
    return scaffold


def new_from_crate(
    dataset_dir: Path,
    crate: str,
    vulnerable: str,
    fixed: str,
    *,
    advisory: str | None = None,
    task_id: str | None = None,
    fetch: Fetch = fetch_url,
    say: Callable[[str], None] = lambda _m: None,
) -> Scaffold:
    """Scaffold a Rust task from two published versions of `crate`: the diff between them, split into
    code and tests. The diff is all that changed between the versions, not only the fix: the author cuts
    it down to the fix. The Dockerfile is left to the author (containers reach only Debian's mirror, so
    the vulnerable crate comes from a librust-*-dev package or the task's files)."""
    with tempfile.TemporaryDirectory(prefix="ssebench-task-new-") as tmp:
        work = Path(tmp)
        trees = []
        for version in (vulnerable, fixed):
            url = f"{CRATES}/{crate}/{crate}-{version}.crate"
            path = work / f"{crate}-{version}.crate"
            path.write_bytes(fetch(url))
            say(f"fetched {url}")
            dest = work / version
            dest.mkdir()
            try:
                _safe_extract(path, dest, strip=True)
            except tarfile.TarError:
                raise AuthoringError(f"{url}: not a crate archive") from None
            # Cargo's normalised manifest and VCS info differ between any two versions and are not the fix.
            for noise in (".cargo_vcs_info.json", "Cargo.toml.orig", "Cargo.lock"):
                (dest / noise).unlink(missing_ok=True)
            trees.append(dest)
        _git(trees[0], "init", "-q")
        _git(trees[0], "add", "-A", "-f")
        _git(trees[0], "commit", "-q", "-m", "vulnerable")
        for child in trees[0].iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        shutil.copytree(trees[1], trees[0], dirs_exist_ok=True)
        _restage(trees[0])
        diff = _git(trees[0], "diff", "--cached", "--binary", "HEAD")
    task_id = task_id or default_id(crate, advisory, f"{vulnerable}-{fixed}")
    task_dir = _target(dataset_dir, task_id)
    code, tests = split_diff(diff, "rust")
    references = (
        [f"https://rustsec.org/advisories/{advisory}.html"] if advisory and advisory.startswith("RUSTSEC") else []
    )
    references.append(f"https://crates.io/crates/{crate}/{fixed}")
    scaffold = Scaffold(task_dir)
    data = config(task_id, crate, f"https://crates.io/crates/{crate}", "rust", f"/src/{crate}", references)
    _finish(scaffold, data, code, tests, scripts("rust", ""))
    _write(
        scaffold,
        "Dockerfile",
        _HEADER.format(language="rust") + f"# {crate} {vulnerable} (vulnerable; fixed in {fixed}).\n"
        "# TODO: put the vulnerable crate's source in the tree: from Debian's librust-*-dev package (reverse\n"
        "# sse/diffs/patch.diff) when Debian ships a version, as the pilot's Rust tasks do; the containers\n"
        "# reach only Debian's mirror, not crates.io.\n" + _COPY.format(source=f"/src/{crate}"),
    )
    scaffold.todo.insert(0, "the diff is everything between the two versions: cut patch.diff down to the fix")
    scaffold.todo.insert(1, "the Dockerfile: where the vulnerable crate comes from (see its TODO)")
    return scaffold
