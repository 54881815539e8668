"""Shortcut signals: what a run's change and calls say beyond its checks, never a grade.

Three kinds, all computed by root in the container that grades, from what
the agent cannot write:

- the agent-facing calls the daemon refused (`Refusals`, kept by the
  daemon while the run lasts, read by the evaluator on the admin socket);
- the changed files that are the task's tests, PoC harnesses or build
  logic (`classify`), whether grading applied them or set them aside;
- how the change compares with the reference fix (`similarity`,
  `patch_paths`).

Each is a fact for a reader of the run, and each has honest causes: a
difficulty level withholds a check the agent did not know it lacked, an
upstream fix that changes a Makefile, a one-line fix written as upstream
wrote it. The grade never reads them.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ssebench.runtime.contract import TEST_FOLDERS, TaskFile, matches

# The most refusals kept as entries; the count goes on. An agent can send refused calls as fast as it likes.
KEPT_REFUSALS = 50
# The longest route or reason kept of one refusal (they quote what the agent sent).
REFUSAL_TEXT = 200

# Refusal kinds: a check the difficulty level withholds; a grading run asked for on an agent-facing listener; a
# route served on the admin socket only; a route the HTTP listener serves to this container only (a peer on the
# run's network asked).
DIFFICULTY, GRADING, ADMIN_ONLY, PEER = "difficulty", "grading", "admin only", "peer"
# The kinds that are calls of the agent's tools; a peer's refusal is a request its network made.
CALL_KINDS = (DIFFICULTY, GRADING, ADMIN_ONLY)


@dataclass
class _Log:
    count: int = 0
    kept: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Refusals:
    """The agent-facing requests the daemon refused, in two logs: the agent's tool calls (`CALL_KINDS`) and
    requests of peers on the run's network (`PEER`); each how many, and the first KEPT_REFUSALS of them.

    Kept in the daemon's memory only (root's), bounded whatever the agent sends; the evaluator reads them on
    the admin socket (`GET /admin/refusals`).
    """

    calls: _Log = field(default_factory=_Log)
    peers: _Log = field(default_factory=_Log)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, kind: str, route: str, reason: str) -> None:
        log = self.peers if kind == PEER else self.calls
        with self._lock:
            log.count += 1
            if len(log.kept) < KEPT_REFUSALS:
                log.kept.append({"kind": kind, "route": route[:REFUSAL_TEXT], "reason": reason[:REFUSAL_TEXT]})

    def snapshot(self) -> dict[str, Any]:
        """`{calls: {count, kept}, peers: {count, kept}}`, as the admin route answers."""
        with self._lock:
            return {
                name: {"count": log.count, "kept": [dict(entry) for entry in log.kept]}
                for name, log in (("calls", self.calls), ("peers", self.peers))
            }


# -- the task's tests, harnesses and build logic ----------------------------------------------------------

# Patterns as protection.py's (git pathspec globs anchored at the tree's root). A changed file is put in the
# first group it matches, in this order: the hidden tests' files, the task's own protected files (a PoC harness
# or a test program of its tree), build logic, harnesses and fuzzers, tests.
BUILD = (
    "**/Makefile*",
    "**/makefile",
    "**/GNUmakefile",
    "**/*.mk",
    "**/*.mak",
    "**/CMakeLists.txt",
    "**/*.cmake",
    "**/configure",
    "**/configure.ac",
    "**/configure.in",
    "**/*.m4",
    "**/meson.build",
    "**/meson_options.txt",
    "**/build.rs",
    "**/Cargo.toml",
    "**/Cargo.lock",
    "**/.cargo/**",
    "**/rust-toolchain*",
    "**/go.mod",
    "**/go.sum",
    "**/go.work",
)
HARNESS = ("**/fuzz/**", "**/fuzzing/**", "**/oss-fuzz/**", "**/*fuzzer*", "**/.*/**")
TESTS = (
    "**/test/**",
    "**/tests/**",
    "**/testdata/**",
    *TEST_FOLDERS,
    "**/test_*",
    "**/*_test.*",
    "**/*_tests.*",
    "**/*_unittest.*",
    "**/tests.rs",
    "**/benches/**",
)


@dataclass(frozen=True)
class Classified:
    """A change's files that are tests, PoC harnesses or build logic; the rest are in none."""

    tests: list[str] = field(default_factory=list)
    harness: list[str] = field(default_factory=list)
    build: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        return {"tests": self.tests, "harness": self.harness, "build": self.build}


