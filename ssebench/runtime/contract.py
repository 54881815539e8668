"""The contract between the host and a run's containers, written once for both sides.

What the host writes and the runtime reads (or the other way round):
paths and users in a container, the environment a run starts with
(`RuntimeSettings`, `to_env` / `load_settings`), the labels on what a
session starts (`RunLabels`), the task as the runtime reads it
(`TaskFile`) and the checks it supports, the difficulty levels, and the
phase a run is in (`Phase`, written by the entrypoint, read by
`ssebench ps` and by the host's wait for a kept run).

It lives in the runtime package because the runtime volume holds that
package and nothing else of `ssebench`; it imports nothing but the standard
library, so the host may import it (and it is the one runtime module the
host imports: tests/unit/test_imports.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import Any, Literal, get_args

# --- Paths and users in a container ---------------------------------------------------------------------------

MODEL = "model"
RUNNER = "sse-runner"

TASK_DIR = "/ssebench"
STATE_DIR = "/var/lib/ssebench"
RESULTS = "/var/lib/ssebench/results"
# Where grading builds: a volume of the run's own in the container that grades.
RUNNER_DIR = "/var/lib/ssebench-runner"
# The tree as the case image made it, which grading applies the agent's patch to: root's copy, made in the
# runner's area when a run starts (ssebench.runtime.tree), which sse-runner may traverse but not enter.
REPO = "/var/lib/ssebench-runner/repo"
ADMIN_DIR = "/run/ssebench"
ADMIN_SOCKET = "/run/ssebench/admin.sock"
# What the entrypoint of the container that grades says once its daemon and MCP server serve (sidecar mode's
# host starts the agent's container only then).
SERVING = "daemon ready; MCP server listening"
# Sidecar mode: the task container learns the agent phase is over from the host, which writes its figures
# (one JSON line) into this fifo, root's alone, through `docker exec` (ssebench.runtime.phase).
AGENT_DONE = "/run/ssebench/agent-done"
# The phase the container that grades is in (`Phase`), one JSON line the entrypoint replaces at each step,
# in root's directory of 0700: nothing the agent or a check runs can write it.
PHASE_FILE = "/run/ssebench/phase"
# Sidecar mode: the one volume of sockets the agent container shares with the task container, holding the
# agent socket only (the admin socket never leaves the task container).
SIDECAR_SOCKETS = "/run/sse-agent"
SIDECAR_AGENT_SOCKET = f"{SIDECAR_SOCKETS}/sse.sock"
AGENT_SOCKET = "/tmp/sse.sock"
ARCHIVE = "/tmp/sse-archive"
HTTP_PORT = 4263
MCP_PORT = 3000
# The listening sockets a runtime process inherits from the entrypoint, which bound them: `name=fd,...`
# (ssebench.runtime.listeners).
LISTEN_FDS = "SSE_LISTEN_FDS"
# The pipe on which it writes one byte once it serves.
READY_FD = "SSE_READY_FD"
RUNTIME_HOME = "/opt/ssebench"
# The runtime's interpreter; every runtime process is started with it, isolated (-I).
RUNTIME_PYTHON = f"{RUNTIME_HOME}/venv/bin/python"
REFERENCE_PATCH = "/reference/patch.diff"
# A prediction's patch (`--predictions`), mounted read-only for the predictions agent's runs alone.
PREDICTION_PATCH = "/prediction/patch.diff"
CAPTURE_DIR = "/var/lib/ssebench-capture"
MCP_LOG_DIR = "/tmp/sse-test-patch"

# --- Difficulty and checks --------------------------------------------------------------------------------------

DIFFICULTY_NAMES = {
    0: "FULL_ASSISTANCE",
    1: "NO_INTENT_TEST",
    2: "NO_FUTURE_TEST",
    3: "BUILD_ONLY",
    4: "NO_BUILD",
}

# The highest difficulty level at which the agent may still run each action.
MAX_LEVEL = {"build": 3, "function_test": 2, "run_poc": 1, "intent_test": 0}
# Checks only grading runs, on the admin socket, at every difficulty: an agent never runs them, nor learns
# their inputs.
GRADING_ACTIONS = ("run_variant",)
# What a task's failed variant makes of the grade: a failed check (the default), or a figure reported only.
VariantPolicy = Literal["fail", "report"]
VARIANT_POLICIES: tuple[VariantPolicy, ...] = get_args(VariantPolicy)

# The checks a task may support, in grading order.
CHECKS = ("build", "poc", "function_test", "intent_test")


def allowed_actions(difficulty: int) -> list[str]:
    return [action for action, level in MAX_LEVEL.items() if difficulty <= level]


def supported_checks(*, build: bool, run: bool, poc: bool, test: bool, future_test: bool) -> list[str]:
    """The checks a task supports, in grading order, from what it has: a build script, a run script and
    PoCs, a test script, and the hidden intent test (which runs through the test script)."""
    has = {"build": build, "poc": run and poc, "function_test": test, "intent_test": test and future_test}
    return [check for check in CHECKS if has[check]]


# --- The task as the runtime reads it (/ssebench/config.yaml) ----------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return str(value)


def _paths(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    return [p for p in (_text(v) for v in value or []) if p]


@dataclass(frozen=True)
class TaskFile:
    """A task's config.yaml as the runtime reads it: leniently (the host validated it strictly before the
    image was built), with the same meaning of empty values."""

    id: str
    project: str
    language: str
    source: str
    issue: str | None = None
    crash_report: list[str] = field(default_factory=list)
    bug_description: str | None = None
    build_script: str | None = None
    run_script: str | None = None
    test_script: str | None = None
    patch: str | None = None
    poc: list[str] = field(default_factory=list)
    future_test: str | None = None
    # Hidden inputs besides the PoCs that reach the same root cause, run as PoCs by grading only.
    variants: list[str] = field(default_factory=list)
    variant_policy: VariantPolicy = "fail"
    # Paths grading takes from the original beyond the language's defaults, and those the fix may change
    # (`ssebench.runtime.protection`).
    protected_files: list[str] = field(default_factory=list)
    fix_may_change: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> TaskFile:
        description = data.get("task_description") or {}
        scripts = data.get("scripts") or {}
        files = data.get("files") or {}
        return cls(
            id=str(data["id"]),
            project=str(data["project"]),
            language=str(data["language"]),
            source=str(data["source"]).rstrip("/"),
            issue=_text(description.get("issue")),
            crash_report=_paths(description.get("crash_report")),
            bug_description=_text(description.get("bug_description")),
            build_script=_text(scripts.get("build")),
            run_script=_text(scripts.get("run")),
            test_script=_text(scripts.get("test")),
            patch=_text(files.get("patch")),
            poc=_paths(files.get("poc")),
            future_test=_text(files.get("future_test")),
            variants=_paths(files.get("variants")),
            variant_policy="report" if data.get("variant_policy") == "report" else "fail",
            protected_files=_paths(data.get("protected_files")),
            fix_may_change=_paths(data.get("fix_may_change")),
        )

    def checks(self) -> list[str]:
        """The checks this task supports, in grading order."""
        return supported_checks(
            build=self.build_script is not None,
            run=self.run_script is not None,
            poc=bool(self.poc),
            test=self.test_script is not None,
            future_test=self.future_test is not None,
        )

    def secret_paths(self) -> list[str]:
        """Paths under /ssebench that only root may read."""
        named = [self.run_script, self.patch, self.future_test, *self.poc, *self.variants, *self.crash_report]
        return ["config.yaml", "diffs", "pocs", "variants", "reports", *(p for p in named if p)]


# --- What of a change is code, and what decides a check (`ssebench.runtime.protection`; task authoring) ---------

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
# Folders of tests by other names (perl's t/, rsync's and busybox's testsuite/, libpng's contrib/libtests/):
# protected for C, and tests to the changed-tests signal (ssebench.runtime.signals) in every language.
TEST_FOLDERS = ("**/t/**", "**/testing/**", "**/testsuite/**", "**/libtests/**")
PROTECTED: dict[str, tuple[str, ...]] = {
    # (`*.inc` is code, but a Makefile.inc is make's: c-ares's src/lib/Makefile.inc, found by review.)
    "c": (
        *_EVERY_LANGUAGE,
        "**/Makefile*",
        *TEST_FOLDERS,
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


# POSIX character classes inside `[...]`, as Python class members (ASCII, as git's wildmatch takes them).
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "digit": "0-9",
    "lower": "a-z",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _glob_class(glob: str, start: int) -> tuple[str, int]:
    """The `[...]` class that opens at glob[start], as a regular expression, and the index after it: git's
    wildmatch rules (a leading `!` or `^` negates, a `]` first is a member, `\\` escapes, `a-z` a range, a
    reversed range only its first end, `[:digit:]` and the like), and never a `/`."""
    i = start + 1
    negated = i < len(glob) and glob[i] in "!^"
    i += negated
    members: list[str] = []
    first = True
    while True:
        if i >= len(glob):
            raise ValueError(f"'{glob}': the [ at character {start + 1} is never closed (write [[] for a literal [)")
        char = glob[i]
        if char == "]" and not first:
            break
        first = False
        if char == "[" and glob.startswith("[:", i) and (close := glob.find(":]", i + 2)) > 0:
            name = glob[i + 2 : close]
            if name not in _POSIX_CLASSES:
                raise ValueError(f"'{glob}': [:{name}:] is not a character class ({', '.join(_POSIX_CLASSES)})")
            members.append(_POSIX_CLASSES[name])
            i = close + 2
            continue
        if char == "\\" and i + 1 < len(glob):
            i += 1
            char = glob[i]
        i += 1
        if glob.startswith("-", i) and i + 1 < len(glob) and glob[i + 1] != "]":
            last = glob[i + 2] if glob[i + 1] == "\\" and i + 2 < len(glob) else glob[i + 1]
            i += 2 + (glob[i + 1] == "\\")
            members.append(f"{re.escape(char)}-{re.escape(last)}" if char <= last else re.escape(char))
        else:
            members.append(re.escape(char))
    return "(?!/)[" + "^" * negated + "".join(members) + "]", i + 1


@cache
def glob_regex(glob: str) -> re.Pattern[str]:
    """A git `glob` pathspec as a regular expression of a whole path (for paths that are not in a git tree
    yet): `**/` any directories (none too), a trailing `/**` everything inside, `*` and `?` within one name,
    `[...]` a class, `\\` an escape. ValueError for a pattern git could never match (an unclosed class)."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[":
            regex, i = _glob_class(glob, i)
            out.append(regex)
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    # DOTALL: a name may hold a newline, and `*` must match it as git does.
    return re.compile("".join(out), re.DOTALL)


