"""sse.ai's OpenCode config: the run's model through the proxy, else Anthropic by name."""

from __future__ import annotations

import pytest
from sse.ai import build_opencode_config


@pytest.fixture(autouse=True)
def no_run_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SSE_MODEL_NAME", "SSE_BASE_URL", "SSE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_the_runs_model_through_the_proxy_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_MODEL_NAME", "m1")
    monkeypatch.setenv("SSE_BASE_URL", "http://proxy:4000")
    monkeypatch.setenv("SSE_API_KEY", "run-key")
    config = build_opencode_config("ignored-model", mcp_url="http://localhost:3000/mcp")
    [(name, provider)] = config["provider"].items()
    assert config["model"] == f"{name}/m1"
    assert provider["options"] == {"baseURL": "http://proxy:4000", "apiKey": "run-key"}
    assert config["mcp"]["ssebench"] == {"type": "remote", "url": "http://localhost:3000/mcp", "enabled": True}


def test_anthropic_by_name_without_embedding_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret-key")
    config = build_opencode_config("claude-sonnet-4-20250514")
    assert config["model"] == "anthropic/claude-sonnet-4-20250514"
    assert "secret-key" not in repr(config) and "provider" not in config and "mcp" not in config


def test_partial_run_settings_need_a_model_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_MODEL_NAME", "m1")  # no proxy URL or key
    with pytest.raises(ValueError, match="model_name"):
        build_opencode_config()