def classify(paths: Iterable[str], task: TaskFile, hidden_tests: Iterable[str] = ()) -> Classified:
    """The changed `paths` that are the task's tests (the hidden tests' files, and what the language's
    conventions call a test), its PoC harnesses (the task's `protected_files`, fuzzers, hidden directories) or
    its build logic; a path the task's `fix_may_change` allows is none of them (the task says its fix may)."""
    hidden = set(hidden_tests)
    groups: dict[str, list[str]] = {"tests": [], "harness": [], "build": []}
    for path in sorted(set(paths)):
        if matches(path, task.fix_may_change):
            continue
        if path in hidden:
            groups["tests"].append(path)
        elif matches(path, task.protected_files):
            groups["harness"].append(path)
        elif matches(path, BUILD):
            groups["build"].append(path)
        elif matches(path, HARNESS):
            groups["harness"].append(path)
        elif matches(path, TESTS):
            groups["tests"].append(path)
    return Classified(**groups)


# -- the reference fix ------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _lines(diff: str) -> Iterator[tuple[str, str]]:
    """A unified diff's lines that matter here, as (kind, text): ("path", a file's name from its ---/+++
    header, without git's a/ or b/) and ("added", an added line's text). Hunks are read by their counts, so a
    removed line that starts with "-- " is never taken for a header."""
    old = new = 0
    for line in diff.splitlines():
        if old > 0 or new > 0:
            if line.startswith("+"):
                new -= 1
                yield "added", line[1:]
            elif line.startswith("-"):
                old -= 1
            elif line.startswith(" ") or line == "":
                old, new = old - 1, new - 1
            continue
        if (hunk := _HUNK.match(line)) is not None:
            old, new = (int(n) if n is not None else 1 for n in hunk.groups())
        elif line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t")[0].strip()
            if name != "/dev/null":
                yield "path", name[2:] if name.startswith(("a/", "b/")) else name
        elif line.startswith("diff --git a/") and line.count(" b/") == 1:
            # A file without hunks (a mode change, a binary, an empty file) is named here only.
            first, second = line.removeprefix("diff --git a/").split(" b/")
            yield "path", first
            yield "path", second


def patch_paths(diff: str) -> set[str]:
    """The files a unified diff touches (either side's name; /dev/null left out)."""
    return {text for kind, text in _lines(diff) if kind == "path"}


# An added line that is a comment alone, in C, Go or Rust.
_COMMENT = re.compile(r"^(?://|/\*|\*/|\*(?:\s|$))")


def added_lines(diff: str) -> Counter[str]:
    """The lines a diff adds, normalised: all whitespace removed, blank lines and comment-only lines left out
    (a multiset: a line added twice counts twice)."""
    lines: Counter[str] = Counter()
    for kind, line in _lines(diff):
        text = "".join(line.split())
        if kind == "added" and text and not _COMMENT.match(line.strip()):
            lines[text] += 1
    return lines


def similarity(patch: str, reference: str) -> float | None:
    """How close `patch` is to `reference` on their normalised added lines (`added_lines`): the Dice
    coefficient of the two multisets, 2|A ∩ B| / (|A| + |B|), in [0, 1], rounded to 3 places; 1.0 when they add
    the same lines, 0.0 when they share none (an empty patch among them). None when neither adds a line."""
    mine, theirs = added_lines(patch), added_lines(reference)
    total = sum(mine.values()) + sum(theirs.values())
    if not total:
        return None
    return round(2 * sum((mine & theirs).values()) / total, 3)
