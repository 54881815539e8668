"""Model declarations: one `models/<name>.yaml` per model the gateway serves.

    name: gpt-4o-mini                         # = the file's stem
    base_url: https://api.openai.com/v1       # an upstream ...
    protocol: openai-chat                     # ... and the API it speaks (default openai-chat)
    # script: scripted/fix.yaml               # ... or a scripted playback (path relative to this file)
    upstream_model: gpt-4o-mini               # the id sent upstream (default: name)
    api_key_env: OPENAI_API_KEY               # the HOST variable that holds the provider key
    price: {input: 0.15, output: 0.60}        # USD per million tokens (default 0)
    # price: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}   # cached input (default: input)
    budget: {tokens: 2000000, cost: 5.0}      # per run (optional)
    max_output_tokens: 4096                   # cap on each answer (optional)

Only `*.yaml` files at the top of the folder are models (so a
`*.yaml.example` or a `scripted/` subfolder is not). A bad file is a
`ConfigError` naming the file, the field and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ssebench.errors import ConfigError, ConfigErrors
from ssebench.gateway._apis import MODEL_PROTOCOLS, ModelProtocol
from ssebench.schema import Strict, load

# The model listeners' port, the same on every run network (each has its own IP). Not 4000,
# which LiteLLM's proxy takes by default: an upstream proxy on the host listening on every
# address would keep the gateway from binding that port on a run network's address.
MODEL_PORT = 4080
MODEL_NAME = re.compile(r"^[A-Za-z0-9]+(?:[._-]+[A-Za-z0-9]+)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys people write by habit that must never hold a secret in a file.
_SECRET_KEYS = ("api_key", "key", "token", "secret")


class _StrictModel(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Price(_StrictModel):
    """USD per million tokens: input tokens, output tokens, and input read from or written to the provider's cache.

    A cache price left out is the input price: a provider that bills cached
    input otherwise is written down, not guessed.
    """

    input: float = Field(default=0.0, ge=0)
    """USD per million prompt tokens."""
    output: float = Field(default=0.0, ge=0)
    """USD per million completion tokens."""
    cache_read: float | None = Field(default=None, ge=0)
    """USD per million input tokens read from the provider's cache (default: the input price)."""
    cache_write: float | None = Field(default=None, ge=0)
    """USD per million input tokens written to the provider's cache (default: the input price)."""

    def cost(
        self, prompt_tokens: int, completion_tokens: int, cache_read_tokens: int = 0, cache_write_tokens: int = 0
    ) -> float:
        """The cost of a call; `prompt_tokens` is all its input, the cache tokens among them."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        plain = max(0, prompt_tokens - cache_read_tokens - cache_write_tokens)
        return (
            plain * self.input + cache_read_tokens * read + cache_write_tokens * write + completion_tokens * self.output
        ) / 1_000_000


class Budget(_StrictModel):
    """What one run may spend; a limit left out is no limit."""

    tokens: int | None = Field(default=None, gt=0)
    """Tokens (prompt and completion) one run may use."""
    cost: float | None = Field(default=None, gt=0)
    """USD one run may spend, at `price`."""

    def exhausted(self, tokens: int, cost: float) -> str | None:
        """Why a run that has used `tokens` and `cost` may not call again, or None."""
        if self.tokens is not None and tokens >= self.tokens:
            return f"{tokens} of {self.tokens} tokens used"
        if self.cost is not None and cost >= self.cost:
            return f"${cost:.6f} of ${self.cost:.6f} spent"
        return None


class ModelConfig(_StrictModel):
    """One model the gateway serves (see the module's docstring for the file)."""

    name: str
    """The model's name, `--model NAME`: the file's name without .yaml."""
    base_url: str | None = None
    """An OpenAI-compatible server: the URL /chat/completions is under (e.g. https://api.openai.com/v1). Give
    this or script."""
    protocol: ModelProtocol = "openai-chat"
    """The protocol the upstream at base_url speaks: openai-chat, openai-responses or anthropic-messages (a
    scripted model serves all three; it takes no protocol)."""
    script: str | None = None
    """A scripted playback file, relative to the model file (e.g. scripted/fix.yaml), for tests and demos.
    Give this or base_url."""
    upstream_model: str | None = None
    """The model id sent upstream (default: name)."""
    api_key_env: str | None = None
    """The name of the host's environment variable that holds the provider key; never the key itself."""
    price: Price = Price()
    """USD per million tokens, for the cost the gateway counts."""
    budget: Budget | None = None
    """What one run may use; the gateway refuses further calls (429 budget_exhausted) once either limit is
    reached. `--model-budget` overrides it."""
    max_output_tokens: int | None = Field(default=None, gt=0)
    """A cap on each answer: the max_tokens sent upstream."""
    # Where the file was read from; scripts are relative to its folder. Set by load_model, never in the file.
    source: SkipJsonSchema[Path | None] = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _SECRET_KEYS:
                if key in data:
                    raise ValueError(
                        f"'{key}': never write a provider key into a file; export it on the host "
                        "and name the variable in api_key_env"
                    )
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not MODEL_NAME.match(value) or len(value) > 128:
            raise ValueError(f"'{value}' must be letters and digits separated by '.', '_' or '-'")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"'{value}' must be an http(s) URL such as https://api.openai.com/v1")
        if parts.query or parts.fragment:
            raise ValueError(
                f"'{value}' must not carry a query or fragment; give the URL that the API's path "
                "(/chat/completions, /responses, /messages) is under, such as https://api.openai.com/v1"
            )
        return value.rstrip("/")

    @field_validator("script")
    @classmethod
    def _script(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"'{value}' must be relative to the model file, inside its folder, e.g. scripted/fix.yaml")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError(f"'{value}' must be the NAME of an environment variable, such as OPENAI_API_KEY")
        return value

    @model_validator(mode="after")
    def _one_upstream(self) -> ModelConfig:
        if (self.base_url is None) == (self.script is None):
            raise ValueError("give exactly one of base_url (an upstream server) and script (a scripted playback file)")
        if self.script is not None and "protocol" in self.model_fields_set:
            raise ValueError("protocol is the upstream's (base_url's): a scripted playback speaks every protocol")
        return self

    @property
    def protocols(self) -> frozenset[ModelProtocol]:
        """The protocols an agent may call this model in: the upstream's, or all for a scripted playback.

        The gateway forwards a call only in the upstream's own protocol; it translates none.
        """
        return frozenset(MODEL_PROTOCOLS) if self.script is not None else frozenset({self.protocol})

    @property
    def upstream_id(self) -> str:
        """The model id sent upstream."""
        return self.upstream_model or self.name

    @property
    def script_path(self) -> Path | None:
        if self.script is None:
            return None
        folder = self.source.parent if self.source is not None else Path(".")
        return folder / self.script


