"""The file formats a user writes or reads, as JSON Schemas made from the models that read and write them.

Each format's home is its model: pydantic models for the YAML files (their
fields' docstrings are the schemas' descriptions), the SDK's dataclasses
for result.json and the run's record for summary.json. Nothing here
restates a field: `ssebench dataset schema` writes what these functions
make, and docs/formats.md's field tables are `field_table`'s, checked
against it by the tests.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from ssebench.schema import FORMATS_DOC

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Not a place to fetch them from: editors map files to schemas by path.
ID_PREFIX = "urn:ssebench:schema:"


@dataclass(frozen=True)
class Format:
    """One file format: its schema's file name, the files it describes, and how its schema is made."""

    name: str
    title: str
    files: str
    make: Callable[[], dict[str, Any]]

    @property
    def file_name(self) -> str:
        return f"{self.name}.schema.json"

    def schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12), with its $id, title and what files it is for."""
        made = self.make()
        return {
            "$schema": DIALECT,
            "$id": f"{ID_PREFIX}{self.file_name}",
            "title": self.title,
            "description": f"{self.files}; see {FORMATS_DOC}.",
            **{key: value for key, value in made.items() if key not in ("title", "description")},
        }


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's attributes (its bases' too), by attribute.

    Read here, when a schema is made, rather than by pydantic when each
    model is defined (`use_attribute_docstrings`), which would cost every
    command that loads a file the parsing of its modules' source.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # built in, or made at run time: no source
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _validation(model: Any) -> dict[str, Any]:
    from pydantic import TypeAdapter
    from pydantic.json_schema import GenerateJsonSchema

    class Documented(GenerateJsonSchema):
        """pydantic's schema, each field described by its docstring (where nothing else describes it)."""

        def _described(self, made: dict[str, Any], cls: type) -> dict[str, Any]:
            docs = attribute_docs(cls)
            for name, prop in made.get("properties", {}).items():
                if name in docs:
                    prop.setdefault("description", docs[name])
            return made

        def model_schema(self, schema: Any) -> dict[str, Any]:
            return self._described(super().model_schema(schema), schema["cls"])

        def dataclass_schema(self, schema: Any) -> dict[str, Any]:
            return self._described(super().dataclass_schema(schema), schema["cls"])

    schema: dict[str, Any] = TypeAdapter(model).json_schema(mode="validation", schema_generator=Documented)
    return schema


def _task() -> dict[str, Any]:
    from ssebench.task import TaskConfig

    return _validation(TaskConfig)


def _agent() -> dict[str, Any]:
    from ssebench.agent import AgentConfig

    return _validation(AgentConfig)


def _model() -> dict[str, Any]:
    from ssebench.gateway._models import ModelConfig

    return _validation(ModelConfig)


def _script() -> dict[str, Any]:
    from ssebench.gateway.scripted import Script

    return _validation(Script)


def _dataset() -> dict[str, Any]:
    from ssebench.dataset import DatasetConfig

    return _validation(DatasetConfig)


def _result() -> dict[str, Any]:
    from sse.result import RunResult

    schema = _validation(RunResult)
    # result.json keeps the grade inside `patch_result` (upstream's layout: RunResult.to_json), not beside it.
    status = schema["properties"].pop("status")
    # ... and a file without `patch_result` is not a result (RunResult.from_json).
    schema["required"] = ["patch_result"]
    patch = schema["$defs"]["PatchResult"]
    patch["properties"] = {"status": status, **patch["properties"]}
    patch["required"] = ["status", *patch.get("required", [])]
    return schema


def _summary() -> dict[str, Any]:
    from pydantic import Field, create_model

    from ssebench.record import SCHEMA_VERSION, RunRecord, TaskSummary

    hints = get_type_hints(RunRecord)
    docs = attribute_docs(RunRecord)
    by_name = {f.name: f for f in fields(RunRecord)}
    kept: dict[str, Any] = {}
    for name, key in RunRecord.summary_keys():
        f = by_name[name]
        if f.default is not MISSING:
            kept[key] = (hints[name], Field(default=f.default, description=docs.get(name)))
        elif f.default_factory is not MISSING:
            kept[key] = (hints[name], Field(default_factory=f.default_factory, description=docs.get(name)))
        else:
            kept[key] = (hints[name], Field(description=docs.get(name)))
    model = create_model(
        "summary",
        schema_version=(
            int,
            Field(default=SCHEMA_VERSION, description="The format's version; a file without it is version 0."),
        ),
        task=(TaskSummary, Field(description="The task that ran, and the version of its files.")),
        config=(
            dict[str, Any],
            Field(
                description="The run's settings (RunConfig.describe): agent and its version, model, difficulty, "
                "mode, trial, time limits, egress, resource limits; `--resume` compares them."
            ),
        ),
        **kept,
    )
    return _validation(model)


