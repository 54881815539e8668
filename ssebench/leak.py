"""The leak scan: what the agent (uid 1000) can read in a task's tool image that gives the task away.

Two kinds of thing must stay out of its reach:

- **names of the fix**: the task's advisory ids and the Debian patch file
  names its Dockerfile uses (a readable changelog or patch series naming
  them points at the fix);
- **the answer itself**: a hunk of the reference fix (`files.patch`), the
  hidden tests (`files.future_test`), a proof of concept's or a hidden
  variant's bytes (`files.poc`, `files.variants`).

The answer is searched for as fixed strings, one pass of `grep` over every
file the agent can read (and, decompressed, every `.gz`, `.xz` and `.bz2`,
and every git history), so a scan costs about what reading the image once
costs. What is searched for, and why:

- From each hunk of a diff, its added lines of code (comments are licence
  text and prose that other files hold word for word), whitespace-normalised:
  indentation dropped, and of a line that aligns with runs of spaces or
  tabs, its longest part between them (so re-indenting or re-aligning a copy
  does not hide it). Parts shorter than `MIN_LINE` characters (`}`,
  `return err;`) are too common to mean anything and are not searched for.
- From a PoC or variant, its longest runs of bytes between line breaks and
  NULs, cut to `WINDOW` bytes, when at least `MIN_WINDOW` long with
  `MIN_DISTINCT` different bytes, not a run or a ramp of bytes (`AAAA…`,
  `((((…` and `\x0e\x0f\x10…` say nothing; compilers hold such tables) and
  from a line that is not one word of at most `MAX_WORD` characters
  (`crlDistributionPoints` is a name of the format the program reads, which
  its headers, libraries and symbol files name too) or a web URL of one name
  (`http://localhost`, in Python's, Perl's and Go's own sources); and the
  whole file, by size and SHA-256, which finds an exact copy of a PoC of a
  few bytes or of nothing but common text, where no window could.
- From a file a diff adds or changes as a `GIT binary patch` (test data
  given whole, `literal`), its bytes, searched for as an input's are.
- A searched line that the vulnerable tree (the task's `source`, as the
  agent reads it) already holds is not a leak: the tree is the task. Such
  lines are dropped after the pass. A git history inside the tree is not the
  tree: it can hold later, fixed code, and what it holds exempts nothing.

A file *holds* a hunk, test hunk or input when it holds `HOLD` of its
searched lines (all of them, when it has fewer): one common line in an
unrelated file is not a copy of a hunk, three are. `/ssebench` in the tool
image holds all of these, root-only; a hit there means that protection
failed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import re
import shlex
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from ssebench.engine import containers
from ssebench.reaper import Session
from ssebench.runtime.contract import SESSION_LABEL
from ssebench.task import Task, task_file

# A normalised line of a diff shorter than this is too common to search for.
MIN_LINE = 20
# A window of a PoC's bytes: at least this long, at most WINDOW, with this many different bytes.
MIN_WINDOW = 16
WINDOW = 64
MIN_DISTINCT = 6
# A file holds a piece when it holds this many of its searched strings (all, when it has fewer).
HOLD = 3
# The most strings searched for of one piece (the longest): a test file of a thousand lines needs no more.
PER_PIECE = 12
# Whole files matched by SHA-256 from this size up: below it, an equal file elsewhere says nothing.
MIN_FILE = 8
# The most bytes of terms one container is given (its script is one argument, which Linux caps at 128 KiB):
# pieces beyond it are searched in another pass.
BATCH_BYTES = 60_000

Kind = Literal["name", "fix", "test", "poc", "variant"]


@dataclass(frozen=True)
class Piece:
    """One thing the agent must not read, and how it is searched for."""

    kind: Kind
    where: str  # for people: "diffs/patch.diff hunk 2 (src/cue.y)", "pocs/crash.bin", "CVE-2023-43641"
    terms: tuple[bytes, ...]  # fixed strings, matched ignoring ASCII case
    sha256: str | None = None  # of the whole file (PoCs and variants)
    size: int | None = None

    @property
    def need(self) -> int:
        """How many of its terms one file must hold to hold the piece."""
        return 1 if self.kind == "name" else min(HOLD, len(self.terms))


@dataclass(frozen=True)
class Hit:
    path: str  # in the image; "(compressed)" or "(history)" after it when found there
    piece: Piece

    def __str__(self) -> str:
        return f"{self.path}: {self.piece.kind} {self.piece.where}"


# Debian patch files a task's Dockerfile names: the fix's own file, which the agent must not see named.
_PATCH_NAME = re.compile(r"(?:debian/patches/|STOP_AT=)([\w.+-]+\.(?:patch|diff))")
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_ALIGNMENT = re.compile(rb"\t|  +")
_BREAKS = re.compile(rb"[\r\n\x00]")
# A comment's line: `/* …`, ` * …` or ` */` (not `*ptr = 0;`), `// …` (Go, Rust, C), `# …` (not `#include`).
_COMMENT = re.compile(rb"/\*|\*(?:\s|/|$)|//|#(?:\s|!|$)")
# A line that is one word: a name of the input's format (a field, keyword or symbol), not the input; or a web
# URL of one name (`http://localhost`), which the protocols' own libraries and tests spell out as often. The
# whole line, and a short one: a long line cut to its window, or a long token, is the input's own.
_WORD = re.compile(rb"(?:https?://)?[A-Za-z_][A-Za-z0-9_]*")
MAX_WORD = 40


def leak_terms(task: Task) -> list[str]:
    """What no agent-visible file may name: the task's advisory ids and the fix's Debian patch file names."""
    dockerfile = (task.path / "Dockerfile").read_text(encoding="utf-8", errors="replace")
    names = [name for name in _PATCH_NAME.findall(dockerfile) if name != "series"]
    return list(dict.fromkeys([*task.advisories(), *names]))


def normalised(line: bytes) -> bytes:
    """A line of code as searched for: its longest part between indentation, alignment and line end."""
    parts = _ALIGNMENT.split(line.strip())
    return max(parts, key=len).strip() if parts else b""


def diff_hunks(diff: bytes) -> list[tuple[str, list[bytes]]]:
    """(file, added lines) of each hunk of a unified diff, in order; the lines without their `+`."""
    hunks: list[tuple[str, list[bytes]]] = []
    name = "?"
    for line in diff.splitlines():
        if line.startswith(b"+++ "):
            target = line[4:].split(b"\t", 1)[0].decode("utf-8", "replace")
            name = target[2:] if target.startswith(("a/", "b/")) else target
        elif _HUNK.match(line):
            hunks.append((name, []))
        elif hunks and line.startswith(b"+"):
            hunks[-1][1].append(line[1:])
    return [(file, added) for file, added in hunks if added]


def binary_files(diff: bytes) -> list[tuple[str, bytes]]:
    """(file, new content) of each `GIT binary patch` of a diff that gives the file whole (`literal`); a
    `delta`, which needs the old file, and a patch that does not decode are left out."""
    found: list[tuple[str, bytes]] = []
    name = "?"
    lines = diff.split(b"\n")
    for number, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            name = line.rsplit(b" b/", 1)[-1].decode("utf-8", "replace")
        elif line == b"GIT binary patch" and number + 1 < len(lines) and lines[number + 1].startswith(b"literal "):
            packed = bytearray()
            try:
                for encoded in itertools.takewhile(bool, lines[number + 2 :]):
                    # Each line: its decoded length (A-Z: 1-26, a-z: 27-52), then base85 in groups of five.
                    length = encoded[0] - ord("A") + 1 if encoded[0] <= ord("Z") else encoded[0] - ord("a") + 27
                    packed += base64.b85decode(encoded[1:])[:length]
                found.append((name, zlib.decompress(bytes(packed))))
            except (ValueError, binascii.Error, zlib.error):
                continue
    return found


def _longest(terms: Iterable[bytes]) -> tuple[bytes, ...]:
    unique = list(dict.fromkeys(terms))
    kept = sorted(unique, key=len, reverse=True)[:PER_PIECE]
    return tuple(t for t in unique if t in kept)


def is_comment(line: bytes) -> bool:
    """Whether a line is only a comment: licence text and prose, which other files hold word for word."""
    return bool(_COMMENT.match(line.strip()))


def line_terms(lines: Iterable[bytes]) -> tuple[bytes, ...]:
    """The searched lines of a hunk: its code (not its comments), normalised, at least MIN_LINE long; the
    longest PER_PIECE."""
    return _longest(n for n in (normalised(line) for line in lines if not is_comment(line)) if len(n) >= MIN_LINE)


def patterned(window: bytes) -> bool:
    """Whether most of a window's bytes follow from the one before by the same step: a run (`AAAA`, step 0)
    or a ramp (`\x0e\x0f\x10…`, `ABCDEF…`, step 1), which tables in every compiler binary hold too."""
    steps = Counter((b - a) % 256 for a, b in itertools.pairwise(window))
    return bool(steps) and steps.most_common(1)[0][1] * 2 > len(window) - 1


def vocabulary(line: bytes) -> bool:
    """Whether a whole line of an input is one short word or web URL of one name: what the program's own
    headers, libraries and tests name too."""
    return len(line) <= MAX_WORD and _WORD.fullmatch(line) is not None


def distinctive(window: bytes) -> bool:
    """Whether a window of an input can tell a copy of it from other files: long enough, of enough
    different bytes, and not `patterned`."""
    return len(window) >= MIN_WINDOW and len(set(window)) >= MIN_DISTINCT and not patterned(window)


def input_terms(data: bytes) -> tuple[bytes, ...]:
    """The searched windows of a PoC's bytes: runs between line breaks and NULs, stripped, that are not
    `vocabulary`, cut to WINDOW bytes, that are `distinctive`; the longest PER_PIECE."""
    runs = (run.strip() for run in _BREAKS.split(data))
    return _longest(w for w in (run[:WINDOW] for run in runs if not vocabulary(run)) if distinctive(w))


def answer_pieces(task: Task) -> list[Piece]:
    """The task's answer as pieces to search for: each hunk of the fix and of the hidden tests, each PoC
    and variant. A hunk with no line long enough to search for is left out (it has nothing that could
    be told from ordinary code); every input is kept, for its whole-file match."""
    files = task.config.files
    pieces: list[Piece] = []
    diffs: list[tuple[Kind, str | None]] = [("fix", files.patch), ("test", files.future_test)]
    for kind, inside in diffs:
        if inside is None:
            continue
        diff = task_file(task.path, inside).read_bytes()
        for number, (name, added) in enumerate(diff_hunks(diff), 1):
            terms = line_terms(added)
            if terms:
                pieces.append(Piece(kind, f"{inside} hunk {number} ({name})", terms))
        pieces += [input_piece(kind, f"{inside} binary ({name})", data) for name, data in binary_files(diff) if data]
    inputs: list[tuple[Kind, list[str]]] = [("poc", files.poc), ("variant", files.variants)]
    for kind, paths in inputs:
        pieces += [input_piece(kind, inside, task_file(task.path, inside).read_bytes()) for inside in paths]
    return pieces


def input_piece(kind: Kind, where: str, data: bytes) -> Piece:
    """An input (a PoC, a variant, a binary test file), searched for by its windows and by its whole bytes."""
    digest = hashlib.sha256(data).hexdigest() if len(data) >= MIN_FILE else None
    return Piece(kind, where, input_terms(data), sha256=digest, size=len(data))


def name_pieces(terms: list[str]) -> list[Piece]:
    return [Piece("name", term, (term.encode(),)) for term in terms]


# Run as the agent (uid 1000) in the tool image, with no network. $W holds the terms (one a line) and the
# sizes of whole files to hash. Every line out is `TAG PATH\0MATCH` (T: a file, Z: a file decompressed,
# G: a git history) or `H SHA256  PATH`. Top-level links (/bin -> usr/bin) are skipped, not followed, so
# nothing is read twice; /proc, /sys and /dev are left out by name at the top only (a tree's own `sys/`
# folder is searched). A git history is read whoever owns it (safe.directory): git refuses another user's
# repository by default, and the agent can tell it not to.
_SEARCH = r"""
cd /
export LC_ALL=C
for d in /* /.[!.]*; do
  [ -e "$d" ] && [ ! -L "$d" ] || continue
  case "$d" in /proc|/sys|/dev) continue;; esac
  echo "$d"
done > "$W/dirs"
xargs -r -d '\n' grep -rFoaiZ -f "$W/terms" -- < "$W/dirs" 2>/dev/null | sort -u | sed 's/^/T /'
one() { # TAG PATH: what of the terms stdin holds
  grep -oaFi -f "$W/terms" 2>/dev/null | sort -u | while IFS= read -r m; do printf '%s %s\0%s\n' "$1" "$2" "$m"; done
}
xargs -r -d '\n' sh -c 'find "$@" -xdev -type f -readable \( -name "*.gz" -o -name "*.xz" -o -name "*.bz2" \) \
  2>/dev/null' sh < "$W/dirs" | while IFS= read -r f; do
  case "$f" in
    *.gz) gzip -dc -- "$f" ;; *.xz) xz -dc -- "$f" ;; *.bz2) bzip2 -dc -- "$f" ;;
  esac 2>/dev/null | one Z "$f (compressed)"
done
xargs -r -d '\n' sh -c 'find "$@" -xdev -name .git 2>/dev/null' sh < "$W/dirs" | while IFS= read -r g; do
  git -c safe.directory='*' -C "${g%/.git}" log --all -p --format='%H %s%n%b' 2>/dev/null | one G "$g (history)"
done
if [ -s "$W/sizes" ]; then
  xargs -r -d '\n' sh -c 'find "$@" -xdev -type f -readable \( '"$(cat "$W/sizes")"' \) \
    -exec sha256sum {} + 2>/dev/null' sh < "$W/dirs" | sed 's/^/H /'
fi
true
"""


@dataclass(frozen=True)
class ScanOutput:
    """What the search printed: for each path, the terms it holds (lower case); for each path, its SHA-256
    (the files of a PoC's size)."""

    matches: dict[str, set[bytes]]
    hashes: dict[str, str]


def parse(out: bytes, terms: Iterable[bytes]) -> ScanOutput:
    """The search's output, with each match taken back to every term it holds (grep prints only the longest
    of overlapping matches)."""
    known = {t.lower() for t in terms}
    matches: dict[str, set[bytes]] = {}
    hashes: dict[str, str] = {}
    for line in out.split(b"\n"):
        tag, _, rest = line.partition(b" ")
        if tag in (b"T", b"Z", b"G") and b"\0" in rest:
            where, _, match = rest.partition(b"\0")
            matches.setdefault(where.decode("utf-8", "replace"), set()).add(match.lower())
        elif tag == b"H":
            digest, _, where = rest.partition(b"  ")
            hashes[where.decode("utf-8", "replace")] = digest.decode("ascii", "replace")
    for path, found in matches.items():
        matches[path] = {t for t in known if any(t in m for m in found)}
    return ScanOutput(matches, hashes)


# What follows the path of a git folder whose history held a match.
HISTORY = " (history)"


def _inside(path: str, folder: str) -> bool:
    return PurePosixPath(path.split(" (", 1)[0]).is_relative_to(folder)


def judge(output: ScanOutput, pieces: list[Piece], source: str | None, scratch: str) -> list[Hit]:
    """The files that hold a piece. Answer lines the vulnerable tree (`source`) holds are not searched
    for: they are the task, not its answer."""
    in_tree: set[bytes] = set()
    if source is not None:
        for path, found in output.matches.items():
            if _inside(path, source) and not path.endswith(HISTORY):
                in_tree |= found
    hits: list[Hit] = []
    for path, found in sorted(output.matches.items()):
        if _inside(path, scratch):
            continue
        for piece in pieces:
            terms = {t.lower() for t in piece.terms}
            if piece.kind != "name":
                terms -= in_tree
            if terms and len(found & terms) >= min(piece.need, len(terms)):
                hits.append(Hit(path, piece))
    by_hash = {p.sha256: p for p in pieces if p.sha256}
    for path, digest in sorted(output.hashes.items()):
        copied = by_hash.get(digest)
        if copied is not None and not _inside(path, scratch) and Hit(path, copied) not in hits:
            hits.append(Hit(path, copied))
    return hits


_SCRATCH = "/tmp/ssebench-leak-scan"


def searchable(piece: Piece) -> bool:
    """Whether the scan can find the piece at all (a PoC of a byte or two, of nothing but common bytes,
    cannot be told from other files)."""
    return bool(piece.terms or piece.sha256)


def _batches(pieces: list[Piece]) -> Iterable[list[Piece]]:
    batch: list[Piece] = []
    size = 0
    for piece in pieces:
        weight = sum(len(t) + 1 for t in piece.terms)
        if batch and size + weight > BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(piece)
        size += weight
    if batch:
        yield batch


def _search(image: str, pieces: list[Piece], session: Session) -> ScanOutput:
    terms = list(dict.fromkeys(t for p in pieces for t in p.terms))
    sizes = sorted({p.size for p in pieces if p.sha256 and p.size is not None})
    size_test = " -o ".join(f"-size {s}c" for s in sizes)
    encoded = base64.b64encode(b"".join(t + b"\n" for t in terms)).decode()
    script = (
        f"umask 077; W={_SCRATCH}; mkdir -p $W\n"
        f"printf '%s' {shlex.quote(encoded)} | base64 -d > $W/terms\n"
        f"printf '%s' {shlex.quote(size_test)} > $W/sizes\n"
        f"{_SEARCH}"
    )
    out = containers().run(
        image, ["-c", script], entrypoint=["/bin/sh"], user="1000:1000", labels={SESSION_LABEL: session.id}
    )
    return parse(out, terms)


def scan(image: str, pieces: list[Piece], session: Session, source: str | None = None) -> list[Hit]:
    """Every file and git history in `image` that uid 1000 can read and that holds one of `pieces`."""
    hits: list[Hit] = []
    for batch in _batches([p for p in pieces if searchable(p)]):
        hits += judge(_search(image, batch, session), batch, source, _SCRATCH)
    return hits


def visible_mentions(image: str, terms: list[str], session: Session) -> list[str]:
    """The files and git histories in `image` that uid 1000 can read and that name any of `terms`."""
    return sorted({hit.path for hit in scan(image, name_pieces(terms), session)})


def task_leaks(image: str, task: Task, session: Session) -> list[Hit]:
    """What in the task's tool image uid 1000 can read that names the fix or holds its answer."""
    return scan(image, name_pieces(leak_terms(task)) + answer_pieces(task), session, source=task.config.source)