def matches(path: str, globs: Iterable[str]) -> bool:
    """Whether `path` (relative to the tree's root, '/'-separated) matches one of the glob pathspecs, as
    git would select it."""
    return any(glob_regex(glob).fullmatch(path) for glob in globs)


def is_protected(language: str, path: str) -> bool:
    """Whether `path` is one of the language's tests, test data, harnesses or build logic (`PROTECTED`):
    what task authoring puts in a task's hidden tests rather than in its fix."""
    return matches(path, PROTECTED.get(language, ()))


# --- The environment a run's containers start with ---------------------------------------------------------------

# Which part of a run a container plays: the one container of sandbox mode, or,
# in sidecar mode, the task container (daemon, MCP server, evaluator, the tree,
# the hidden files and the results: everything that grades) or the agent
# container (the agent alone; nothing of the task, nothing that grades).
# A run container's part: sandbox (one container holds everything), or sidecar mode's task container (which
# grades) and agent container.
Role = Literal["sandbox", "task", "agent"]
ROLES: tuple[Role, ...] = get_args(Role)

# The agent's time limit per run, and grading's after it.
AGENT_TIMEOUT = 3600.0
GRADING_TIMEOUT = 7200.0
# What of the agent's archive is kept: per file and in all (in the container, and again on the host).
ARCHIVE_FILE_CAP = 64 << 20
ARCHIVE_CAP = 256 << 20