def load_model(path: Path) -> ModelConfig:
    """Read one model file; its scripted playback, if any, is loaded too so a bad script fails here.

    Raises ConfigError (or ConfigErrors, one per problem).
    """
    from ssebench.gateway.scripted import load_script

    data = load(ModelConfig, path)
    if data.name != path.stem:
        raise ConfigErrors(
            [
                ConfigError(
                    path,
                    "name",
                    f"'{data.name}' differs from the file name; name the model '{path.stem}' or rename the file",
                )
            ]
        )
    model = data.model_copy(update={"source": path})
    if model.script_path is not None:
        if not model.script_path.is_file():
            raise ConfigErrors(
                [ConfigError(path, "script", f"{model.script_path} not found; give a path relative to this file")]
            )
        load_script(model.script_path)
    return model


def load_models(folder: Path, names: Collection[str] | None = None) -> dict[str, ModelConfig]:
    """Every `*.yaml` at the top of `folder` (only those of `names`, when given), by name. A missing folder
    has none.

    With `names`, the other files are not read: one broken model file does
    not keep a session from the models it asked for. Raises ConfigErrors
    naming every bad file's problems at once.
    """
    models, errors = read_models(folder, names)
    if errors:
        raise ConfigErrors(errors)
    return models


def read_models(folder: Path, names: Collection[str] | None = None) -> tuple[dict[str, ModelConfig], list[ConfigError]]:
    """`load_models`'s models, and the problems of the files that could not be read, apart."""
    if not folder.is_dir():
        return {}, []
    models: dict[str, ModelConfig] = {}
    errors: list[ConfigError] = []
    for path in sorted(folder.glob("*.yaml")):
        if not path.is_file() or (names is not None and path.stem not in names):
            continue
        try:
            model = load_model(path)
        except ConfigErrors as exc:
            errors += exc.errors
        except ConfigError as exc:
            errors.append(exc)
        else:
            models[model.name] = model
    return models, errors
