"""Host settings: each field from SSEBENCH_<NAME> unless given, parsed as its type, a bad one named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.errors import SSEBenchError
from ssebench.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_fields_come_from_the_environment_as_their_types(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SSEBENCH_BUILD_JOBS", "5")
    monkeypatch.setenv("SSEBENCH_LIMIT_CPUS", "1.5")
    monkeypatch.setenv("SSEBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SSEBENCH_PREFIX", "mine/")
    settings = get_settings()
    assert (settings.build_jobs, settings.limit_cpus, settings.cache_dir, settings.prefix) == (5, 1.5, tmp_path, "mine")


def test_a_value_given_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSEBENCH_BUILD_JOBS", "5")
    assert Settings(build_jobs=3).build_jobs == 3
    assert Settings().build_jobs == 5


def test_without_the_environment_the_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSEBENCH_GATEWAY_PORT", raising=False)
    assert Settings().gateway_port == 4080


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SSEBENCH_GATEWAY_PORT", "80", "greater than or equal to 1024"),
        ("SSEBENCH_BUILD_JOBS", "two", "valid integer"),
        ("SSEBENCH_PREFIX", "Upper", "lower-case image name prefix"),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SSEBenchError, match=f"^{name}: .*{says}"):
        get_settings()


def test_settings_are_frozen() -> None:
    with pytest.raises(ValueError):
        Settings().build_jobs = 4


@pytest.mark.parametrize(
    "name, value, said",
    [
        ("SSEBENCH_LIMIT_MEMORY", "lots", "memory: 'lots' is not a size"),
        ("SSEBENCH_LIMIT_FILE_SIZE", "1", "file_size=1 is below 1m"),
        ("SSEBENCH_LIMIT_CPUS", "-1", "cpus=-1: give 0.01 to"),
        ("SSEBENCH_LIMIT_PIDS", "0", "pids=0"),
    ],
)
def test_a_bad_default_limit_names_its_variable_once_when_the_settings_are_read(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SSEBenchError) as raised:
        get_settings()
    message = str(raised.value)
    assert message.startswith(f"{name}: ") and said in message and message.count("SSEBENCH_") == 1, message