# Field name -> environment variable.
ENV = {
    "role": "SSE_ROLE",
    "source": "SSE_SOURCE",
    "difficulty": "SSE_DIFFICULTY",
    "results": "SSE_RESULTS",
    "archive": "SSE_ARCHIVE",
    "agent_socket": "SSE_DAEMON_SOCKET",
    "admin_socket": "SSE_ADMIN_SOCKET",
    "http_port": "SSE_HTTP_PORT",
    "agent_timeout": "TIMEOUT",
    "daemon_timeout": "SSE_DAEMON_TIMEOUT",
    "script_timeout": "SSE_SCRIPT_TIMEOUT",
    "bash_timeout": "SSE_BASH_TIMEOUT",
    "grading_timeout": "SSE_GRADING_TIMEOUT",
    "output_cap": "SSE_OUTPUT_CAP",
    "keep_alive": "SSE_KEEP_ALIVE",
    "prediction": "SSE_PREDICTION",
    "keep_token": "SSE_KEEP_TOKEN",
    "file_size": "SSE_FILE_SIZE_LIMIT",
    "copy_limit": "SSE_COPY_LIMIT",
    "patch_limit": "SSE_PATCH_LIMIT",
    "capture_timeout": "SSE_CAPTURE_TIMEOUT",
    "archive_file_cap": "SSE_ARCHIVE_FILE_CAP",
    "archive_cap": "SSE_ARCHIVE_CAP",
    "archive_entries": "SSE_ARCHIVE_ENTRIES",
    "mcp_bind": "SSE_MCP_BIND",
    "mcp_url": "SSE_MCP_URL",
}
# Settings of root's alone, never in an environment model's processes get: the admin socket, the results
# directory, and a kept run's token (what ends a kept run's wait on the host).
ROOT_ONLY = frozenset({ENV["admin_socket"], ENV["results"], ENV["keep_token"]})


