"""The runtime's reading of /ssebench/config.yaml, into the contract's `TaskFile`.

A module of its own for its YAML import: the contract depends on the standard library alone.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ssebench.runtime.contract import TaskFile


def load_taskfile(path: Path) -> TaskFile:
    return TaskFile.parse(yaml.safe_load(path.read_text(encoding="utf-8")))
