"""Host-side settings, declared once, read from `SSEBENCH_*` environment variables."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ssebench.errors import SSEBenchError
from ssebench.limits import Limits

# The checkout this package runs from: images/, agents/ and datasets/ live here.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ssebench"


ENV_PREFIX = "SSEBENCH_"


class Settings(BaseModel):
    """Every knob of the harness. Each field `x` not given is read from `SSEBENCH_X`.

    A plain model that reads the environment itself: pydantic-settings cost every pytest process that
    loads the plugin 90 ms (its import and its teardown at exit) for what this does.
    """

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, given: Any) -> Any:
        if not isinstance(given, dict):
            return given
        found = {
            name: os.environ[ENV_PREFIX + name.upper()]
            for name in cls.model_fields
            if ENV_PREFIX + name.upper() in os.environ
        }
        return {**found, **given}

    # Image names are `<prefix>/<name>`; upstream Dockerfiles name their base
    # as `${SSEBENCH_REGISTRY}/base-generic-<lang>`, and get this prefix.
    prefix: str = "ssebench"
    os_image: str = "debian:bookworm-slim"
    debian_suite: str = "bookworm"
    debian_mirror: str = "http://deb.debian.org/debian"
    base_version: str = "1.0.0"
    cache_dir: Path = _default_cache()
    images_dir: Path = PROJECT_ROOT / "images"
    agents_dir: Path = PROJECT_ROOT / "agents"
    # Model declarations the gateway serves (ssebench.gateway), and the port its
    # per-run listeners take on each run network's host address.
    models_dir: Path = PROJECT_ROOT / "models"
    gateway_port: int = Field(default=4080, ge=1024, le=65535)
    # What one run's container can take of the gateway process, which serves every run of the
    # session (docs/gateway.md, "Limits"): its address space ("0": none), open model connections
    # in all and per run, a run's requests at once, and how long a client may take to send a
    # request's head and its body, and a finishing run's calls to complete.
    gateway_memory: str = "2g"
    gateway_connections: int = Field(default=1024, ge=1)
    gateway_run_connections: int = Field(default=32, ge=1)
    gateway_run_requests: int = Field(default=4, ge=1)
    gateway_idle_timeout: float = Field(default=10.0, gt=0)
    gateway_body_timeout: float = Field(default=60.0, gt=0)
    gateway_finish_wait: float = Field(default=20.0, gt=0)
    # How many tasks' image chains build at once. One build keeps about one
    # core busy (the daemon, the storage driver and dpkg take turns), so two
    # chains use a 2-core machine fully; see benchmarks/image_build.py.
    build_jobs: int = Field(default=2, ge=1, le=16)
    # A registry the machines of a cluster share images through (`--registry`,
    # ssebench.registry): HOST:PORT, empty for none. Builds push to it; a
    # machine that lacks an image pulls it from there before building it.
    image_registry: str = ""
    # Default resource limits of every run container (ssebench.limits): a task's
    # config.yaml and a run's --run-limits override them.
    limit_pids: int = 1024
    limit_memory: str = "4g"
    limit_cpus: float = Field(default_factory=lambda: float(min(2, os.cpu_count() or 1)))
    limit_file_size: str = "4g"

    def default_limits(self) -> Limits:
        """The limits a run gets unless its task or its options say otherwise."""
        return Limits().merged(
            {
                "pids": self.limit_pids,
                "memory": self.limit_memory,
                "cpus": self.limit_cpus,
                "file_size": self.limit_file_size,
            },
            "SSEBENCH_LIMIT_*",
        )

    @field_validator("limit_pids", "limit_memory", "limit_cpus", "limit_file_size")
    @classmethod
    def _limit(cls, value: Any, info: ValidationInfo) -> Any:
        """Each default limit checked as the variable that sets it, so its error names that variable, once."""
        from ssebench.limits import Limits, LimitsError

        assert info.field_name is not None
        try:
            Limits().merged({info.field_name.removeprefix("limit_"): value}, "")
        except LimitsError as exc:
            raise ValueError(str(exc).removeprefix(": ")) from None
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        value = value.rstrip("/")
        if not value or value != value.lower():
            raise ValueError("must be a non-empty, lower-case image name prefix such as 'ssebench'")
        return value

    @field_validator("gateway_memory")
    @classmethod
    def _gateway_memory(cls, value: str) -> str:
        from ssebench.limits import LimitsError, parse_size

        if value.strip() != "0":
            try:
                parse_size(value, "memory")
            except LimitsError:
                raise ValueError(
                    f"{value!r} is not a size; give bytes or a number with k, m, g (e.g. 2g), or 0 for no limit"
                ) from None
        return value

    @field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        from ssebench.registry import parse_registry

        return parse_registry(value) if value else ""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process; a bad value names its variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ENV_PREFIX + str(first["loc"][0]).upper()
        raise SSEBenchError(f"{name}: {str(first['msg']).removeprefix('Value error, ')}") from None