def for_model(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the settings of root's alone: the base of every environment model's processes get."""
    return {k: v for k, v in environ.items() if k not in ROOT_ONLY}


class SettingsError(Exception):
    """A setting's value is invalid; the message names the variable."""


@dataclass(frozen=True)
class RuntimeSettings:
    """The runtime's settings, as the environment (`ENV`) carries them into a container."""

    role: Role = "sandbox"
    # The agent's source tree (agent role: there is no config.yaml to read it from).
    source: str = ""
    difficulty: int = 2
    results: str = RESULTS
    archive: str = ARCHIVE
    agent_socket: str = AGENT_SOCKET
    admin_socket: str = ADMIN_SOCKET
    http_port: int = HTTP_PORT
    agent_timeout: float = AGENT_TIMEOUT
    daemon_timeout: float = 300.0
    script_timeout: float = 1800.0
    bash_timeout: float = 600.0
    grading_timeout: float = GRADING_TIMEOUT
    output_cap: int = 256 * 1024
    keep_alive: bool = False
    # A run of the predictions agent (`--predictions`): its agent only applies the prediction's patch, so its
    # non-zero exit means the patch did not apply, a failed grade (`ssebench.runtime.evaluator`).
    prediction: bool = False
    # A kept run's own (random, made when it starts): its `kept` phase names it, so that no file an image
    # brought to the phase file's place can pass for the run's end (`kept_status`).
    keep_token: str = ""
    # The largest file a process of model or sse-runner may write (RLIMIT_FSIZE).
    file_size: int = 4 << 30
    # The most a check copies of a tree; the largest patch a capture makes.
    copy_limit: int = 8 << 30
    patch_limit: int = 64 << 20
    capture_timeout: float = 300.0
    archive_file_cap: int = ARCHIVE_FILE_CAP
    archive_cap: int = ARCHIVE_CAP
    archive_entries: int = 100_000
    # Where the MCP server listens (loopback; sidecar mode's task container: every interface of its own
    # network, for the agent container), and the URL the agent is given for it.
    mcp_bind: str = "127.0.0.1"
    mcp_url: str = f"http://127.0.0.1:{MCP_PORT}/mcp"

    def to_env(self, *names: str) -> dict[str, str]:
        """The environment that carries the named settings (every one when none is named), as `load_settings`
        reads it back. Times in whole seconds for the agent's limit, as the agent reads TIMEOUT."""
        env = {}
        for name in names or tuple(ENV):
            value = getattr(self, name)
            if name == "agent_timeout":
                text = str(int(value))
            elif isinstance(value, bool):
                text = "1" if value else "0"
            elif isinstance(value, float):
                text = f"{value:g}" if value.is_integer() else repr(value)
            else:
                text = str(value)
            env[ENV[name]] = text
        return env


# The bounds of each numeric setting: (least, most); a float's least is exclusive (a time must be > 0).
_BOUNDS: dict[str, tuple[float, float | None]] = {
    "http_port": (1, 65535),
    "output_cap": (1024, None),
    "file_size": (1 << 20, None),
    "copy_limit": (1 << 20, None),
    "patch_limit": (1 << 10, None),
    "archive_file_cap": (1, None),
    "archive_cap": (1, None),
    "archive_entries": (1, None),
    **{
        name: (0, None)
        for name in (
            "agent_timeout",
            "daemon_timeout",
            "script_timeout",
            "bash_timeout",
            "grading_timeout",
            "capture_timeout",
        )
    },
}
_FLOATS = {f.name for f in fields(RuntimeSettings) if isinstance(f.default, float)}


def _number(name: str, text: str) -> int | float:
    least, most = _BOUNDS[name]
    if name in _FLOATS:
        try:
            value: int | float = float(text)
        except ValueError:
            raise ValueError(f"must be a number (got {text!r})") from None
        if not math.isfinite(value) or value <= least:
            raise ValueError(f"must be a number greater than {least:g} (got {text!r})")
        return value
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"must be a whole number (got {text!r})") from None
    if value < least or (most is not None and value > most):
        bounds = f"from {least:g} to {most:g}" if most is not None else f"at least {least:g}"
        raise ValueError(f"must be a whole number {bounds} (got {text!r})")
    return value


