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

from dataclasses import dataclass

# The patterns are the contract's: task authoring on the host splits a fix by them too.
from ssebench.runtime.contract import CODE, PROTECTED, TaskFile


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
