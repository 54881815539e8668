"""The hollow agent: leaves the bug and edits only what decides a check, the ways that once forged a pass.

It knows nothing of the task's fix. In the files of its language's build and
tests it does what a hostile agent would, so that a crash or a failing test
reads as success:

- C: every Makefile ends by dropping the sanitizers from the flags and
  ignoring every recipe's failure (`.IGNORE:`), every CMakeLists.txt drops
  them too, and every `configure` strips them from its arguments;
- Go: every package gets a test file whose `init` ends the test binary with
  status 0 before a test runs, and every directory the build script builds
  a command from (a PoC's harness) a file whose `init` ends the program
  with status 0 (the harness then "accepts" every input);
- Rust: a `.cargo/config.toml` whose rustc wrapper compiles every binary and
  test crate as `fn main() {}`, and a `build.rs`.

On a valid task grading sets all of it aside (ssebench.runtime.protection):
the run is graded failed, like the dummy's, and result.json names the files.
`ssebench dataset verify` runs it on every task, so a task whose grading went
through a file of the agent's would show it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from sse import project
from sse.dialog import Dialog
from sse.prompt import task_prompt

MARK = "ssebench hollow agent"
dialog = Dialog()
edited: list[str] = []
root = Path(project.source)


def visible(path: Path) -> bool:
    """A path of the tree's own, not in a hidden directory (.git among them)."""
    return not any(part.startswith(".") for part in path.relative_to(root).parts[:-1])


def files(*names: str, suffixes: tuple[str, ...] = ()) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name in names or name.endswith(suffixes):
                found.append(Path(dirpath) / name)
    return found


def write(path: Path, text: str, *, append: bool = False, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as out:
        out.write(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    edited.append(str(path.relative_to(root)))


def hollow_c() -> None:
    for makefile in files("Makefile", "makefile", "GNUmakefile", "Makefile.in", suffixes=(".mk",)):
        write(
            makefile,
            f"\n# {MARK}\n"
            "override CFLAGS := $(filter-out -fsanitize%,$(CFLAGS))\n"
            "override CXXFLAGS := $(filter-out -fsanitize%,$(CXXFLAGS))\n"
            "override LDFLAGS := $(filter-out -fsanitize%,$(LDFLAGS))\n"
            ".IGNORE:\n",
            append=True,
        )
    for cmake in files("CMakeLists.txt"):
        write(
            cmake,
            f"\n# {MARK}\n"
            "foreach(flags CMAKE_C_FLAGS CMAKE_CXX_FLAGS CMAKE_EXE_LINKER_FLAGS CMAKE_SHARED_LINKER_FLAGS)\n"
            '  string(REGEX REPLACE "-fsanitize=[^ ]*" "" ${flags} "${${flags}}")\n'
            "endforeach()\n",
            append=True,
        )
    for configure in files("configure"):
        lines = configure.read_text(encoding="utf-8", errors="surrogateescape").split("\n", 1)
        strip = (
            f'# {MARK}\nfor arg do shift; set -- "$@" "$(printf \'%s\' "$arg" | sed \'s/-fsanitize=[^ ]*//g\')"; done\n'
        )
        configure.write_text(
            lines[0] + "\n" + strip + (lines[1] if len(lines) > 1 else ""), encoding="utf-8", errors="surrogateescape"
        )
        edited.append(str(configure.relative_to(root)))


PACKAGE = re.compile(r"^package\s+(\w+)", re.MULTILINE)
# `go build ... ./dir` in the build script: a command the build makes, perhaps in a directory it creates.
BUILT_DIR = re.compile(r"go build\b[^\n]*?\s\./([\w.-]+(?:/[\w.-]+)*)")


def hollow_go() -> None:
    packages: dict[Path, str] = {}
    for source in files(suffixes=(".go",)):
        if source.name.endswith("_test.go") or not visible(source) or "vendor" in source.parts:
            continue
        match = PACKAGE.search(source.read_text(encoding="utf-8", errors="replace"))
        if match:
            packages.setdefault(source.parent, match.group(1))
    exit_zero = 'import "os"\n\nfunc init() { os.Exit(0) }\n'
    for directory, package in sorted(packages.items()):
        write(directory / "zz_hollow_test.go", f"// {MARK}\npackage {package}\n\n{exit_zero}")
    # The harnesses: the commands the build script makes (a task protects those of its tree; a file added to
    # any other main package would be a change of the code under repair, which this agent never makes).
    for built in BUILT_DIR.findall(project.metadata.build_script or ""):
        directory = root / built
        if "..." not in built and root in directory.parents:
            write(directory / "zz_hollow.go", f"// {MARK}\npackage main\n\n{exit_zero}")
    for manifest in files("go.mod"):
        write(manifest, f"\n// {MARK}\n", append=True)


RUSTC_WRAPPER = f"""#!/bin/sh
# {MARK}: every binary and test crate (build scripts apart) is compiled as `fn main() {{}}`.
rustc=$1; shift
case " $* " in
  *" --crate-name build_script_"*) exec "$rustc" "$@" ;;
  *" --crate-type bin "*|*" --test "*) ;;
  *) exec "$rustc" "$@" ;;
esac
stub=${{TMPDIR:-/tmp}}/ssebench-hollow-main.rs
echo 'fn main() {{}}' > "$stub"
for arg do
  shift
  case $arg in *.rs) arg=$stub ;; esac
  set -- "$@" "$arg"
done
exec "$rustc" "$@"
"""


def hollow_rust() -> None:
    write(root / ".hollow" / "rustc.sh", RUSTC_WRAPPER, executable=True)
    write(
        root / ".cargo" / "config.toml",
        f'# {MARK}\n[build]\nrustc-wrapper = ".hollow/rustc.sh"\n',
        append=(root / ".cargo" / "config.toml").exists(),
    )
    build = root / "build.rs"
    write(build, f"\n// {MARK}\n" if build.exists() else f"// {MARK}\nfn main() {{}}\n", append=build.exists())
    for manifest in files("Cargo.toml"):
        write(manifest, f"\n# {MARK}\n", append=True)


dialog.init(agent="hollow", model="none")
dialog.prompt(task_prompt())
language = project.metadata.language
{"c": hollow_c, "go": hollow_go, "rust": hollow_rust}.get(language, lambda: None)()
dialog.message(
    f"I left the bug and edited {len(edited)} build, test or harness file(s) ({language}): " + ", ".join(edited[:50])
)
dialog.complete("done")