def _value(name: str, text: str) -> object:
    if name == "role":
        if text not in ROLES:
            raise ValueError(f"must be one of {', '.join(ROLES)} (got {text!r})")
        return text
    if name == "difficulty":
        stripped = text.strip()
        if not stripped.isdigit() or int(stripped) not in DIFFICULTY_NAMES:
            raise ValueError(f"must be one of 0, 1, 2, 3, 4 (got {text or '(empty)'!r})")
        return int(stripped)
    if name in ("keep_alive", "prediction"):
        return text.strip().lower() in ("1", "true", "yes")
    if name in _BOUNDS:
        return _number(name, text)
    return text


def load_settings(environ: Mapping[str, str] | None = None) -> RuntimeSettings:
    """Settings from the environment; unset variables take their defaults. Raises SettingsError.

    Plain Python (no validation library): every runtime process reads these at start, so their import is on
    the path from a container's start to its agent's.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, var in ENV.items():
        if var in environ:
            try:
                values[name] = _value(name, environ[var])
            except ValueError as exc:
                raise SettingsError(f"{var}: {exc}") from None
    settings = RuntimeSettings(**values)  # type: ignore[arg-type]
    if settings.role == "agent" and not settings.source.startswith("/"):
        raise SettingsError("SSE_SOURCE: the agent container needs the source tree's absolute path")
    return settings


# --- The end of the agent phase ---------------------------------------------------------------------------------

# The exit status of an agent stopped at its time limit (as `timeout` has it).
TIMED_OUT = 124


@dataclass(frozen=True)
class AgentEnd:
    """How the agent phase ended: the agent's exit status, how long it ran, whether its time limit ended it.

    Sidecar mode's host tells the task container so (`to_figures`, through `ssebench.runtime.phase`); the
    entrypoint hands the same figures to the evaluator either way.
    """

    status: int
    duration: float
    timed_out: bool

    FIGURES = ("AGENT_DURATION", "AGENT_EXIT_STATUS", "SSE_METRIC_AGENT_TIMEOUT")

    def to_figures(self) -> dict[str, str]:
        return {
            "AGENT_DURATION": f"{self.duration:.3f}",
            "AGENT_EXIT_STATUS": str(self.status),
            "SSE_METRIC_AGENT_TIMEOUT": "true" if self.timed_out else "false",
        }

    @classmethod
    def read(cls, figures: Mapping[str, Any]) -> AgentEnd | None:
        """Read back as grading does: None for figures that are missing or not numbers (the result then
        says it does not know how the agent ended)."""
        try:
            return cls.from_figures({k: figures[k] for k in cls.FIGURES}, 0.0)
        except (KeyError, ValueError, TypeError):
            return None

    @classmethod
    def from_figures(cls, figures: Mapping[str, Any], duration: float) -> AgentEnd:
        """Read back; a missing status reads as timed out, a missing duration as `duration`. Raises
        ValueError or TypeError for figures that are not numbers."""
        return cls(
            status=int(figures.get("AGENT_EXIT_STATUS", TIMED_OUT)),
            duration=float(figures.get("AGENT_DURATION", duration)),
            timed_out=str(figures.get("SSE_METRIC_AGENT_TIMEOUT", "")).lower() == "true",
        )


# --- Labels on what a session starts -----------------------------------------------------------------------------

# A session's, on every container, network and volume (ssebench.reaper).
SESSION_LABEL = "ssebench.session"
HOST_LABEL = "ssebench.host"
CONTROLLER_LABEL = "ssebench.controller"
OWNER_LABEL = "ssebench.owner"
# A run's, on its containers; ROLE_LABEL in sidecar mode only.
RUN_LABEL = "ssebench.run"
ROLE_LABEL = "ssebench.role"
# A kept run's (--keep-containers), on its containers, network and volumes: the reaper leaves them to
# `ssebench rm`.
KEPT_LABEL = "ssebench.kept"

# The agent that applies the task's known fix, and the label its runs' containers carry.
REFERENCE_AGENT = "reference"
REFERENCE_RUN_LABEL = "ssebench.reference-run"
# The agent that applies a prediction's patch (`--predictions`): it grades patches made elsewhere.
PREDICTIONS_AGENT = "predictions"
# The predictions agent's exit status when the harness mounted no patch for it (EX_SOFTWARE; git apply exits
# 0, 1 or 128): the harness's fault, an ungraded run, never the prediction's failure.
PREDICTION_NOT_MOUNTED = 70


@dataclass(frozen=True)
class RunLabels:
    """What a run container's labels say of its run (`ssebench ps` reads them back)."""

    run: str
    task: str
    agent: str
    model: str
    difficulty: str
    mode: str
    trial: str

    def to_labels(self) -> dict[str, str]:
        labels = {f"ssebench.{f.name}": getattr(self, f.name) for f in fields(self)}
        if self.agent == REFERENCE_AGENT:
            # A run of the known fix: it rates the task and the grader, never a model (upstream's label).
            labels[REFERENCE_RUN_LABEL] = "true"
        return labels

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> RunLabels:
        """Read back; a label that is missing reads `?` (a trial, 1)."""
        return cls(**{f.name: labels.get(f"ssebench.{f.name}", "1" if f.name == "trial" else "?") for f in fields(cls)})


