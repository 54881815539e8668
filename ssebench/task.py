"""A task: one disclosed bug, its upstream fix and how to check a patch.

A task folder is in the upstream SSEBench format (`Dockerfile` plus `sse/`),
so upstream folders load unchanged. `config.yaml` is validated by pydantic
models that reject unknown keys; every problem becomes a one-line
`ConfigError` naming the file, the field and what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ssebench.errors import ConfigError, ConfigErrors
from ssebench.runtime import contract
from ssebench.schema import Strict, read_yaml, validate

TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9]+(?:(?:[._]|__|-+)[A-Za-z0-9]+)*$")
TASK_ID_MAX = 128
ADVISORY = re.compile(r"\b(CVE-\d{4}-\d{4,}|RUSTSEC-\d{4}-\d{4}|GHSA(?:-[0-9a-z]{4}){3})\b", re.IGNORECASE)

# Where the files named in config.yaml (paths inside /ssebench) live in the
# task folder. Scripts are the one directory the upstream layout flattens.
_SCRIPT_DIR = "scripts"


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "none"))


def _relative_path(value: Any) -> str | None:
    """A path inside /ssebench: relative, normalised, never leaving the folder."""
    if _is_none(value):
        return None
    if not isinstance(value, str):
        raise ValueError(f"must be a path (a string), not {type(value).__name__}")
    path = PurePosixPath(value.strip())
    if path.is_absolute():
        raise ValueError(f"'{value}' is absolute; give it relative to /ssebench, e.g. scripts/build.sh")
    if ".." in path.parts:
        raise ValueError(f"'{value}' leaves /ssebench ('..' is not allowed)")
    return str(path)


def _as_list(value: Any) -> list[Any]:
    """A list field: missing or 'none' is empty, one string is a list of one."""
    if _is_none(value):
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ValueError("must be a list")
    return [item for item in value if not _is_none(item)]


# What a list field takes in the file (`_as_list`), for its JSON Schema: a list, one string, or none.
LIST_INPUT = list[str] | str | None


def _required_path(value: Any) -> str:
    path = _relative_path(value)
    if path is None:
        raise ValueError("must not be empty")
    return path


# A path relative to /ssebench, checked one list item at a time so an error
# names its index (files.poc[1]).
RelPath = Annotated[str, BeforeValidator(_required_path)]


def _tree_pattern(value: Any) -> str:
    """A path pattern in the source tree (git's pathspec glob: `**/`, `*`, `?`, `[...]`), relative to its root."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a path pattern (a non-empty string), e.g. tests/** or src/main.rs")
    pattern = value.strip()
    if pattern.startswith("/") or pattern.startswith(":"):
        raise ValueError(
            f"'{value}' must be relative to the source tree's root, with no pathspec magic "
            "(e.g. tests/** rather than /src/x/tests/**)"
        )
    if ".." in PurePosixPath(pattern).parts:
        raise ValueError(f"'{value}' leaves the source tree ('..' is not allowed)")
    contract.glob_regex(pattern)  # a pattern git could never match is refused, saying why
    return pattern


# A pattern of paths in the tree (protected_files, fix_may_change), checked one item at a time.
TreePattern = Annotated[str, BeforeValidator(_tree_pattern)]


# Paths of a task container the runtime uses (ssebench.runtime.contract), and system directories: no task's tree
# may be one of them, inside one of the runtime's, or above one.
RUNTIME_PATHS = tuple(
    PurePosixPath(p)
    for p in (
        contract.TASK_DIR,
        contract.STATE_DIR,
        contract.RUNNER_DIR,
        contract.CAPTURE_DIR,
        contract.ADMIN_DIR,
        contract.ARCHIVE,
        contract.AGENT_SOCKET,
        contract.MCP_LOG_DIR,
        contract.RUNTIME_HOME,
        str(PurePosixPath(contract.REFERENCE_PATCH).parent),
        str(PurePosixPath(contract.PREDICTION_PATCH).parent),
    )
)
SYSTEM_PATHS = tuple(
    PurePosixPath(p)
    for p in (
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
    )
)


class TaskDescription(Strict):
    """What the agent is told. At least one field must be non-empty."""

    issue: str | None = None
    """The upstream issue's text, given to the agent as it is."""
    crash_report: list[RelPath] = Field(default_factory=list)
    """Report files (paths inside /ssebench, e.g. reports/issue.md) whose contents the agent is given, in this
    order: the upstream issue, a sanitizer's log."""
    bug_description: str | None = None
    """A short description of the bug."""

    @field_validator("issue", "bug_description", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str | None:
        if _is_none(value):
            return None
        if not isinstance(value, str):
            raise ValueError("must be text")
        return value

    @field_validator("crash_report", mode="before", json_schema_input_type=LIST_INPUT)
    @classmethod
    def _reports(cls, value: Any) -> list[Any]:
        return _as_list(value)

    @model_validator(mode="after")
    def _not_empty(self) -> TaskDescription:
        if not (self.issue or self.crash_report or self.bug_description):
            raise ValueError("give at least one of issue, crash_report, bug_description ('none' counts as empty)")
        return self


class Scripts(Strict):
    """`scripts:` in config.yaml: the task's scripts, paths inside /ssebench (scripts/NAME is the folder's
    sse/NAME)."""

    build: str | None = None
    """Builds the source tree in place (run again on a built tree by test.sh); without it there is no build
    check."""
    run: str | None = None
    """Runs one proof of concept, given as its argument, against the build: exit 0 means the bug no longer
    triggers."""
    test: str | None = None
    """Runs the project's tests (the function test; with files.future_test applied, the intent test)."""

    @field_validator("build", "run", "test", mode="before")
    @classmethod
    def _path(cls, value: Any) -> str | None:
        return _relative_path(value)


class Files(Strict):
    """`files:` in config.yaml: the task's hidden files, paths inside /ssebench."""

    patch: str | None = None
    """The upstream fix as a diff of the source tree (e.g. diffs/patch.diff): what the reference agent applies."""
    poc: list[RelPath] = Field(default_factory=list)
    """Proofs of concept (e.g. pocs/crash.bin): inputs that trigger the bug, each given to scripts.run."""
    future_test: str | None = None
    """The fix's own tests as a diff (e.g. diffs/test.diff), applied for the intent test; never shown to the
    agent."""
    variants: list[RelPath] = Field(default_factory=list)
    """Hidden variant inputs (e.g. variants/longer.bin): other inputs that reach the same root cause as the
    PoCs, each given to scripts.run by grading only, never shown to or run by the agent (an SSEBench
    extension; see variant_policy)."""
    security_test: Any = None
    """A key of older upstream tasks: accepted and ignored."""
    intent_test: Any = None
    """A key of older upstream tasks: accepted and ignored."""

    @field_validator("patch", "future_test", mode="before")
    @classmethod
    def _path(cls, value: Any) -> str | None:
        return _relative_path(value)

    @field_validator("poc", "variants", mode="before", json_schema_input_type=LIST_INPUT)
    @classmethod
    def _inputs(cls, value: Any) -> list[Any]:
        return _as_list(value)


class TaskLimits(Strict):
    """`limits:` in config.yaml (an SSEBench extension): this task's resource limits, where the defaults do not fit."""

    pids: int | None = Field(default=None, ge=64)
    """How many processes the run's container may have at once (at least 64)."""
    memory: str | None = None
    """The run container's memory, in bytes or with k, m, g (e.g. 8g)."""
    cpus: float | None = Field(default=None, gt=0)
    """How many CPUs the run's container may use (e.g. 2 or 0.5)."""
    file_size: str | None = None
    """The largest file a process of the run may write, in bytes or with k, m, g."""

    @field_validator("memory", "file_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> str | None:
        if value is None:
            return None
        from ssebench.limits import LimitsError, parse_size

        try:
            parse_size(value, "size")
        except LimitsError:
            raise ValueError(f"{value!r} is not a size; give bytes or a number with k, m, g (e.g. 8g)") from None
        return str(value)

    def overrides(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class TaskConfig(Strict):
    """`sse/config.yaml`, the upstream SSEBench schema (plus the optional `limits`)."""

    id: str
    """The task's id: the folder's name; letters and digits separated by '.', '_', '__' or '-' (at most 128)."""
    project: str
    """The upstream project's name."""
    repository: str
    """The upstream project's repository (an https:// URL)."""
    language: Literal["c", "go", "rust"]
    """The project's language: it decides which files grading counts as code and which it protects by
    default."""
    source: str
    """Where the Dockerfile puts the source tree in the image (absolute, e.g. /src/tlvkit): what the agent
    edits."""
    task_description: TaskDescription
    """What the agent is told of the bug; at least one of its fields must be given."""
    scripts: Scripts
    """The build, PoC and test scripts."""
    files: Files
    """The hidden files: the fix, the proofs of concept, the fix's tests."""
    sanitizer: str | None = None
    """The sanitizer that reports the bug (address, undefined, leak, none): for people; grading does not
    read it."""
    type: str | None = None
    """The kind of bug (e.g. Heap-buffer-overflow): for people; grading does not read it."""
    binary: str | None = None
    """The program the proofs of concept run (upstream's key): for people; grading does not read it."""
    trigger_commit: str | None = None
    """The upstream commit with the bug (upstream's key): for people; grading does not read it."""
    patch_commit: str | None = None
    """The upstream commit with the fix (upstream's key): for people; grading does not read it."""
    reference: list[str] = Field(default_factory=list)
    """URLs of the advisories, the fix and the report; the advisory ids in them are the task's (tasks list)."""
    originality: Literal["public", "crafted"] | None = None
    """public: a disclosed vulnerability of a real project; crafted: a bug made for the benchmark."""
    limits: TaskLimits | None = None
    """This task's resource limits where the defaults (SSEBENCH_LIMIT_*) do not fit; a run's own option
    overrides them."""
    protected_files: list[TreePattern] = Field(default_factory=list)
    """Paths in the tree (git pathspec globs) grading takes from the original beyond the language's defaults,
    such as a PoC harness or a test script in the tree (an SSEBench extension)."""
    fix_may_change: list[TreePattern] = Field(default_factory=list)
    """Paths beyond code (tests, build files) the fix may change, whose changes grading keeps (an SSEBench
    extension)."""
    variant_policy: contract.VariantPolicy = "fail"
    """What a variant that still triggers the bug makes of the grade: fail (a failed check, the default) or
    report (counted in variants_passed, the grade stands) (an SSEBench extension)."""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        check_task_id(value)
        return value

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not value.startswith("https://"):
            raise ValueError(f"'{value}' must be an https:// URL")
        return value.strip()

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        path = PurePosixPath(value.strip())
        if not path.is_absolute() or len(path.parts) < 2 or ".." in path.parts:
            raise ValueError(f"'{value}' must be the absolute path of the source tree in the image, e.g. /src/gjson")
        # A run mounts a volume of its own there: it must not hide, or sit inside, what the runtime uses.
        for fixed in RUNTIME_PATHS:
            if path == fixed or fixed in path.parents or path in fixed.parents:
                raise ValueError(
                    f"'{value}' overlaps {fixed}, which the runtime uses; put the tree elsewhere, e.g. /src/<project>"
                )
        if path in SYSTEM_PATHS:
            raise ValueError(f"'{value}' is a system directory; put the tree elsewhere, e.g. /src/<project>")
        return str(path)

    @field_validator("sanitizer", "type", "binary", "trigger_commit", "patch_commit", "originality", mode="before")
    @classmethod
    def _optional_text(cls, value: Any) -> Any:
        return None if _is_none(value) else value

    @field_validator("protected_files", "fix_may_change", mode="before", json_schema_input_type=LIST_INPUT)
    @classmethod
    def _patterns(cls, value: Any) -> list[Any]:
        return _as_list(value)

    @field_validator("reference", mode="before", json_schema_input_type=LIST_INPUT)
    @classmethod
    def _urls(cls, value: Any) -> list[str]:
        value = _as_list(value)
        if not all(isinstance(v, str) for v in value):
            raise ValueError("must be a list of URLs")
        return [v.strip() for v in value]


def check_task_id(value: str) -> None:
    """Raise ValueError unless `value` is a valid task id."""
    if len(value) > TASK_ID_MAX:
        raise ValueError(f"'{value[:40]}…' is longer than {TASK_ID_MAX} characters")
    if not TASK_ID_PATTERN.match(value):
        raise ValueError(f"'{value}' is not a valid task id: use letters and digits separated by '.', '_', '__' or '-'")


def task_file(task_dir: Path, inside: str) -> Path:
    """Where a path inside /ssebench comes from in the task folder.

    `scripts/build.sh` is `sse/build.sh`; everything else keeps its path
    under `sse/` (`pocs/x` is `sse/pocs/x`).
    """
    parts = PurePosixPath(inside).parts
    if len(parts) == 2 and parts[0] == _SCRIPT_DIR:
        return task_dir / "sse" / parts[1]
    return task_dir / "sse" / inside


@dataclass(frozen=True)
class Task:
    """A loaded task folder."""

    path: Path
    config: TaskConfig
    dataset: str
    # The version in the dataset's dataset.yaml, when the task is in a dataset.
    dataset_version: str | None = None
    # Why dataset.yaml quarantines the task (its runs are noise, left out of the score table); None if it does not.
    quarantined: str | None = None
    # Why dataset.yaml lists the task as over the cost ceiling (its runs carry the `long` marker); None if not.
    long: str | None = None

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def language(self) -> str:
        return self.config.language

    @property
    def config_path(self) -> Path:
        return self.path / "sse" / "config.yaml"

    @property
    def dockerfile(self) -> Path:
        return self.path / "Dockerfile"

    @cached_property
    def digest(self) -> str:
        """A digest of the task folder's files: a run's results belong to this version of the task."""
        from ssebench.image import hash_tree

        return hash_tree(self.path)[:16]

    def advisories(self) -> list[str]:
        """The advisory ids (CVE, RUSTSEC, GHSA) the task names in its id and references, in order."""
        found: list[str] = []
        for text in (self.id, *self.config.reference):
            for match in ADVISORY.findall(text):
                prefix, _, rest = match.partition("-")
                advisory = f"{prefix.upper()}-{rest.lower() if prefix.upper() == 'GHSA' else rest.upper()}"
                if advisory not in found:
                    found.append(advisory)
        return found

    def checks(self) -> list[str]:
        """The checks this task supports, in grading order (`contract.supported_checks`, as the runtime
        counts them)."""
        scripts, files = self.config.scripts, self.config.files
        return contract.supported_checks(
            build=bool(scripts.build),
            run=bool(scripts.run),
            poc=bool(files.poc),
            test=bool(scripts.test),
            future_test=bool(files.future_test),
        )

    def referenced_files(self) -> list[tuple[str, str]]:
        """(field, path inside /ssebench) for every file config.yaml names."""
        return named_files(self.config.model_dump())


def named_files(data: Any) -> list[tuple[str, str]]:
    """(field, path inside /ssebench) for every file a config.yaml's data names: of a valid config (its
    fields), or of one that is not (what can be read of it, so its missing files are said beside its schema
    problems)."""

    def section(name: str) -> dict[str, Any]:
        value = data.get(name) if isinstance(data, dict) else None
        return value if isinstance(value, dict) else {}

    def listed(value: Any) -> list[Any]:
        return value if isinstance(value, list) else []

    scripts, files, description = section("scripts"), section("files"), section("task_description")
    refs: list[tuple[str, Any]] = [
        ("scripts.build", scripts.get("build")),
        ("scripts.run", scripts.get("run")),
        ("scripts.test", scripts.get("test")),
        ("files.patch", files.get("patch")),
        ("files.future_test", files.get("future_test")),
    ]
    refs += [(f"files.poc[{i}]", p) for i, p in enumerate(listed(files.get("poc")))]
    refs += [(f"files.variants[{i}]", p) for i, p in enumerate(listed(files.get("variants")))]
    refs += [(f"task_description.crash_report[{i}]", p) for i, p in enumerate(listed(description.get("crash_report")))]
    return [(field, path) for field, path in refs if isinstance(path, str) and path]


def load_task(
    task_dir: Path, dataset: str | None = None, *, check_files: bool = True, dataset_version: str | None = None
) -> Task:
    """Load and validate a task folder.

    Raises ConfigErrors listing every problem: schema errors, an id that
    differs from the folder name, files the config names that do not exist,
    a missing Dockerfile.
    """
    task_dir = Path(task_dir)
    config_path = task_dir / "sse" / "config.yaml"
    data = read_yaml(config_path)
    try:
        config = validate(TaskConfig, config_path, data)
    except ConfigErrors as exc:  # with the files it names that are missing, so that one pass says all
        raise ConfigErrors(
            exc.errors + (_missing_files(task_dir, config_path, named_files(data)) if check_files else [])
        ) from None
    task = Task(
        path=task_dir, config=config, dataset=dataset or task_dir.resolve().parent.name, dataset_version=dataset_version
    )
    problems: list[ConfigError] = []
    if config.id != task_dir.name:
        problems.append(ConfigError(config_path, "id", f"'{config.id}' differs from the folder name '{task_dir.name}'"))
    if check_files:
        if not task.dockerfile.is_file():
            problems.append(
                ConfigError(task.dockerfile, "", "file not found; every task builds its case image from it")
            )
        problems += _missing_files(task_dir, config_path, task.referenced_files())
    if problems:
        raise ConfigErrors(problems)
    return task


def _missing_files(task_dir: Path, config_path: Path, named: list[tuple[str, str]]) -> list[ConfigError]:
    problems = []
    for field, inside in named:
        path = PurePosixPath(inside)
        if path.is_absolute() or ".." in path.parts:
            continue  # a path the schema refuses: its problem is said already
        where = task_file(task_dir, inside)
        if not where.exists():
            problems.append(
                ConfigError(config_path, field, f"'{inside}' does not exist (looked for {where.relative_to(task_dir)})")
            )
    return problems
