"""Reading the project's YAML files into pydantic models, with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ssebench.errors import ConfigError, ConfigErrors

M = TypeVar("M", bound=BaseModel)
# Where every file format is described; errors about a file's keys point there.
FORMATS_DOC = "docs/formats.md"


class Strict(BaseModel):
    """A file section: unknown keys are an error, values are immutable.

    Each field's docstring (the string under it) is its description in the
    file's JSON Schema and in docs/formats.md (`ssebench.formats`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


def _field_of(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key (check its spelling against the file format: {FORMATS_DOC})"
    if kind == "missing":
        return "required key is missing"
    return str(error["msg"]).removeprefix("Value error, ")


def read_yaml(path: Path) -> Any:
    """Load a YAML file; a missing or malformed file is a ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            path, "", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(path, "", f"cannot be read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(path, "", f"{where}{problem}") from None


def validate(model: type[M], path: Path, data: Any) -> M:
    """Validate a file's data; raise ConfigErrors with one line per problem."""
    if not isinstance(data, dict):
        raise ConfigErrors([ConfigError(path, "", "must be a YAML mapping of keys to values")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigErrors([ConfigError(path, _field_of(e["loc"]), _problem(e)) for e in exc.errors()]) from None


def load(model: type[M], path: Path) -> M:
    """Read and validate a YAML file."""
    return validate(model, path, read_yaml(path))
