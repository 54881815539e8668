"""What of the agent's change grading applies: the code under repair, and nothing that decides a check.

Grading runs the task's scripts in the agent's tree, and those scripts go
through files of the tree: a Makefile, a CMakeLists.txt or `configure`,
Cargo's manifest and `.cargo` configuration, a `build.rs`, Go's test files,
the tests themselves, a PoC harness. A change to any of them could make a
crash read as "input rejected" or a failing test as a pass while the bug
stays. So every check runs on the original tree with only the change's
*code* applied: files whose names the task's language counts as source
(`CODE`), minus the paths that hold tests, harnesses or build logic
(`PROTECTED`, plus the task's own `protected_files`), plus what the task
says its fix may change beyond code (`fix_may_change`). Everything else the
agent changed is set aside, and result.json names it
(`signals.protected_files`).

Patterns are git pathspecs with the `glob` magic (as in .gitignore, anchored
at the tree's root: `*` stays within one directory, `**/` matches any
directories, a trailing `/**` everything inside), so git itself selects the
graded change (`ssebench.runtime.capture`), with one meaning everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ssebench.runtime.contract import TaskFile

# Files a fix of the language is made of.
CODE: dict[str, tuple[str, ...]] = {
    "c": (
        "**/*.c",
        "**/*.h",
        "**/*.cc",
        "**/*.cpp",
        "**/*.cxx",
        "**/*.hh",
        "**/*.hpp",
        "**/*.hxx",
        "**/*.inc",
        "**/*.y",
        "**/*.l",
    ),
    "go": ("**/*.go", "**/*.s"),
    "rust": ("**/*.rs",),
}

# Where source files are not the code under repair: tests, fuzzers, test data, examples and build logic,
# dependencies a build takes from the tree, and hidden directories (where the pilot's Go harnesses are
# built, and which `go build ./...` never reads).
_EVERY_LANGUAGE = ("**/.*/**", "**/test/**", "**/tests/**", "**/testdata/**", "**/fuzz/**", "**/fuzzing/**")
PROTECTED: dict[str, tuple[str, ...]] = {
    # (`*.inc` is code, but a Makefile.inc is make's: c-ares's src/lib/Makefile.inc, found by review.)
    "c": (
        *_EVERY_LANGUAGE,
        "**/Makefile*",
        "**/t/**",
        "**/testing/**",
        "**/oss-fuzz/**",
        "**/test_*.c",
        "**/test_*.cc",
        "**/*_test.c",
        "**/*_test.cc",
        "**/*_tests.c",
        "**/*_unittest.c",
        "**/*_unittest.cc",
        "**/*fuzzer*",
    ),
    "go": (*_EVERY_LANGUAGE, "**/*_test.go", "**/vendor/**"),
    "rust": (*_EVERY_LANGUAGE, "**/build.rs", "**/tests.rs", "**/benches/**", "**/examples/**"),
}


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """git's `glob` pathspec magic as a regular expression (for paths that are not in a git tree yet)."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(pattern: str, path: str) -> bool:
    """Whether `path` (relative to the tree's root, '/'-separated) matches the glob pathspec `pattern`
    as git would select it."""
    return _pattern_regex(pattern).match(path) is not None


def is_protected(language: str, path: str) -> bool:
    """Whether `path` is one of the language's tests, test data, harnesses or build logic (`PROTECTED`):
    what task authoring puts in a task's hidden tests rather than in its fix."""
    return any(matches(p, path) for p in PROTECTED.get(language, ()))


def _glob(pattern: str, *, exclude: bool = False) -> str:
    return f":({'exclude,' if exclude else ''}glob){pattern}"


@dataclass(frozen=True)
class Protection:
    """The graded part of a change, as git pathspecs: `graded()` gives the sets whose union it is."""

    code: tuple[str, ...]
    protected: tuple[str, ...] = ()
    fix_may_change: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        language: str,
        protected: list[str] | tuple[str, ...] = (),
        fix_may_change: list[str] | tuple[str, ...] = (),
    ) -> Protection:
        """The protection of a task in `language` (an unknown language grades no file but what the task
        names in `fix_may_change`)."""
        return cls(
            code=CODE.get(language, ()),
            protected=(*PROTECTED.get(language, ()), *protected),
            fix_may_change=tuple(fix_may_change),
        )

    @classmethod
    def of_task(cls, task: TaskFile) -> Protection:
        """What config.yaml's `protected_files` and `fix_may_change` make of its language's protection."""
        return cls.of(task.language, task.protected_files, task.fix_may_change)

    def graded(self) -> list[list[str]]:
        """Pathspec lists whose matches, together, are the graded paths; each list selects paths apart from
        the others (`fix_may_change` wins over the protected paths, so the first list leaves it out)."""
        sets = []
        if self.code:
            sets.append(
                [
                    *(_glob(p) for p in self.code),
                    *(_glob(p, exclude=True) for p in (*self.protected, *self.fix_may_change)),
                ]
            )
        if self.fix_may_change:
            sets.append([_glob(p) for p in self.fix_may_change])
        return sets