FORMATS = (
    Format("dataset", "dataset.yaml", "A dataset's dataset.yaml", _dataset),
    Format("config", "config.yaml", "A task's sse/config.yaml", _task),
    Format("agent", "agent.yaml", "An agent's agents/<name>/agent.yaml", _agent),
    Format("model", "model file", "A model file, models/<name>.yaml", _model),
    Format("script", "scripted model script", "A scripted model's playback file (a model file's script)", _script),
    Format("result", "result.json", "A run's result.json, the container's grade of the run", _result),
    Format("summary", "summary.json", "A run's summary.json, the harness's record of the run", _summary),
)


def write_schemas(out: Path) -> list[Path]:
    """Write every format's schema into `out` (made if missing); return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in FORMATS:
        path = out / fmt.file_name
        path.write_text(json.dumps(fmt.schema(), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


# docs/formats.md's field tables.


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: dict[str, Any] = schema["$defs"][ref.rsplit("/", 1)[1]]
    return target


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    if "anyOf" in node:
        kinds = list(dict.fromkeys(_type(schema, n) for n in node["anyOf"]))
        return " or ".join([k for k in kinds if k != "null"] + (["null"] if "null" in kinds else []))
    if "enum" in node:
        return " \\| ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    resolved = _resolve(schema, node)
    kind = resolved.get("type")
    if kind == "array":
        items = _type(schema, resolved.get("items", {}))
        return f"list of ({items})" if " or " in items else f"list of {items}"
    if kind == "object" and "properties" not in resolved:
        extra = resolved.get("additionalProperties")
        return f"mapping to {_type(schema, extra)}" if isinstance(extra, dict) and extra else "mapping"
    if kind == "object":
        return "mapping (below)"
    return str(kind) if kind else "any"


def _nested(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """The object (with properties) a field holds: itself, one of its alternatives, or its list's items."""
    for option in node.get("anyOf", [node]):
        resolved = _resolve(schema, option)
        if resolved.get("type") == "array":
            resolved = _resolve(schema, resolved.get("items", {}))
        if "properties" in resolved:
            return resolved
    return None


def field_rows(schema: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """(field, type, default, meaning) of every field, nested ones as dotted paths (`a[].b` inside lists)."""

    def walk(obj: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, str, str]]:
        required = set(obj.get("required", []))
        for name, node in obj.get("properties", {}).items():
            path = f"{prefix}{name}"
            if name in required:
                default = "required"
            elif "default" in node:
                default = f"`{json.dumps(node['default'])}`"
            else:  # a default made by a factory: an empty list or mapping
                kinds = {_resolve(schema, option).get("type") for option in node.get("anyOf", [node])}
                default = "`[]`" if "array" in kinds else "`{}`" if "object" in kinds else "optional"
            meaning = " ".join(str(node.get("description", "")).split())
            yield path, _type(schema, node), default, meaning
            inner = _nested(schema, node)
            if inner is not None:
                many = any(_resolve(schema, o).get("type") == "array" for o in node.get("anyOf", [node]))
                yield from walk(inner, f"{path}[]." if many else f"{path}.")

    yield from walk(schema, "")


def field_table(fmt: Format) -> str:
    """The markdown table of a format's fields, as docs/formats.md has it."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, kind, default, meaning in field_rows(fmt.schema()):
        escaped = meaning.replace("|", "\\|")
        lines.append(f"| `{path}` | {kind} | {default} | {escaped} |")
    return "\n".join(lines)


if __name__ == "__main__":
    # The tables to paste into docs/formats.md when a field changes.
    for each in FORMATS:
        print(f"<!-- {each.file_name} -->\n{field_table(each)}\n")