# --- The phase a run is in ---------------------------------------------------------------------------------------


class Phase(StrEnum):
    """The phase of the container that grades, as its entrypoint writes it into PHASE_FILE."""

    STARTING = "starting"
    AGENT = "agent"
    GRADING = "grading"
    FINISHING = "finishing"
    FAILED = "failed"
    # Keep-alive (SSE_KEEP_ALIVE=1): everything the host brings home is final, and the container stays up; the
    # record names the status it would have exited with (`kept_status`). Sidecar mode's agent container
    # writes it too, once the agent has ended and model's processes with it.
    KEPT = "kept"


# The most a phase file may hold; the host reads no more.
PHASE_FILE_CAP = 256


def phase_record(phase: Phase, at: float, status: int | None = None, token: str | None = None) -> bytes:
    """The phase file's text: one JSON line, the phase and when (seconds since the epoch) it began, and for
    a kept container the status it would have exited with and its run's token (SSE_KEEP_TOKEN)."""
    record: dict[str, object] = {"phase": phase.value, "since": round(at, 3)}
    if status is not None:
        record["status"] = status
    if token is not None:
        record["token"] = token
    return json.dumps(record).encode() + b"\n"


def parse_phase(data: bytes) -> Phase | None:
    """The phase a phase file's text names; None for anything else (too long, not JSON, another word).

    The host acts on nothing but these words: a phase says what `ssebench ps` prints, and a kept run's ends
    the host's wait for it (`kept_status`) as its container's exit would.
    """
    if len(data) > PHASE_FILE_CAP:
        return None
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    word = record.get("phase") if isinstance(record, dict) else None
    return Phase(word) if isinstance(word, str) and word in Phase._value2member_map_ else None


def kept_status(data: bytes, token: str) -> int | None:
    """The status a kept container's phase file names (`Phase.KEPT`, with the run's `token`): the host's run
    of it is over, as if it had exited with that status; None for any other text (the run goes on).

    The token is made when the run starts and given to its containers alone: a phase file an image brought
    (read before the entrypoint replaced it) cannot know it."""
    if not token or parse_phase(data) is not Phase.KEPT:
        return None
    record = json.loads(data)
    status = record.get("status")
    return status if type(status) is int and record.get("token") == token else None
